"""One GPU check of sapo_nb in a few minutes: rounds of the `paper` settings on models shaped like SmolLM2-135M and
Qwen2.5-0.5B with random weights (built from their configs, so no weights travel), 1 and 8 nodes in one process,
full fine-tuning and LoRA; generation tokens/s against a roofline (measured copy bandwidth and bf16 matmul rate);
the same sampling through plain `generate` and through the static cache transformers compiles (`compile_decoding`:
its first call, which compiles, apart from the next), and one node's rounds with it; peak memory per configuration
beside `models.estimate_node_memory`'s estimate; and the largest swarm of each model that fits 16 GB and 80 GB, from the measured peaks.

    python bench/gpu_round.py                # on a GPU: bench/results/gpu_<device name>.json
    python bench/gpu_round.py --smoke        # anywhere, in a minute: the tiny shape, tiny sizes, the same stages

Completions have a fixed length, so every configuration does the same work: the random models' tokenizer is
character-level over the whole vocabulary (every id decodes to one character and encodes back to itself), and its
end-of-sequence id lies one past the model's vocabulary, where no sampled token can be. Rewards are a hash of the
text (a 0/1 spread in most groups), so the GRPO step trains on every group, as it would with a learning model.
Prompts are the `quick` mix's in ChatML, one character a token (about 100 tokens; the paper mix's prompts under
SmolLM2's tokenizer are 130 tokens at the median, 349 at most), and each result records their length. Each stage has its own time budget and its own try/except,
and the JSON is rewritten after every stage, so a stage that fails or runs out of time leaves the others' results.
"""
import argparse, gc, json, os, platform, re, signal, sys, tempfile, time, traceback, unicodedata, zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sapo_nb.models import SMOLLM2_CONFIG, reset_peak_memory  # noqa: E402  (light: no torch)

SHAPES = dict(
    smollm2=dict(SMOLLM2_CONFIG, architectures=["LlamaForCausalLM"], max_position_embeddings=8192),
    qwen05b=dict(model_type="qwen2", architectures=["Qwen2ForCausalLM"], hidden_size=896, num_hidden_layers=24,
                 num_attention_heads=14, num_key_value_heads=2, intermediate_size=4864, vocab_size=151936,
                 tie_word_embeddings=True, max_position_embeddings=32768, rope_theta=1e6),
    tiny=dict(model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=64, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, intermediate_size=128, vocab_size=512,
              tie_word_embeddings=True, max_position_embeddings=4096),
)
GB16, GB80 = 16e9, 80e9  # the cards' memory as sold (a T4, an A100/H100)


class StageTimeout(BaseException):  # not an Exception: no handler of the library (a probe, a node) takes it for a failure
    pass


def _alarm(signum, frame): raise StageTimeout("stage budget spent")


def char_tokenizer(vocab:int):
    "A character-level tokenizer of `vocab` + 1 tokens: ChatML specials, printable ASCII, then one code point per id; EOS is id `vocab`."
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast
    from sapo_nb.models import CHATML_TEMPLATE, TINY_CHARS, TINY_SPECIALS
    pieces, cp = list(TINY_SPECIALS) + list(TINY_CHARS), 0xA1
    seen = set(pieces)
    while len(pieces) < vocab:
        ch, cp = chr(cp), cp + 1
        if ch in seen or ch.isspace() or unicodedata.category(ch) in ("Cs", "Cc", "Cf", "Cn", "Zs", "Zl", "Zp"): continue
        pieces.append(ch); seen.add(ch)
    pieces.append("<|never|>")  # id == vocab: past the model's logits, never sampled
    tk = Tokenizer(models.BPE(vocab={p: i for i, p in enumerate(pieces)}, merges=[], unk_token="<unk>"))
    tk.decoder = decoders.Fuse()
    tk.add_special_tokens(TINY_SPECIALS + ["<|never|>"])
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", pad_token="<pad>", bos_token="<|endoftext|>",
                                  eos_token="<|never|>", padding_side="left", clean_up_tokenization_spaces=False,
                                  model_max_length=32768)
    tok.chat_template = CHATML_TEMPLATE
    return tok


