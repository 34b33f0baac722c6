"""Run a plan run by run and commit each finished run's metrics into the repository as it lands.

    nice -n 19 python bench/plan_in_background.py sharing --root /work/runs --data nbs/data &

A plan is pinned to one library commit and one machine type (`plan.json`, see `20_experiments`). To keep working on
the library while a plan runs, run the plan from a worktree of that commit and commit its results into the main
checkout:

    git worktree add ../plan <commit> && PYTHONPATH=../plan nice -n 19 python ../plan/bench/plan_in_background.py \
        decisive --root /work/runs --data nbs/data --repo . --stop-on-verdict &

The metrics (not the checkpoints) of run `<config>/seed_<s>` are copied to `<data>/<plan>/<config>/seed_<s>/`, with
`environment.json` (the machine type and the versions of torch, transformers and peft, which the numbers can depend
on), and committed at once with `plan.json`, so a plan spans several working sessions, even on fresh machines: the
committed `plan.json` holds the pins once a run has landed, and they are carried into `--root` before each run
(another commit or machine type is refused unless `--other-commit` / `--other-machine` says so), a run whose committed
metrics are complete is skipped, a run stopped half-way resumes from its checkpoints under `--root` when they are
still there, and starts over when they are not. Runs go seed by seed, so what has landed is always complete pairs
plus at most one unpaired run.

A plan with a strong node (`heterogeneous`) trains it before its first run; its metrics are committed under
`<data>/<plan>/strong/` once it finishes. Its model stays under `--root` (it is a whole model, not for git): on a
fresh machine it is trained again first. Sampling on a different CPU takes other tokens, so a retrained strong node is
another model: its metrics land beside the first under `<data>/<plan>/strong-<sha12>/`, and every run committed with
a strong node records the SHA-256 of the model it started from in `strong_model.json` (runs without one used the
first model, `strong/seed_<s>/`). A pair is only clean on one strong model, so a committed run whose partner has not
landed and which started from a model other than this machine's is run again here before its partner.
"""
import argparse, hashlib, importlib.metadata, json, platform, shutil, subprocess, sys, time
from pathlib import Path
from sapo_nb.core import machine_type
from sapo_nb.experiments import plan_started, resolve_plan, run_plan, run_complete


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
    p.add_argument("--repo", default=None, help="the checkout results are committed into (default: this script's)")
    p.add_argument("--stop-on-verdict", action="store_true",
                   help="stop when the pre-registered rule (analysis.plan_verdict) gives 'helps' or 'hurts' at an "
                        "interim look (after the final look the seed's last arm still runs)")
    p.add_argument("--other-commit", action="store_true", help="add runs of this commit to a plan pinned to another")
    p.add_argument("--other-machine", action="store_true",
                   help="add runs on this machine type to a plan pinned to another")
    a = p.parse_args(argv)
    repo = Path(a.repo).resolve() if a.repo else Path(__file__).resolve().parents[1]
    committed = resolve_plan(a.plan, a.data, seeds=a.seeds)
    resolved = resolve_plan(a.plan, a.root, seeds=a.seeds)
    if a.stop_on_verdict and stopped(a): return  # a crossing landed before a restart still stops the plan
    for run, saved in zip(resolved["runs"], committed["runs"]):
        tag = f"{a.plan} {run['config']} seed {run['seed']}"
        if run_complete(saved["cfgs"]) and not unpaired_elsewhere(run, saved, resolved, committed):
            print(f"{tag}: already committed", flush=True); continue
        t0 = time.perf_counter()
        carry_pins(committed, resolved)
        summary = run_plan(a.plan, a.root, seeds=[run["seed"]], only=[run["config"]], keep_checkpoints=False,
                           other_commit=a.other_commit, other_machine=a.other_machine)
        if "strong" in resolved and run_complete(resolved["strong"]["cfgs"]): land_strong(resolved, committed, a, repo)
        mine = next((s for s in summary if s["config"] == run["config"]), summary[-1])  # or the strong node's failure
        if mine["status"] not in ("done", "skipped"):  # a later seed would leave a hole in the pairs: stop, say why
            print(f"{tag}: {mine}; stopping here, the next start runs it again", flush=True); return 1
        ok = land(run, saved, a, committed, repo, f"{run['config']} seed {run['seed']} ({run['nodes']} nodes x "
                  f"{run['cfgs'][0].rounds} rounds, {time.perf_counter() - t0:.0f} s)")
        print(f"{tag}: {'committed' if ok else 'NOT committed'} in {time.perf_counter() - t0:.0f} s", flush=True)
        if not ok: return 1  # its files are in place, uncommitted: commit them before any later seed runs
        if a.stop_on_verdict and stopped(a): return


