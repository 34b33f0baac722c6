"""Where one step of the decoding loop spends its time: the packed matmuls, the attention over the KV cache, and
everything else (norms, rotary embedding, activations, cache writes), by PyTorch's profiler.

A step of `decode_step` is timed for a few (rows, cache length) shapes: 8 rows at 60 cached tokens is a `quick` round,
32 rows at 300 is a `paper` round halfway through its 256 new tokens. Alongside, what the same bytes would cost at
this machine's copy bandwidth (the weights once, the KV cache once), so the gap of each part is visible.

    python bench/decode_profile.py            # writes bench/results/decode_profile_<device>.json
"""
import argparse, json, sys, time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def category(name):
    "The part of a decode step an operator belongs to."
    if "linear" in name or name in ("aten::mm", "aten::addmm", "aten::matmul"): return "matmul"
    if "scaled_dot_product" in name or "flash_attention" in name: return "attention"
    return "other"


def profile_step(model, linears, B, T, reps):
    "Milliseconds per step, in all and per category, for `B` rows with `T` cached tokens (random cache)."
    import torch
    from torch.profiler import profile
    from sapo_nb.decoding import decode_step
    c, dt = model.config, model.lm_head.weight.dtype
    head_dim = model.model.layers[0].self_attn.head_dim  # as `decode_completions` sizes its cache
    cache = [tuple(torch.randn(B, c.num_key_value_heads, T + 1, head_dim, dtype=dt) for _ in range(2)) for _ in range(c.num_hidden_layers)]
    valid = torch.ones(B, 1, 1, T + 1, dtype=torch.bool)
    tokens, positions = torch.randint(0, c.vocab_size, (B,)), torch.full((B,), T)
    step = lambda: decode_step(model, linears, tokens, positions, cache, T, valid)
    with torch.no_grad():
        for _ in range(2): step()
        t = time.perf_counter()
        for _ in range(reps): step()
        total = (time.perf_counter() - t) / reps * 1e3
        with profile() as p:
            for _ in range(reps): step()
    parts = dict(matmul=0.0, attention=0.0, other=0.0)
    for e in p.key_averages(): parts[category(e.key)] += e.self_cpu_time_total / 1e3 / reps
    profiled = sum(parts.values())  # the profiler's own total, slightly above `total`: shares of it, scaled to `total`
    return dict(rows=B, cached_tokens=T, ms_per_step=total, ms={k: v / profiled * total for k, v in parts.items()})


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--shapes", nargs="+", default=["8x60", "32x300"], help="ROWSxCACHED_TOKENS")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    import torch
    from sapo_nb.models import load_policy
    from sapo_nb.decoding import decode_linears
    from round_breakdown import machine, model_dims
    pol = load_policy(a.model, device="cpu")
    model = pol.sampler()
    with torch.no_grad(): linears = decode_linears(model)
    mach = machine("cpu", dtypes=(str(pol.compute_dtype).replace("torch.", ""),), batch=(8,))
    dims = model_dims(model, model.lm_head.weight.dtype)  # the roofline's bytes: weights, and per cached token
    weights_mb = dims["params"] * dims["dtype_bytes"] / 1e6
    bw = mach["copy_gb_per_s"]
    rows = []
    for shape in a.shapes:
        B, T = map(int, shape.split("x"))
        r = profile_step(model, linears, B, T, a.reps)
        r["kv_cache_mb"] = B * (T + 1) * dims["kv_bytes_per_token"] / 1e6
        r["at_copy_bandwidth_ms"] = dict(weights=weights_mb / bw, kv_cache=r["kv_cache_mb"] / bw)
        rows.append(r)
    L = [f"{mach['cpu']}, {mach['threads']} threads, torch {mach['torch']}, model {a.model}, copy bandwidth {bw:.0f} GB/s", "",
         "| rows × cached tokens | ms per step | matmuls | attention | other | weights at copy bandwidth | KV cache at copy bandwidth |",
         "|---|---:|---:|---:|---:|---:|---:|"]
    L += [f"| {r['rows']} × {r['cached_tokens']} | {r['ms_per_step']:.1f} | {r['ms']['matmul']:.1f} | {r['ms']['attention']:.1f} "
          f"| {r['ms']['other']:.1f} | {r['at_copy_bandwidth_ms']['weights']:.1f} | {r['at_copy_bandwidth_ms']['kv_cache']:.1f} |" for r in rows]
    res = dict(date=time.strftime("%Y-%m-%d"), model=a.model, machine=mach, weights_mb=weights_mb, steps=rows, table="\n".join(L))
    out = Path(a.out or HERE / "results" / "decode_profile_cpu.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1))
    print(res["table"])
    print(f"\nwritten to {out}")


if __name__ == "__main__":
    sys.exit(main())