def random_model_dir(shape:str, dest:Path, device:str) -> Path:
    "A model folder of `shape` with random weights and the character tokenizer; built on `device`, saved in float32."
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    c = dict(SHAPES[shape]); V = c["vocab_size"]
    config = AutoConfig.for_model(c.pop("model_type"), **c, bos_token_id=2, eos_token_id=V, pad_token_id=1)
    with torch.device(device): model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config.update(bos_token_id=2, eos_token_id=V, pad_token_id=1)
    model.save_pretrained(dest); char_tokenizer(V).save_pretrained(dest)
    del model
    return dest


def crc_reward(entry, completions) -> list:
    "0/1 from a hash of the text: a spread in most groups, the same on every run."
    return [float(zlib.crc32(c.encode()) % 2) for c in completions]


def build_node(cfg, transport=None, log=print):
    from sapo_nb.node import SwarmNode
    n = SwarmNode(cfg, transport=transport, log=log)
    n.reward_fn = crc_reward
    return n


class Memory:
    "Peak memory of a stretch of work, beyond what was allocated at its start: CUDA's allocator, or the process's peak RSS (Linux)."
    def __init__(self, device): self.device = device

    def _rss(self, key="VmRSS"):
        line = next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith(key + ":"))
        return int(line.split()[1]) * 1024

    def start(self):
        import torch
        gc.collect()
        if self.device.startswith("cuda"):
            torch.cuda.synchronize(); torch.cuda.empty_cache()
        reset_peak_memory(self.device)  # the peak restarts from what the process holds now
        self.base = torch.cuda.memory_allocated() if self.device.startswith("cuda") else self._rss()
        return self

    def peak(self) -> int:
        import torch
        if self.device.startswith("cuda"): return torch.cuda.max_memory_allocated() - self.base
        return self._rss("VmHWM") - self.base

    def held(self) -> dict:
        "On CUDA: the allocator's peak reserve (its cache included) and what the card has in use now (the context too)."
        import torch
        if not self.device.startswith("cuda"): return {}
        free, total = torch.cuda.mem_get_info()
        return dict(peak_reserved_bytes=torch.cuda.max_memory_reserved(), card_used_bytes=total - free)


def prompt_tokens(tok, n=64) -> int:
    "The longest of the first `n` `quick` prompts, in this tokenizer's tokens."
    from sapo_nb.tasks import TaskStream, format_prompt
    return max(len(tok(format_prompt(tok, q, style="short"))["input_ids"]) for q in TaskStream("quick", 0, "n").next(n))


def base_config(args, model_dir, adapter, rounds, experiment, root, compiled=False):
    from sapo_nb.config import preset
    return preset("paper", model=str(model_dir), mix="quick", adapter=adapter, rounds=rounds, device=args.device,
                  compile_decoding=compiled,
                  local_questions=args.I, external_questions=args.J, completions_per_question=args.G,
                  max_new_tokens=args.new_tokens, checkpoint_every=0, eval_every=0, transport="memory",
                  root=str(root), experiment=experiment, learning_rate=1e-6)


