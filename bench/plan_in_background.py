"""Run a plan run by run and commit each finished run's metrics into the repository as it lands.

    nice -n 19 python bench/plan_in_background.py sharing --root /work/runs --data nbs/data &

The metrics (not the checkpoints) of run `<config>/seed_<s>` are copied to `<data>/<plan>/<config>/seed_<s>/` and
committed at once, so a plan spans several working sessions, even on fresh machines: a run whose committed metrics
are complete is skipped, a run stopped half-way resumes from its checkpoints under `--root` when they are still
there, and starts over when they are not. Runs go seed by seed, so what has landed is always complete pairs plus at
most one unpaired run.

A plan with a strong node (`heterogeneous`) trains it before its first run; its metrics are committed under
`<data>/<plan>/strong/` once it finishes. Its model stays under `--root` (it is a whole model, not for git): on a
fresh machine it is trained again first.
"""
import argparse, shutil, subprocess, sys, time
from pathlib import Path
from sapo_nb.experiments import resolve_plan, run_plan, run_complete


def commit(paths, message, repo, tries=30):
    "git add + commit only `paths`; waits out another git process holding the index lock."
    for _ in range(tries):
        add = subprocess.run(["git", "-C", repo, "add", "--", *map(str, paths)], capture_output=True, text=True)
        if add.returncode == 0:
            c = subprocess.run(["git", "-C", repo, "commit", "-q", "-m", message, "--", *map(str, paths)], capture_output=True, text=True)
            if c.returncode == 0: return True
            if "index.lock" not in c.stderr: print(c.stdout, c.stderr, file=sys.stderr); return False
        elif "index.lock" not in add.stderr: print(add.stderr, file=sys.stderr); return False
        time.sleep(10)
    return False


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("plan"); p.add_argument("--root", default="sapo_runs/experiments"); p.add_argument("--data", default="nbs/data")
    p.add_argument("--seeds", type=int, nargs="+", default=None)
    a = p.parse_args(argv)
    repo = Path(__file__).resolve().parents[1]
    committed = resolve_plan(a.plan, a.data, seeds=a.seeds)
    resolved = resolve_plan(a.plan, a.root, seeds=a.seeds)
    for run, saved in zip(resolved["runs"], committed["runs"]):
        tag = f"{a.plan} {run['config']} seed {run['seed']}"
        if run_complete(saved["cfgs"]): print(f"{tag}: already committed", flush=True); continue
        t0 = time.perf_counter()
        summary = run_plan(a.plan, a.root, seeds=[run["seed"]], only=[run["config"]], keep_checkpoints=False)
        if "strong" in resolved and run_complete(resolved["strong"]["cfgs"]) and not run_complete(committed["strong"]["cfgs"]):
            land(resolved["strong"], committed["strong"], a, committed, repo, "the strong node's run")
        mine = next((s for s in summary if s["config"] == run["config"]), summary[-1])  # or the strong node's failure
        if mine["status"] not in ("done", "skipped"): print(f"{tag}: {mine}", flush=True); continue
        ok = land(run, saved, a, committed, repo, f"{run['config']} seed {run['seed']} ({run['nodes']} nodes x "
                  f"{run['cfgs'][0].rounds} rounds, {time.perf_counter() - t0:.0f} s)")
        print(f"{tag}: {'committed' if ok else 'NOT committed'} in {time.perf_counter() - t0:.0f} s", flush=True)


def land(run, saved, a, committed, repo, what) -> bool:
    "Copy a finished run's config and metrics (never its checkpoints) into the repository, with the plan record, and commit them."
    src, dst = Path(run["dir"]), Path(saved["dir"])
    for f in [src / "config.json", *sorted((src / "logs").glob("*/metrics.jsonl"))]:
        (dst / f.relative_to(src)).parent.mkdir(parents=True, exist_ok=True); shutil.copy2(f, dst / f.relative_to(src))
    plan_json = Path(committed["dir"]) / "plan.json"
    shutil.copy2(Path(a.root) / a.plan / "plan.json", plan_json)
    return commit([dst, plan_json], f"{a.plan}: metrics of {what}", repo)


if __name__ == "__main__": main()
