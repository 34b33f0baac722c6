"""Full fine-tuning against LoRA adapters on one shared base: memory, round time, generation time, checkpoint size.

    python bench/shared_base.py                      # 8 nodes of the embedded SmolLM2-135M, cpu preset, CPU
    python bench/shared_base.py --nodes 8 --rounds 2 --device cuda --model Qwen/Qwen2.5-0.5B-Instruct

Each variant runs in a fresh subprocess, so its peak memory is its own:
  full   N full-fine-tuning nodes run one after another, each alone in memory (what one process per node costs),
         `--rounds` measured rounds after a warm-up each; a round of all N is the sum of their median rounds, and
         the peak memory is the first node's
  lora   N LoRA nodes in one process on one shared base, generating together (`node.sample_together`), training
         one adapter each, `--rounds` measured rounds after a warm-up
Reported: peak memory of the process (RSS on CPU, allocated on CUDA), seconds per round (all N nodes), seconds of
generation per round, and the bytes of one node's checkpoint. Ratios compare only within one run of this script.
"""
import argparse, gc, json, os, statistics, subprocess, sys, tempfile, time


def worker(a):
    os.environ.setdefault("SAPO_KEY_DIR", tempfile.mkdtemp())
    import torch
    from sapo_nb.config import preset
    from sapo_nb.core import checkpoint_dir
    from sapo_nb.models import peak_memory_mb
    from sapo_nb.node import SwarmNode, sample_together
    from sapo_nb.transport import MemoryTransport
    torch.manual_seed(0)
    root, pool, quiet = tempfile.mkdtemp(), MemoryTransport(), (lambda *_: None)
    n = a.nodes
    extra = dict(adapter="lora", lora_rank=a.rank, learning_rate=a.lora_lr) if a.variant == "lora" else {}
    cfgs = [preset("cpu", model=a.model, node_id=f"node-{k}", root=root, transport="memory", eval_every=0, device=a.device,
                   checkpoint_every=0, rounds=a.rounds + 1, **extra) for k in range(n)]
    med = statistics.median

    def run(nodes):
        "Per measured round: seconds, seconds generating, tokens generated and tokens trained, over `nodes`."
        out = []
        for r in range(a.rounds + 1):
            t = time.perf_counter()
            sampled = sample_together(nodes, r) if a.variant == "lora" else [None] * len(nodes)
            t_shared = time.perf_counter() - t
            rows = [nd.step(nd.begin_round(r, s)) for nd, s in zip(nodes, sampled)]
            if r: out.append((time.perf_counter() - t, t_shared if a.variant == "lora" else sum(x["seconds"]["generate"] for x in rows),
                              sum(x["tokens_generated"] for x in rows), sum(x["tokens_trained"] for x in rows)))
        return out

    if a.variant == "lora":
        nodes = [SwarmNode(c, transport=pool, log=quiet) for c in cfgs]
        rounds = run(nodes)
        res = {k: med(x[i] for x in rounds) for i, k in enumerate(("seconds_per_round", "generate_seconds_per_round",
                                                                     "tokens_generated_per_round", "tokens_trained_per_round"))}
        peak, first = peak_memory_mb(a.device), nodes[0]
    else:  # one after another: each node's median round, summed over the nodes
        res = dict.fromkeys(("seconds_per_round", "generate_seconds_per_round", "tokens_generated_per_round", "tokens_trained_per_round"), 0.0)
        for k, c in enumerate(cfgs):
            node = SwarmNode(c, transport=pool, log=quiet)
            rounds = run([node])
            for i, key in enumerate(res): res[key] += med(x[i] for x in rounds)
            if k == 0: peak, first = peak_memory_mb(a.device), node
            else: del node
            gc.collect()
    first._checkpoint(a.rounds)
    ck = checkpoint_dir(first.cfg) / f"round_{a.rounds}"
    print(json.dumps(dict(variant=a.variant, nodes=n, model=a.model, device=a.device, **res, peak_memory_mb=peak,
                          checkpoint_bytes=sum(f.stat().st_size for f in ck.iterdir()))))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="smollm2-135m"); p.add_argument("--device", default="cpu")
    p.add_argument("--nodes", type=int, default=8); p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rank", type=int, default=4); p.add_argument("--lora-lr", type=float, default=1e-4)
    p.add_argument("--out", default="bench/results/shared_base_cpu.json"); p.add_argument("--variant", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.variant: return worker(a)
    res = {}
    for v in ("full", "lora"):
        cmd = [sys.executable, __file__, "--variant", v, *[x for k, val in vars(a).items() if k not in ("variant", "out")
                                                           for x in (f"--{k.replace('_', '-')}", str(val))]]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode: print(out.stderr[-3000:], file=sys.stderr); raise SystemExit(f"{v} failed")
        res[v] = json.loads(out.stdout.strip().splitlines()[-1]); print(json.dumps(res[v]), flush=True)
    f, l = res["full"], res["lora"]
    res["ratios"] = dict(memory_lora_over_one_full=l["peak_memory_mb"] / f["peak_memory_mb"],
                         round_lora_over_full_in_turn=l["seconds_per_round"] / f["seconds_per_round"],
                         generate_lora_over_full_in_turn=l["generate_seconds_per_round"] / f["generate_seconds_per_round"],
                         tokens_generated_lora_over_full=l["tokens_generated_per_round"] / max(1, f["tokens_generated_per_round"]),
                         tokens_trained_lora_over_full=l["tokens_trained_per_round"] / max(1, f["tokens_trained_per_round"]),
                         checkpoint_mb_lora=l["checkpoint_bytes"] / 1e6, checkpoint_mb_full=f["checkpoint_bytes"] / 1e6)
    print(json.dumps(res["ratios"], indent=1))
    os.makedirs(os.path.dirname(a.out), exist_ok=True); open(a.out, "w").write(json.dumps(res, indent=1))


if __name__ == "__main__": main()