def run_rounds(args, ctx, shape, nodes, adapter, rounds, compiled=False) -> dict:
    """`rounds` rounds of `nodes` nodes in one process (decoding compiled: `compiled`); the last round's phases,
    tokens/s, peak memory and the estimate."""
    from sapo_nb.models import estimate_node_memory, model_shape, resolve_compute_dtype, PROCESS_BYTES
    from sapo_nb.node import experiment_dir
    from sapo_nb.swarm import node_configs, run_inline
    exp = f"{shape}-{adapter}-{nodes}{'-compiled' if compiled else ''}"
    cfg = base_config(args, ctx["dirs"][shape], adapter, rounds, exp, ctx["root"], compiled)
    mem = Memory(args.device).start()
    t0 = time.perf_counter()
    said = []  # what the nodes said of failures (a batch of several nodes that fell back, say), kept in the result
    def log(*a):
        line = " ".join(map(str, a))
        if "fail" in line: said.append(line)
    done = run_inline(node_configs(cfg, nodes), log=log, build=build_node)
    wall, peak, held = time.perf_counter() - t0, mem.peak(), mem.held()
    if set(done.values()) != {"done"}: raise RuntimeError(f"nodes failed: {done}; they said: {said[:3]}")
    last = []
    for i in range(nodes):
        rows = (experiment_dir(cfg) / "logs" / f"node-{i}" / "metrics.jsonl").read_text().splitlines()
        last.append(json.loads(rows[-1]))
    first = rows[0]  # the last node's first round: a compiled run pays its compiles there
    gen_s = sum(r["seconds"].get("generate", 0) for r in last)
    toks = sum(r["tokens_generated"] for r in last)
    compute = str(resolve_compute_dtype(cfg.compute_dtype, args.device)).replace("torch.", "")
    est = estimate_node_memory(model_shape(ctx["dirs"][shape]), cfg, nodes, compute, prompt_tokens=ctx["prompt_tokens"][shape])
    tensors = (est.total - PROCESS_BYTES) / 1.10  # the estimate without its slack and per-process part
    out = dict(shape=shape, nodes=nodes, adapter=adapter, compiled=compiled, rounds=rounds, wall_s=round(wall, 2), compute_dtype=compute,
               first_round_generate_s=json.loads(first)["seconds"].get("generate"),
               last_round_s=round(max(r["seconds"]["total"] for r in last) if nodes == 1 else sum(r["seconds"]["total"] for r in last), 3),
               generate_s=round(gen_s, 3), train_s=round(sum(r["seconds"].get("train", 0) for r in last), 3),
               tokens_generated=toks, tokens_per_s=round(toks / gen_s, 1) if gen_s else None,
               peak_bytes=peak, peak_per_node_gib=round(peak / nodes / 2**30, 3),
               estimate_bytes=est.total, estimate_tensor_bytes=int(tensors), estimate_over_measured=round(est.total / peak, 3) if peak > 0 else None,
               estimate=est.describe(), pool_selected=[r["pool_selected"] for r in last], said=said[:5], **held)
    out["roofline"] = roofline_tokens_per_s(ctx, shape, cfg, nodes, compute)
    if out["tokens_per_s"] and out["roofline"]: out["of_roofline"] = round(out["tokens_per_s"] / out["roofline"]["tokens_per_s"], 3)
    return out


def roofline_tokens_per_s(ctx, shape, cfg, nodes, compute) -> dict|None:
    "The decode roofline of one sampling batch: max(bytes read / copy bandwidth, flops / matmul rate) per step."
    rates = ctx["results"].get("roofline", {}).get("result")
    if not rates: return None
    from sapo_nb.models import model_shape, DTYPE_BYTES
    s = model_shape(ctx["dirs"][shape])
    c, lora = DTYPE_BYTES[compute], cfg.adapter == "lora"
    rows = cfg.local_questions * cfg.completions_per_question * (nodes if lora else 1)  # sampled at once
    ctx_len = ctx["prompt_tokens"][shape] + cfg.max_new_tokens / 2
    kv_b = c if (c < 4 and not lora) else 4
    step_bytes = s.parameters * c + rows * ctx_len * s.layers * 2 * s.kv_heads * s.head_dim * kv_b
    step_flops = 2 * s.parameters * rows + 4 * rows * ctx_len * s.layers * s.heads * s.head_dim
    rate = rates["bf16_matmul_tflops"] * 1e12 if c == 2 else rates["fp32_matmul_tflops"] * 1e12
    t = max(step_bytes / (rates["copy_gbps"] * 1e9), step_flops / rate)
    return dict(rows=rows, step_bytes=int(step_bytes), step_flops=int(step_flops), step_s=t, tokens_per_s=round(rows / t, 1),
                bound="memory" if step_bytes / (rates["copy_gbps"] * 1e9) >= step_flops / rate else "compute")


