"""One node, no sharing (J=0), the embedded SmolLM2-135M on the `quick` mix (or `--mix`), on a CPU (or `--device`): does GRPO learn?

Runs the real `SwarmNode` code path with an in-memory pool and prints the mean training reward per round,
the first-10 vs last-10 rounds' means with bootstrap 95% intervals, seconds per round split by phase, and
generation tokens/s. Writes everything to bench/results/learn_single_node.json, rewritten after every round
(`complete` false until the last), so a run cut off by a time limit still leaves its rounds so far.

    python bench/learn_single_node.py [--rounds 40] [--questions 4] [--G 4] [--lr 1e-5] [--seed 0]
    python bench/learn_single_node.py --adapter lora --rank 4 --lr 1e-4 --out bench/results/learn_single_node_lora.json
    python bench/learn_single_node.py --device cuda --mix arith --eval-questions 512   # on a GPU (bench/gpu_learn.sh)

Held-out greedy pass@1 is measured before the first update and after the last (`--eval-questions`, 0: none).
"""
import argparse, json, random, statistics, sys, tempfile, time
from pathlib import Path

def bootstrap_ci(xs, n=10_000, seed=0):
    "Mean of xs with a percentile bootstrap 95% interval."
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(xs, k=len(xs))) for _ in range(n))
    return statistics.fmean(xs), means[int(0.025 * n)], means[int(0.975 * n)]

def bootstrap_diff(a, b, n=10_000, seed=0):
    "Mean of b - a (independent resampling) with a 95% interval."
    rng = random.Random(seed)
    d = sorted(statistics.fmean(rng.choices(b, k=len(b))) - statistics.fmean(rng.choices(a, k=len(a))) for _ in range(n))
    return statistics.fmean(b) - statistics.fmean(a), d[int(0.025 * n)], d[int(0.975 * n)]

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--questions", type=int, default=4, help="I: questions per round")
    p.add_argument("--G", type=int, default=4, help="completions per question")
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--device", default="cpu", help="cpu, cuda, ... (the `cpu` preset's settings otherwise)")
    p.add_argument("--mix", default="quick")
    p.add_argument("--adapter", default="none", choices=["none", "lora"]); p.add_argument("--rank", type=int, default=4)
    p.add_argument("--eval-questions", type=int, default=64)
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "learn_single_node.json"))
    a = p.parse_args(argv)
    import torch
    from sapo_nb.config import preset
    from sapo_nb.node import SwarmNode
    torch.set_num_threads(2)
    root = tempfile.mkdtemp(prefix="sapo_bench_")
    cfg = preset("cpu", model=a.model, device=a.device, mix=a.mix, root=root, experiment="learn", node_id="solo", transport="memory",
                 local_questions=a.questions, external_questions=0, completions_per_question=a.G,
                 rounds=a.rounds, learning_rate=a.lr, seed=a.seed, checkpoint_every=0, adapter=a.adapter, lora_rank=a.rank,
                 eval_every=a.rounds if a.eval_questions else 0, eval_questions=max(1, a.eval_questions))
    t0 = time.perf_counter()
    node = SwarmNode(cfg, log=lambda *_: None)
    load_s = time.perf_counter() - t0
    rows = []
    from sapo_nb.core import provenance
    prov = provenance(str(node.policy.device), str(node.policy.model.dtype), str(node.policy.compute_dtype))
    out = Path(a.out); out.parent.mkdir(parents=True, exist_ok=True)
    def summary(complete):
        "What the rounds so far say, written to `--out` (and returned)."
        r = [row["reward_train"] for row in rows]
        k = min(10, len(r) // 2)
        res = dict(provenance=prov, config=cfg.to_dict(), torch_threads=torch.get_num_threads(), load_seconds=load_s,
                   complete=complete, rounds_done=len(rows), rewards=r,
                   frac_zero_std=[row["frac_zero_std"] for row in rows],
                   held_out=dict(base=rows[0].get("eval_base_pass1") if rows else None,
                                 final=rows[-1].get("eval_pass1") if complete else None,
                                 n=rows[-1].get("eval_n") if complete else None))
        if k:
            res.update(first=bootstrap_ci(r[:k]), last=bootstrap_ci(r[-k:]), diff=bootstrap_diff(r[:k], r[-k:]), k=k,
                       seconds_per_phase={ph: statistics.fmean(row["seconds"][ph] for row in rows)
                                          for ph in ("generate", "reward", "train", "total")},
                       generate_tokens_per_s=sum(row["tokens_generated"] for row in rows)
                                             / sum(row["seconds"]["generate"] for row in rows))
        out.write_text(json.dumps(res, indent=1))
        return res
    def on_round(row):
        rows.append(row); s = row["seconds"]
        print(f"round {row['round']:3d}  reward {row['reward_train']:.3f}  zero-spread {row['frac_zero_std']:.2f}  "
              f"gen {s['generate']:.1f}s  reward {s['reward']:.2f}s  train {s['train']:.1f}s  total {s['total']:.1f}s", flush=True)
        if len(rows) < a.rounds: summary(complete=False)
    node.run(on_round=on_round)
    if len(rows) < 2: print(f"only {len(rows)} round(s) ran: nothing to compare", file=sys.stderr); return 1
    res = summary(complete=True)
    k, first, last, diff, phase, toks = (res[x] for x in ("k", "first", "last", "diff", "seconds_per_phase",
                                                          "generate_tokens_per_s"))
    print(f"\nfirst {k} rounds: mean {first[0]:.3f} (95% CI {first[1]:.3f}-{first[2]:.3f})")
    print(f"last {k} rounds:  mean {last[0]:.3f} (95% CI {last[1]:.3f}-{last[2]:.3f})")
    print(f"difference:      {diff[0]:+.3f} (95% CI {diff[1]:+.3f} to {diff[2]:+.3f})")
    print(f"held-out pass@1: {res['held_out']['base']} -> {res['held_out']['final']} (n={res['held_out']['n']})")
    print("seconds per round: " + ", ".join(f"{k_} {v:.2f}" for k_, v in phase.items()) + f"; generation {toks:.0f} tokens/s")
    return 0 if diff[1] > 0 else 1

if __name__ == "__main__":
    sys.exit(main())
