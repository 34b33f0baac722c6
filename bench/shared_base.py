"""Full fine-tuning against LoRA adapters on one shared base: memory, round time, generation time, checkpoint size.

    python bench/shared_base.py                      # 8 nodes of the embedded SmolLM2-135M, cpu preset, CPU
    python bench/shared_base.py --nodes 8 --rounds 2 --device cuda --model Qwen/Qwen2.5-0.5B-Instruct

Each variant runs in a fresh subprocess, so its peak memory is its own:
  full   one full-fine-tuning node (what one process per node costs), `--rounds` measured rounds after a warm-up;
         N such nodes run one after another take N times its round, on the same settings
  lora   N LoRA nodes in one process on one shared base, generating together (`node.sample_together`), training
         one adapter each, `--rounds` measured rounds after a warm-up
Reported: peak memory of the process (RSS on CPU, allocated on CUDA), seconds per round (all N nodes), seconds of
generation per round, and the bytes of one node's checkpoint. Ratios compare only within one run of this script.
"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time


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
    n = 1 if a.variant == "full" else a.nodes
    extra = dict(adapter="lora", lora_rank=a.rank, learning_rate=a.lora_lr) if a.variant == "lora" else {}
    cfgs = [preset("cpu", model=a.model, node_id=f"node-{k}", root=root, transport="memory", eval_every=0, device=a.device,
                   checkpoint_every=0, rounds=a.rounds + 1, **extra) for k in range(n)]
    nodes = [SwarmNode(c, transport=pool, log=quiet) for c in cfgs]
    rounds, gen = [], []
    for r in range(a.rounds + 1):
        t = time.perf_counter()
        sampled = sample_together(nodes, r) if a.variant == "lora" else [None] * n
        t_shared = time.perf_counter() - t
        states = [nd.begin_round(r, s) for nd, s in zip(nodes, sampled)]
        rows = [nd.step(st) for nd, st in zip(nodes, states)]
        if r: rounds.append(time.perf_counter() - t); gen.append(t_shared if a.variant == "lora" else sum(x["seconds"]["generate"] for x in rows))
    nodes[0]._checkpoint(a.rounds)
    ck = checkpoint_dir(nodes[0].cfg) / f"round_{a.rounds}"
    print(json.dumps(dict(variant=a.variant, nodes=n, model=a.model, device=a.device, seconds_per_round=statistics.median(rounds),
                          generate_seconds_per_round=statistics.median(gen), peak_memory_mb=peak_memory_mb(a.device),
                          checkpoint_bytes=sum(f.stat().st_size for f in ck.iterdir()))))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="smollm2-135m"); p.add_argument("--device", default="cpu")
    p.add_argument("--nodes", type=int, default=8); p.add_argument("--rounds", type=int, default=2)
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
    f, l, n = res["full"], res["lora"], a.nodes
    res["ratios"] = dict(memory_lora_over_one_full=l["peak_memory_mb"] / f["peak_memory_mb"],
                         round_lora_over_full_in_turn=l["seconds_per_round"] / (n * f["seconds_per_round"]),
                         generate_lora_over_full_in_turn=l["generate_seconds_per_round"] / (n * f["generate_seconds_per_round"]),
                         checkpoint_mb_lora=l["checkpoint_bytes"] / 1e6, checkpoint_mb_full=f["checkpoint_bytes"] / 1e6)
    print(json.dumps(res["ratios"], indent=1))
    os.makedirs(os.path.dirname(a.out), exist_ok=True); open(a.out, "w").write(json.dumps(res, indent=1))


if __name__ == "__main__": main()