def stage_roofline(args, ctx) -> dict:
    "Measured copy bandwidth (a large tensor copy) and matmul rates (bf16, fp32)."
    import torch
    dev = args.device
    sync = torch.cuda.synchronize if dev.startswith("cuda") else (lambda: None)
    n = (1 << 28) if not args.smoke else (1 << 24)  # bytes per buffer
    x = torch.empty(n // 4, device=dev); y = torch.empty_like(x)
    y.copy_(x); sync()
    t0 = time.perf_counter()
    for _ in range(10): y.copy_(x)
    sync(); copy = 2 * n * 10 / (time.perf_counter() - t0) / 1e9
    out = dict(copy_gbps=float(f"{copy:.4g}"))
    N = 8192 if not args.smoke else 256
    for name, dt in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        a, b = torch.randn(N, N, device=dev, dtype=dt), torch.randn(N, N, device=dev, dtype=dt)
        a @ b; sync()
        t0 = time.perf_counter()
        for _ in range(5): a @ b
        sync(); out[f"{name}_matmul_tflops"] = float(f"{2 * N**3 * 5 / (time.perf_counter() - t0) / 1e12:.4g}")
    del x, y, a, b
    return out


def stage_models(args, ctx) -> dict:
    "Random-weight model folders of each shape, and their prompts' lengths."
    out = {}
    for shape in args.models:
        d = random_model_dir(shape, Path(ctx["root"]) / f"model-{shape}", args.device)
        ctx["dirs"][shape] = d
        from transformers import AutoTokenizer
        ctx["prompt_tokens"][shape] = prompt_tokens(AutoTokenizer.from_pretrained(str(d)))
        from sapo_nb.models import model_shape
        out[shape] = dict(parameters=model_shape(d).parameters, prompt_tokens=ctx["prompt_tokens"][shape])
    return out


def stage_rounds(nodes, adapters, rounds, compiled=False):
    def run(args, ctx) -> list:
        out = []
        for shape in args.models:
            for adapter in (a for a in adapters if a in args.adapters):
                try: out.append(run_rounds(args, ctx, shape, nodes, adapter, rounds, compiled))
                except StageTimeout: raise
                except Exception as e:
                    if "StageTimeout" in str(e): raise StageTimeout(str(e)) from None  # raised inside a node's round
                    out.append(dict(shape=shape, nodes=nodes, adapter=adapter, error=f"{type(e).__name__}: {e}"[:500]))
                save(args, ctx)
                ctx["partial"] = out
        return out
    return run


def stage_plain_generate(args, ctx) -> list:
    """The same sampling (I prompts x G, fixed length) by `generate_completions`, by plain `generate`, and by
`generate_completions` through the compiled static cache (`compile_decoding`); tokens/s and their ratios."""
    import torch
    from sapo_nb.generation import generate_completions
    from sapo_nb.models import load_policy, compute_context
    from sapo_nb.tasks import TaskStream, format_prompt
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    out = []
    for shape in args.models:
        p = load_policy(str(ctx["dirs"][shape]), device=args.device)
        prompts = [format_prompt(p.tokenizer, q, style="short") for q in TaskStream("quick", 1, "g").next(args.I)]
        sampler = p.sampler()
        generate_completions(sampler, p.tokenizer, prompts[:1], 2, 4, compute_dtype=p.compute_dtype)  # warm
        sync(); t0 = time.perf_counter()
        ours = generate_completions(sampler, p.tokenizer, prompts, args.G, args.new_tokens, seed=0, compute_dtype=p.compute_dtype)
        sync(); t_ours = time.perf_counter() - t0
        enc = p.tokenizer(prompts, return_tensors="pt", padding=True).to(args.device)
        with torch.no_grad(), compute_context(p.model, p.compute_dtype):
            sync(); t0 = time.perf_counter()
            plain = p.model.generate(**enc, do_sample=True, num_return_sequences=args.G, max_new_tokens=args.new_tokens,
                                     min_new_tokens=args.new_tokens, pad_token_id=p.tokenizer.pad_token_id)
            sync(); t_plain = time.perf_counter() - t0
        n_plain = (plain.shape[1] - enc["input_ids"].shape[1]) * plain.shape[0]
        row = dict(shape=shape, prompts=len(prompts), G=args.G, new_tokens=args.new_tokens, ours_tokens=ours.total_tokens,
                   ours_s=round(t_ours, 3), plain_tokens=n_plain, plain_s=round(t_plain, 3), backend=ours.backend,
                   ours_tokens_per_s=round(ours.total_tokens / t_ours, 1), plain_tokens_per_s=round(n_plain / t_plain, 1),
                   ratio=round((ours.total_tokens / t_ours) / (n_plain / t_plain), 3))
        out.append(row)
        ctx["partial"] = out  # kept if the compiles below run out of the stage's time
        timed = []  # through the static cache, compiled: the first call compiles, the second replays
        for _ in range(2):
            sync(); t0 = time.perf_counter()
            compiled = generate_completions(sampler, p.tokenizer, prompts, args.G, args.new_tokens, seed=0,
                                            compute_dtype=p.compute_dtype, backend="generate", compile_decoding=True)
            sync(); timed.append(time.perf_counter() - t0)
        row.update(compiled_first_s=round(timed[0], 3), compiled_s=round(timed[1], 3),
                   compiled_tokens_per_s=round(compiled.total_tokens / timed[1], 1),
                   compiled_over_ours=round((compiled.total_tokens / timed[1]) / (ours.total_tokens / t_ours), 3))
        del p, sampler, plain; gc.collect()
        if args.device.startswith("cuda"): torch.cuda.empty_cache()
    return out


def stage_fits(args, ctx) -> dict:
    "The largest swarm of each model and adapter that fits 16 GB and 80 GB: peak(n) = a + b n from the measured 1- and N-node peaks."
    from sapo_nb.config import preset
    from sapo_nb.models import check_fits, model_shape
    res, out = ctx["results"], {}
    runs = [r for k in ("rounds_1", "rounds_n_lora", "rounds_n") for r in (res.get(k, {}).get("result") or []) if "peak_bytes" in r]
    for shape in args.models:
        for adapter in ("none", "lora"):
            pts = sorted((r["nodes"], r["peak_bytes"]) for r in runs if r["shape"] == shape and r["adapter"] == adapter)
            if not pts: continue
            (n1, p1), (n2, p2) = pts[0], pts[-1]
            b = (p2 - p1) / (n2 - n1) if n2 > n1 else p1
            a = p1 - b * n1
            fit = lambda cap: max(0, int((cap - 2**30 - a) // b)) if b > 0 else None  # a GiB for context and kernels
            cfg = base_config(args, ctx["dirs"][shape], adapter, 1, "fits", ctx["root"])
            est = {f"estimate_{g}": check_fits(cfg, 1, device=args.device, free=int(cap - 2**30), shape=model_shape(ctx["dirs"][shape])).max_nodes
                   for g, cap in (("16GB", GB16), ("80GB", GB80))}
            out[f"{shape}-{adapter}"] = dict(measured_nodes=[n for n, _ in pts], per_node_bytes=int(b), fixed_bytes=int(a),
                                             nodes_16GB=fit(GB16), nodes_80GB=fit(GB80), **est)
    return out


def device_name(device:str) -> str:
    import torch
    name = torch.cuda.get_device_name(device) if device.startswith("cuda") else f"cpu-{platform.machine()}"
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-")


def save(args, ctx):
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(str(args.out) + ".tmp")
    tmp.write_text(json.dumps(ctx["results"], indent=1, default=str)); tmp.replace(args.out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--smoke", action="store_true", help="the tiny shape, tiny sizes, on any device (a check of this script)")
    ap.add_argument("--device", default=None, help="default: cuda if present, else cpu")
    ap.add_argument("--models", default=None, help="comma-separated shapes: " + ", ".join(SHAPES))
    ap.add_argument("--nodes", type=int, default=None, help="the swarm size besides 1 (default 8; smoke 2)")
    ap.add_argument("--sizes", default=None, help="I,J,G,new tokens (default: the paper's 4,4,8,256; smoke 2,2,2,8)")
    ap.add_argument("--adapters", default="none,lora", help="which of 'none' (full fine-tuning) and 'lora' to run")
    ap.add_argument("--budget", type=float, default=330, help="seconds for all stages together")
    ap.add_argument("--out", default=None, help="default: $OUT/gpu_<device name>.json, else bench/results/")
    # the order is what matters most first: the eager stages are slow (a step waits on ~1,500 launches)
    ap.add_argument("--stages", default="roofline,models,rounds_1_compiled,rounds_n_lora,rounds_1,plain_generate,rounds_n,fits")
    ap.add_argument("--stage-seconds", default="", help="seconds for given stages, e.g. rounds_1_compiled=150,rounds_n_lora=80 "
                                                         "(default: twice the stage's share of --budget)")
    args = ap.parse_args(argv)
    import torch, transformers
    transformers.utils.logging.set_verbosity_error(); transformers.utils.logging.disable_progress_bar()
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    args.models = (args.models or ("tiny" if args.smoke else "smollm2,qwen05b")).split(",")
    args.I, args.J, args.G, args.new_tokens = ((2, 2, 2, 8) if args.smoke else (4, 4, 8, 256)) if not args.sizes else \
        tuple(int(x) for x in args.sizes.split(","))  # `paper`: I = J = 4, G = 8, 256 tokens
    args.adapters = args.adapters.split(",")
    args.nodes = args.nodes or (2 if args.smoke else 8)
    name = device_name(args.device)
    results = Path(os.environ.get("OUT") or ROOT / "bench" / "results")  # a device call brings back only $OUT
    args.out = args.out or str(results / f"gpu_{'smoke_' if args.smoke else ''}{name}.json")
    os.environ.setdefault("SAPO_KEY_DIR", tempfile.mkdtemp(prefix="sapo-keys-"))
    root = tempfile.mkdtemp(prefix="sapo-gpu-round-")
    import transformers, peft, sapo_nb
    ctx = dict(root=root, dirs={}, prompt_tokens={}, results=dict(
        device=name, torch=torch.__version__, transformers=transformers.__version__, peft=peft.__version__,
        sapo_nb=sapo_nb.__version__, smoke=args.smoke, sizes=dict(I=args.I, J=args.J, G=args.G, new_tokens=args.new_tokens),
        started=time.strftime("%Y-%m-%dT%H:%M:%S"), memory_total=(torch.cuda.get_device_properties(0).total_memory
                                                                  if args.device.startswith("cuda") else None)))
    stages = dict(roofline=(stage_roofline, 0.08), models=(stage_models, 0.12), rounds_1=(stage_rounds(1, ("none", "lora"), 2), 0.25),
                  plain_generate=(stage_plain_generate, 0.1), rounds_1_compiled=(stage_rounds(1, ("none",), 3, True), 0.32),  # an H200's first compiled round: 99 s
                  rounds_n_lora=(stage_rounds(args.nodes, ("lora",), 1), 0.2),
                  rounds_n=(stage_rounds(args.nodes, ("none",), 1), 0.35), fits=(stage_fits, 0.02))
    given = {k: float(v) for k, v in (kv.split("=") for kv in args.stage_seconds.split(",") if kv)}
    deadline = time.monotonic() + args.budget
    signal.signal(signal.SIGALRM, _alarm)
    for key in args.stages.split(","):
        fn, share = stages[key]
        left = deadline - time.monotonic()
        if left < 5 or (key != "models" and key not in ("roofline", "fits") and not ctx["dirs"]):
            ctx["results"][key] = dict(status="skipped", why="no time left" if left < 5 else "no model folders"); save(args, ctx); continue
        budget = max(5.0, min(left, given.get(key, share * args.budget * 2)))  # by default twice its share, at most what is left
        t0 = time.perf_counter(); ctx["partial"] = []
        signal.setitimer(signal.ITIMER_REAL, budget)
        try:
            result = fn(args, ctx)
            failed = isinstance(result, list) and any("error" in r for r in result)
            ctx["results"][key] = dict(status="partial" if failed else "ok", result=result)
        except StageTimeout:
            ctx["results"][key] = dict(status="timeout", budget_s=round(budget), result=ctx["partial"])
        except Exception as e:
            ctx["results"][key] = dict(status="error", error=f"{type(e).__name__}: {e}"[:1000], trace=traceback.format_exc()[-2000:],
                                       result=ctx["partial"])
        finally: signal.setitimer(signal.ITIMER_REAL, 0)
        ctx["results"][key]["seconds"] = round(time.perf_counter() - t0, 2)
        print(f"{key}: {ctx['results'][key]['status']} in {ctx['results'][key]['seconds']} s", flush=True)
        save(args, ctx)
    print(json.dumps(ctx["results"], indent=1, default=str))
    print(f"written: {args.out}")
    return 0 if all(v.get("status") in ("ok", None) for v in ctx["results"].values() if isinstance(v, dict) and "status" in v) else 1


if __name__ == "__main__":
    sys.exit(main())