def carry_pins(committed, resolved):
    """Once the plan has started, make the run folder's plan.json the committed one: the plan's first rounds may have
    run on another machine, whose run folder this one has never seen (or has stale), and the committed record holds
    the pins and every run landed since, wherever it ran (a stale local record would drop them at the next landing)."""
    saved_plan, here = Path(committed["dir"]) / "plan.json", Path(resolved["dir"]) / "plan.json"
    try: saved = json.loads(saved_plan.read_text())
    except (OSError, ValueError): return
    if not plan_started(saved, committed): return
    here.parent.mkdir(parents=True, exist_ok=True)
    here.write_text(json.dumps({**saved, "started": True}, indent=1))


def stopped(a) -> bool:
    """Whether the committed runs cross an interim look's boundary, which stops the plan. At the final look nothing
    is left to stop but the last seed's remaining arms, which the report counts on: they run."""
    from sapo_nb.analysis import load_runs, plan_verdict
    from sapo_nb.experiments import PLANS
    if not (Path(a.data) / a.plan).is_dir(): return False  # nothing has landed yet
    plan = PLANS.get(a.plan, {})  # a complete run is the plan's, whatever else the folder holds
    v = plan_verdict(load_runs(Path(a.data) / a.plan), nodes=plan.get("nodes"), rounds=plan.get("rounds"))
    print(f"{a.plan}: {v['sentence']}", flush=True)
    return v["look"] == "interim" and v["verdict"] in ("helps", "hurts")


def model_sha256(folder) -> str:
    "SHA-256 over a model folder's weight files, in name order."
    h = hashlib.sha256()
    for f in sorted(Path(folder).glob("*.safetensors")):
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 24), b""): h.update(chunk)
    return h.hexdigest()


def strong_sha(run_dir):
    "The SHA-256 of the strong model a committed run started from; None when it names none (the plan's first one)."
    f = Path(run_dir) / "strong_model.json"
    return json.loads(f.read_text()).get("sha256") if f.is_file() else None


def unpaired_elsewhere(run, saved, resolved, committed) -> bool:
    """Whether a committed run must run again here: its seed's other runs are not all committed yet, and it started from
    a strong model other than this machine's, so that its partners would start from another one. A pair stays on one
    strong model at the cost of one run, once, when a session ends between the runs of a pair."""
    if "strong" not in resolved: return False
    partners = [s for s in committed["runs"] if s["seed"] == saved["seed"] and s["dir"] != saved["dir"]]
    if all(run_complete(s["cfgs"]) for s in partners): return False
    here = Path(resolved["strong"]["model"])  # not there yet: it will be trained here, another model than any committed
    if here.is_dir() and strong_sha(saved["dir"]) == model_sha256(here): return False
    print(f"{run['config']} seed {run['seed']}: committed on another strong model while its partners are not; "
          "running it again here", flush=True)
    return True


def rewards(run_dir):
    "The sequence of `reward_local` of a run's nodes: what tells two trainings of the same strong node apart."
    return [json.loads(l).get("reward_local") for f in sorted(Path(run_dir).glob("logs/*/metrics.jsonl")) for l in open(f)]


def land_strong(resolved, committed, a, repo):
    "Commit the strong node's run: as the plan's first one, or, when this machine trained another model, beside it."
    here, saved = resolved["strong"], committed["strong"]
    if not run_complete(saved["cfgs"]): return land(here, saved, a, committed, repo, "the strong node's run")
    if rewards(here["dir"]) == rewards(saved["dir"]): return True
    dst = Path(committed["dir"]) / f"strong-{model_sha256(here['model'])[:12]}" / Path(here["dir"]).name
    if not dst.exists(): land(here, dict(dir=str(dst)), a, committed, repo, f"the strong node's run, trained again ({dst.parent.name})")


def environment() -> dict:
    "What a run's numbers can depend on beyond its config: the machine type and the versions of the computing packages."
    return dict(**machine_type(), python=platform.python_version(),
                **{k: importlib.metadata.version(k) for k in ("torch", "transformers", "peft")})


def land(run, saved, a, committed, repo, what) -> bool:
    "Copy a finished run's config, metrics, evaluation records and provenance (never its checkpoints) into the repository, with the plan record, and commit them."
    src, dst = Path(run["dir"]), Path(saved["dir"])
    for f in [src / "config.json", *sorted(p for n in ("metrics", "eval_items", "provenance") for p in (src / "logs").glob(f"*/{n}.jsonl"))]:
        (dst / f.relative_to(src)).parent.mkdir(parents=True, exist_ok=True); shutil.copy2(f, dst / f.relative_to(src))
    if "strong" in committed and run.get("config") != "strong":
        model = next(c.model for c in run["cfgs"] if c.node_id == committed["strong"]["node"])
        (dst / "strong_model.json").write_text(json.dumps({"sha256": model_sha256(model)}) + "\n")
    (dst / "environment.json").write_text(json.dumps(environment()) + "\n")
    plan_json = Path(committed["dir"]) / "plan.json"  # the landed run ran rounds: the plan has started, pins hold
    record = json.loads((Path(a.root) / a.plan / "plan.json").read_text())
    plan_json.write_text(json.dumps({**record, "started": True}, indent=1))
    return commit([dst, plan_json], f"{a.plan}: metrics of {what}", repo)


if __name__ == "__main__": sys.exit(main())
