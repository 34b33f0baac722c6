"""How far the sampler's log-probs are from the trainer's, for the tokens a node samples and then trains on.

A node samples from `Policy.sampler()` (a bfloat16 copy of the policy where the compute dtype is bfloat16) and trains
the float32 policy under autocast: two computations of one distribution. For a few `arith` prompts (style 'short',
G completions of 32 tokens at the mix's temperature, the node's own call), this records each sampled token's
log-prob as the sampler computed it (`Completions.logprobs`) and as the trainer computes it (`GRPOTrainer.
batch_logprobs` on the sampled ids), per compute dtype and backend: the per-token |difference|, the per-sequence ratio
exp(sum trained - sum sampled), and what truncated importance sampling (cap 2) would weight each token. It also
counts the completions whose text encodes back to other ids than were sampled, and what training on that text
instead would have changed in their log-prob.

    nice python bench/sampler_mismatch.py     # writes bench/results/sampler_mismatch_cpu.json
"""
import argparse, json, platform, time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def quantiles(x, qs=(0.5, 0.9, 0.99, 1.0)):
    import torch
    x = x.double().flatten()
    return {f"p{int(q * 100)}": float(torch.quantile(x, q)) for q in qs} if len(x) else {}


def measure(policy, prompts, G, max_new, T, backend, cap, autocast=False):
    """One sampling call as a node makes it (from `policy.sampler()`, or with `autocast` from the float32 policy under
    autocast), then the trainer's log-probs of exactly those tokens."""
    import torch
    from sapo_nb.generation import generate_completions
    from sapo_nb.grpo import GRPOTrainer, training_groups
    tok = policy.tokenizer
    t0 = time.perf_counter()
    sampler = policy.model if autocast else policy.sampler()
    comps = generate_completions(sampler, tok, prompts, G, max_new, T, seed=list(range(len(prompts))),
                                 compute_dtype=policy.compute_dtype, backend=backend)
    seconds_sample = time.perf_counter() - t0
    tr = GRPOTrainer(policy.model, tok, max_new_tokens=max_new, temperature=T, compute_dtype=policy.compute_dtype)
    zeros = [[0.0] * G for _ in prompts]
    ended = [[not t for t in ts] for ts in comps.truncated]
    batch = tr.prepare_batch(training_groups(prompts, comps.texts, zeros, ended, comps.ids, comps.logprobs))
    t0 = time.perf_counter()
    trained = tr.batch_logprobs(batch, list(range(len(batch))))
    seconds_train = time.perf_counter() - t0
    mask = batch.loss_mask.bool()
    diff = (trained - batch.sampler_logprobs)[mask]
    seq = ((trained - batch.sampler_logprobs) * mask).sum(1)
    ratio = seq.exp()
    w = diff.exp().clamp(max=cap)
    # the same completions as their text encoded again (what training did before it kept the ids)
    text = tr.prepare_batch(training_groups(prompts, comps.texts, zeros, ended))
    rows = [i for i in range(len(batch)) if not torch.equal(text.input_ids[i][text.attention_mask[i].bool()],
                                                             batch.input_ids[i][batch.attention_mask[i].bool()])]
    on_text = (tr.batch_logprobs(text, rows) * text.loss_mask).sum(1) if rows else None
    flat_ids = [ids for per in comps.ids for ids in per]
    return dict(
        backend=comps.backend, completions=len(batch), tokens=int(mask.sum()), seconds_sample=seconds_sample,
        seconds_trainer_logprobs=seconds_train,
        token_abs_diff=dict(mean=float(diff.abs().mean()), **quantiles(diff.abs())),
        token_diff_mean=float(diff.mean()),
        sequence_log_ratio=dict(mean=float(seq.mean()), mean_abs=float(seq.abs().mean()), min=float(seq.min()),
                                max=float(seq.max())),
        sequence_ratio=dict(min=float(ratio.min()), max=float(ratio.max()),
                            share_outside_0_8_1_25=float(((ratio < 0.8) | (ratio > 1.25)).double().mean())),
        tis_weight=dict(cap=cap, mean=float(w.mean()), min=float(w.min()),
                        share_capped=float((diff.exp() > cap).double().mean()),
                        share_off_by_1pct=float(((w - 1).abs() > 0.01).double().mean())),
        reencoded_differently=dict(
            count=len(rows),
            examples=[dict(sampled=tok.convert_ids_to_tokens(flat_ids[i])[:40],
                           text_ids=tok.convert_ids_to_tokens(
                               text.input_ids[i][text.completion_mask[i].bool()].tolist())[:40],
                           logprob_sampled_ids=float((trained[i] * batch.loss_mask[i]).sum()),
                           logprob_text_ids=float(on_text[i])) for i in rows[:5]]),
    )


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--G", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--temperature", type=float, default=0.8)  # the `arith` mix's
    p.add_argument("--cap", type=float, default=2.0)
    p.add_argument("--out", default=str(HERE / "results" / "sampler_mismatch_cpu.json"))
    a = p.parse_args(argv)
    import torch
    from sapo_nb.models import load_policy, native_bf16
    from sapo_nb.tasks import TaskStream, format_prompt
    res = dict(date=time.strftime("%Y-%m-%d"), machine=platform.processor() or platform.machine(),
               threads=torch.get_num_threads(), torch=torch.__version__, native_bf16=native_bf16("cpu"),
               mix="arith", prompts=a.prompts, G=a.G, max_new_tokens=a.max_new_tokens, temperature=a.temperature,
               runs=[])
    for dtype, ways in (("float32", (("loop", False), ("generate", False))),
                        ("bfloat16", (("loop", False), ("generate", False), ("loop", True)))):
        policy = load_policy("smollm2-135m", device="cpu", compute_dtype=dtype)
        questions = TaskStream("arith", seed=0).next(a.prompts)
        prompts = [format_prompt(policy.tokenizer, q, "short") for q in questions]
        for backend, autocast in ways:
            r = measure(policy, prompts, a.G, a.max_new_tokens, a.temperature, backend, a.cap, autocast)
            copy = policy.sampler() is not policy.model and not autocast
            r.update(compute_dtype=dtype, sampler="a bfloat16 copy" if copy else
                     "the float32 policy under autocast" if dtype != "float32" else "the float32 policy")
            res["runs"].append(r)
            shown = ("compute_dtype", "sampler", "backend", "tokens", "token_abs_diff", "sequence_log_ratio",
                     "tis_weight")
            print(json.dumps({k: r[k] for k in shown}), flush=True)
    Path(a.out).write_text(json.dumps(res, indent=1))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
