"""Token log-probs over the vocabulary for one training micro-batch: `target_logprobs` (a few rows at a time, the
backward written by hand) against the plain float32 log-softmax, in one run.

A micro-batch of 8 `paper` sequences predicts ~2000 completion tokens; SmolLM2's vocabulary is 49 152 and its
hidden size 576. Times the output projection (bfloat16 autocast, float32 weights, as in training), the log-probs
and the entropy, forward and backward; the best of three, after a warm-up.

    python bench/logprob_slices.py            # writes bench/results/logprob_slices_<device>.json
"""
import argparse, json, platform, sys, time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=2000)
    p.add_argument("--hidden", type=int, default=576)
    p.add_argument("--vocab", type=int, default=49152)
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    import torch
    from sapo_nb.grpo import target_logprobs
    sys.path.insert(0, str(HERE))
    from round_breakdown import plain_target_logprobs
    dev = a.device
    sync = torch.cuda.synchronize if dev.startswith("cuda") else (lambda: None)
    g = torch.Generator().manual_seed(0)
    h = torch.randn(a.tokens, a.hidden, generator=g).to(dev).requires_grad_()
    W = (0.02 * torch.randn(a.vocab, a.hidden, generator=g)).to(dev).requires_grad_()
    y = torch.randint(0, a.vocab, (a.tokens,), generator=g).to(dev)
    w = torch.randn(a.tokens, generator=g).to(dev)
    ways = dict(plain=lambda z: plain_target_logprobs(z, y, 1.0, True, lambda x: x),
                slices=lambda z: target_logprobs(z, y, 1.0),
                projection_only=lambda z: (z.float().sum(-1), None))
    def run(way):
        h.grad = W.grad = None
        with torch.autocast(dev.split(":")[0], dtype=torch.bfloat16):
            z = h @ W.T
        logp, _ = ways[way](z)
        (logp * w).sum().backward()
    res = dict(date=time.strftime("%Y-%m-%d"), machine=platform.processor() or platform.machine(),
               threads=torch.get_num_threads(), torch=torch.__version__, tokens=a.tokens, hidden=a.hidden, vocab=a.vocab,
               seconds={})
    for way in ways:
        run(way); times = []
        for _ in range(3):
            sync(); t = time.perf_counter(); run(way); sync(); times.append(time.perf_counter() - t)
        res["seconds"][way] = min(times)
    s = res["seconds"]
    res["slices_over_plain"] = s["slices"] / s["plain"]
    res["vocabulary_work_s"] = dict(plain=s["plain"] - s["projection_only"], slices=s["slices"] - s["projection_only"])
    out = Path(a.out or HERE / "results" / f"logprob_slices_{dev.split(':')[0]}.json")
    out.write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    sys.exit(main())
