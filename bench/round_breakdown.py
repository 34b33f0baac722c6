"""Where a round's time goes, against the plain way of doing it, on this machine.

For each config (`quick`: the cpu preset, I=2 J=2 G=4, 32 tokens; `paper`: I=4 J=4 G=8, 256 tokens) one real
`SwarmNode` runs rounds on a folder pool that 8 simulated peers fill each round. Reported per round (median):
seconds per phase (generate, reward, publish, collect, select, encode, train), generation tokens/s, the swarm's
overhead (publish + collect + select, validation included) as a share of the round, and peak memory.
In the same run, on the same questions:
  plain      the straightforward way, as the reference implementation does it: one `generate(do_sample=True)`
             per question, then one forward/backward per sequence (log-probs from a float32 log-softmax over the
             vocabulary), float32 throughout
  batched    our batched code as it stood before this benchmark's work: float32 arithmetic, `generate`'s own
             multinomial draw, each prompt copied G times for generation and run whole with every sequence in
             training, the vocabulary-wide log-softmax (what the changes buy together)
and, one change undone at a time, our generation with: the decoding loop's weights not packed for the CPU's
matmul kernel (`unpacked`); transformers' `generate` loop instead of `decode_completions` (`generate`); on top of that, the prompt copied G times (`copied`) or `generate`'s multinomial
draw (`multinomial`); the float32 weights under bfloat16 autocast instead of the sampling copy (`autocast`). Each
variant is built from `sapo_nb.generation`'s lower-level functions (`sample_with`), and the `batched` node from
subclasses of `SwarmNode` and `GRPOTrainer` (`batched_node`): no module of the library is patched;
and the swarm overhead with 512 peers, and the machine's measured matmul/memory roofline for generation (for the
rows our loop decodes at each step, and for `generate`'s fixed batch).

Rewards are random with spread in every group (one 1 and one 0 at least), so every sequence is trained and every
external group passes selection: the round's worst case. `--real-rewards` scores for real.

    python bench/round_breakdown.py                          # quick and paper configs, CPU
    python bench/round_breakdown.py --configs quick --rounds 3
    python bench/round_breakdown.py --device cuda --nodes-per-process 8
    python bench/round_breakdown.py --configs quick --nodes-only --nodes-per-process 4   # add N nodes in one process

Each (config, variant) runs in a fresh subprocess, so peak memory is its own. Results go to
bench/results/round_breakdown_<device>.json and a markdown table on stdout (the docs page reads the JSON).
"""
import argparse, json, os, platform, random, shutil, statistics, subprocess, sys, tempfile, time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PHASES = ("generate", "reward", "publish", "collect", "select", "encode", "train")
CONFIGS = dict(quick=dict(preset="cpu", overrides=dict(local_questions=2, external_questions=2, completions_per_question=4)),
               paper=dict(preset="paper", overrides={}))


def spread_rewards(seed):
    "A reward function giving each group random 0/1 rewards with at least one of each."
    rng = random.Random(seed)
    def reward(entry, completions):
        r = [float(rng.random() < 0.5) for _ in completions]
        if len(r) > 1: r[0], r[1] = 1.0, 0.0
        return r
    return reward


def summarise(rows, phases, device):
    "Median seconds per phase, median generated tokens, generation tokens/s and peak memory of measured rounds."
    from sapo_nb.models import peak_memory_mb as _peak_memory_mb  # the number a node's metrics row reports
    return dict(seconds={k: statistics.median(row["seconds"].get(k, 0.0) for row in rows) for k in phases + ("total",)},
                tokens_generated=statistics.median(row["tokens_generated"] for row in rows),
                generate_tokens_per_s=sum(r["tokens_generated"] for r in rows) / sum(r["seconds"]["generate"] for r in rows),
                peak_memory_mb=_peak_memory_mb(device))


def make_config(name, a, node_id="node-0", root=None, **extra):
    from sapo_nb.config import preset
    c = CONFIGS[name]
    kw = dict(c["overrides"], model=a.model, device=a.device, root=root, experiment="bench", node_id=node_id,
              transport="folder", checkpoint_every=0, rounds=10**6, seed=a.seed, selection="paper")
    kw.update(extra)
    return preset(c["preset"], **kw)


def fill_pool(transport, r, groups, peers, G, seed):
    "Publish round r's rollouts of `peers` simulated peers (the given groups; the receiver scores them itself)."
    for p in range(peers): transport.publish(r, f"peer-{p:03d}", groups, G=G, model="bench")


# ---------------------------------------------------------------- the plain way
def sample_with(variant, model, tok, prompts, G, max_new_tokens, temperature, top_p=1.0, seed=None, compute_dtype=None):
    """One timed generation call, as `Completions`, done the way `variant` names:
    ours         `generate_completions` as a node calls it (on a CPU, the decoding loop for the models it runs)
    unpacked     the decoding loop, its weights not packed for the CPU's matmul kernel
    generate     transformers' `generate` from the prompts prefilled once, drawing with `InverseCDFSampler`
    copied       the same with every prompt copied G times
    multinomial  `generate`'s own draw (`torch.multinomial`), from the prompts prefilled once
    plain        `generate`'s own draw with every prompt copied G times: the reference implementation's way"""
    import torch
    from transformers import LogitsProcessorList
    from sapo_nb.decoding import InverseCDFSampler, decode_completions, sampling_processors, token_picker
    from sapo_nb.generation import completions_from_ids, encode_prompts, eos_ids, generate_completions, generate_ids, sampling_config
    from sapo_nb.models import compute_context
    if variant == "ours":
        return generate_completions(model, tok, prompts, G, max_new_tokens, temperature, top_p, seed=seed, compute_dtype=compute_dtype)
    if seed is not None: torch.manual_seed(seed)
    enc, eos, pad = encode_prompts(tok, prompts, model.device), eos_ids(model, tok), tok.pad_token_id
    ids, att = enc["input_ids"], enc["attention_mask"]
    model.eval()
    t0 = time.perf_counter()
    with torch.no_grad(), compute_context(model, compute_dtype):
        if variant == "unpacked":
            new = decode_completions(model, ids, att, G, max_new_tokens, token_picker(temperature, top_p), eos, pad, pack=False)
        elif variant in ("generate", "copied"):  # greedy on top of a processor that leaves only the drawn token
            draw = LogitsProcessorList([*sampling_processors(temperature, top_p), InverseCDFSampler()])
            new = generate_ids(model, ids, att, G, sampling_config(max_new_tokens, 0, eos=eos, pad_token_id=pad),
                               prefill=variant == "generate", logits_processor=draw)
        elif variant in ("multinomial", "plain"):
            new = generate_ids(model, ids, att, G, sampling_config(max_new_tokens, temperature, top_p, eos, pad),
                               prefill=variant == "multinomial")
        else: raise ValueError(f"variant: got {variant!r}")
    return completions_from_ids(tok, new, eos, G, max_new_tokens, time.perf_counter() - t0, variant)


def plain_token_logprobs(model, input_ids, attention_mask, temperature, with_entropy=False):
    "`token_logprobs` the straightforward way: full logits, then `plain_target_logprobs`."
    logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits[:, :-1]
    return plain_target_logprobs(logits, input_ids[:, 1:], temperature, with_entropy, lambda x: x)


def batched_node(cfg, **kw):
    """A `SwarmNode` as our batched code stood before this benchmark's work: `generate`'s multinomial draw with every
    prompt copied G times, and a trainer that runs every sequence whole through the vocabulary-wide log-softmax."""
    from sapo_nb.node import SwarmNode
    from sapo_nb.grpo import GRPOTrainer
    from sapo_nb.tasks import derive_seed

    class BatchedTrainer(GRPOTrainer):
        def _logprobs(self, model, batch, rows, input_ids, attention_mask, with_entropy=False):
            return plain_token_logprobs(model, input_ids, attention_mask, self.temperature, with_entropy)

    class BatchedNode(SwarmNode):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            trainer = object.__new__(BatchedTrainer)  # the node's own trainer (settings, optimizer), as a BatchedTrainer
            trainer.__dict__.update(self.trainer.__dict__)
            trainer.share_prompts = False
            self.trainer = trainer

        def _generate_local(self, r, I):
            c, tok = self.cfg, self.policy.tokenizer
            questions = self.stream.next(I) if I else []
            if not questions: return [], [], None
            prompts = [self.format_prompt(tok, q) for q in questions]
            comps = sample_with("plain", self.policy.sampler(), tok, prompts, c.completions_per_question, c.max_new_tokens,
                                c.temperature, c.top_p, seed=derive_seed(c.seed, c.node_id, r, "generate"),
                                compute_dtype=self.policy.compute_dtype)
            return questions, prompts, comps

    return BatchedNode(cfg, **kw)


def plain_target_logprobs(logits, targets, temperature, with_entropy, place):
    "Token log-probs the straightforward way: a float32 log-softmax over the whole vocabulary, the entropy from it."
    import torch
    logp_all = torch.log_softmax(logits.float() / temperature, -1)
    logp = logp_all.gather(-1, targets[..., None])[..., 0]
    if not with_entropy: return place(logp)
    with torch.no_grad(): entropy = -(logp_all.exp() * logp_all).sum(-1)
    return place(logp), place(entropy)


def plain_round(policy, cfg, prompts, ext_prompts, ext_comps, reward_fn, questions, opt):
    "One round the straightforward way: a generate per question, then a forward/backward per sequence, float32."
    import torch
    from sapo_nb.grpo import encode_batch, group_advantages, grpo_loss
    model, tok, G = policy.model, policy.tokenizer, cfg.completions_per_question
    sec, texts, ended, n_tok = {}, [], [], 0
    t = time.perf_counter()
    for p in prompts:  # one question at a time, its prompt copied G times, float32
        c = sample_with("plain", model, tok, [p], G, cfg.max_new_tokens, cfg.temperature)
        texts += c.texts; ended += [[not x for x in c.truncated[0]]]; n_tok += c.total_tokens
    sec["generate"] = time.perf_counter() - t; t = time.perf_counter()
    rewards = [reward_fn(q, c) for q, c in zip(questions, texts)] + [reward_fn(None, c) for c in ext_comps]
    sec["reward"] = time.perf_counter() - t; t = time.perf_counter()
    adv, _ = group_advantages(rewards)
    seqs = [(p, c, e, a) for p, cs, es, As in zip(prompts + ext_prompts, texts + ext_comps,
                                                 ended + [[True] * len(c) for c in ext_comps], adv)
            for c, e, a in zip(cs, es, As)]
    encs = [encode_batch(tok, [p], [c], [e], cfg.max_new_tokens) for p, c, e, _ in seqs]
    Z = sum(int(e["completion_mask"].sum()) for e in encs)
    model.train(); opt.zero_grad()
    for e, (_, _, _, a) in zip(encs, seqs):
        logp = plain_token_logprobs(model, e["input_ids"].to(model.device), e["attention_mask"].to(model.device), cfg.temperature)
        m = e["completion_mask"][:, 1:].to(model.device)
        loss, _ = grpo_loss(logp, logp.detach(), torch.tensor([a], device=model.device), m, torch.tensor(float(max(Z, 1))))
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm); opt.step(); opt.zero_grad()
    sec["train"] = time.perf_counter() - t
    sec["total"] = sum(sec.values())
    return dict(seconds=sec, tokens_generated=n_tok)


# ---------------------------------------------------------------- one worker: a config, a variant
def worker(a):
    import torch
    from sapo_nb.node import SwarmNode
    from sapo_nb.sampler import select_external, round_rng
    from sapo_nb.grpo import make_optimizer
    from sapo_nb.tasks import TaskStream
    torch.manual_seed(a.seed)
    name, variant = a.worker.split(":")
    root = tempfile.mkdtemp(prefix="sapo_rb_")
    os.environ.setdefault("SAPO_KEY_DIR", tempfile.mkdtemp(prefix="sapo_rb_keys_"))  # the simulated peers' keys: private, outside the pool
    extra = dict(compute_dtype="float32") if variant in ("batched", "plain") else {}
    cfg = make_config(name, a, root=root, **extra)
    t0 = time.perf_counter()
    node = (batched_node if variant == "batched" else SwarmNode)(cfg, log=lambda *_: None)
    load_s = time.perf_counter() - t0
    if not a.real_rewards: node.reward_fn = spread_rewards(a.seed)
    G, out = cfg.completions_per_question, dict(config=name, variant=variant, cfg=cfg.to_dict(), load_seconds=load_s,
                                               compute_dtype=str(node.policy.compute_dtype), device=str(node.policy.device))
    # warm-up round 0: its completions become the simulated peers' rollouts (real text of the right length)
    warm = node.begin_round(0)
    warm_texts = [g.completions for g in warm.groups]
    texts = [[c or "0" for c in cs] for cs in warm_texts]  # an empty completion is never published
    peer_qs = TaskStream(cfg.mix, seed=a.seed, node_id="peers").next(max(cfg.external_questions, 1))
    peer_groups = [dict(task=q["task"], item=q["item"], question=q["question"], completions=texts[i % len(texts)],
                        truncated=[False] * G) for i, q in enumerate(peer_qs)]
    fill_pool(node.transport, 0, peer_groups, a.peers, G, a.seed)
    node.finish_round(warm)
    rows = []
    if variant in ("ours", "batched"):
        for r in range(1, (a.rounds if variant == "ours" else a.plain_rounds) + 1):
            fill_pool(node.transport, r, peer_groups, a.peers, G, a.seed)
            rows.append(node.run_round(r))
        out.update(summarise(rows, PHASES, node.policy.device))  # peak memory before the extra measurements below
        out["tokens_trained"] = statistics.median(row["tokens_trained"] for row in rows)
        out["pool_selected"] = statistics.median(row["pool_selected"] for row in rows)
    if variant == "ours":  # the swarm's cost with many peers, and generation with the prompt copied G times
        over = {}
        for peers in sorted(set(a.overhead_peers)):
            r = 10_000 + peers
            fill_pool(node.transport, r, peer_groups, peers, G, a.seed)
            node.transport._cache.clear() if hasattr(node.transport, "_cache") else None
            t = time.perf_counter(); cands = node._collect(r); tc = time.perf_counter() - t
            t = time.perf_counter()
            ext, _ = select_external(cands, cfg.external_questions, node.strategy, node.reward_fn, round_rng(cfg.seed, r, cfg.node_id),
                                     mix=cfg.mix)
            ts = time.perf_counter() - t
            over[peers] = dict(collect=tc, select=ts, publish=out["seconds"]["publish"], groups=len(cands), selected=len(ext))
        out["overhead"] = over
        prompts = [node.format_prompt(node.policy.tokenizer, q) for q in node.stream.next(cfg.local_questions)]
        gen, pol = {}, node.policy
        for what, variant_, model in [("shared", "ours", pol.sampler()), ("unpacked", "unpacked", pol.sampler()),
                                      ("generate", "generate", pol.sampler()), ("copied", "copied", pol.sampler()),
                                      ("multinomial", "multinomial", pol.sampler()), ("autocast", "ours", pol.model)]:
            c = sample_with(variant_, model, pol.tokenizer, prompts, G, cfg.max_new_tokens, cfg.temperature, seed=a.seed,
                            compute_dtype=pol.compute_dtype)
            n = [k for row in c.n_tokens for k in row]
            gen[what] = dict(seconds=c.seconds, tokens=c.total_tokens, steps=max(n), n_tokens=n)
        p_len = [len(node.policy.tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts]
        gen["prompt_tokens"] = p_len
        out["prefill"] = gen
        out["roofline"] = roofline_of_run(node.policy, cfg, gen)
    if variant == "plain":
        opt = make_optimizer(node.policy.model.parameters(), cfg.optimizer, cfg.learning_rate, cfg.weight_decay)
        for r in range(1, a.plain_rounds + 1):
            qs = node.stream.next(cfg.local_questions)
            prompts = [node.format_prompt(node.policy.tokenizer, q) for q in qs]
            ext_prompts = [node.format_prompt(node.policy.tokenizer, g) for g in peer_groups[:cfg.external_questions]]
            ext_comps = [g["completions"] for g in peer_groups[:cfg.external_questions]]
            rows.append(plain_round(node.policy, cfg, prompts, ext_prompts, ext_comps, node.reward_fn, qs, opt))
        out.update(summarise(rows, ("generate", "reward", "train"), node.policy.device))
    shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(out))


def nodes_worker(a):
    "N nodes of the quick/paper config in one process sharing one in-memory pool: memory per node and s/round."
    import torch
    from sapo_nb.node import SwarmNode
    from sapo_nb.transport import MemoryTransport
    name = a.nodes_worker
    pool, root = MemoryTransport(), tempfile.mkdtemp(prefix="sapo_rb_")
    os.environ.setdefault("SAPO_KEY_DIR", tempfile.mkdtemp(prefix="sapo_rb_keys_"))
    from sapo_nb.models import peak_memory_mb as _peak_memory_mb
    base = _peak_memory_mb(a.device)
    nodes = []
    for i in range(a.nodes_per_process):
        n = SwarmNode(make_config(name, a, node_id=f"node-{i}", root=root, transport="memory"), transport=pool, log=lambda *_: None)
        if not a.real_rewards: n.reward_fn = spread_rewards(a.seed + i)
        nodes.append(n)
    times = []
    for r in range(2):
        t = time.perf_counter()
        states = [n.begin_round(r) for n in nodes]
        for n, s in zip(nodes, states): n.finish_round(s)
        times.append(time.perf_counter() - t)
    peak = _peak_memory_mb(a.device)
    shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(dict(config=name, nodes=a.nodes_per_process, peak_memory_mb=peak, base_memory_mb=base,
                          per_node_mb=(peak - base) / a.nodes_per_process, seconds_per_round_all=times[-1],
                          seconds_per_round_per_node=times[-1] / a.nodes_per_process)))


# ---------------------------------------------------------------- the machine
def cpu_name():
    "The processor's model name (`/proc/cpuinfo`), or what `platform` knows."
    try: return next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration): return platform.processor() or platform.machine()


def machine(device, dtypes=("float32", "bfloat16"), hidden=576, inter=1536, batch=(16, 64)):
    """Measured matmul GFLOPS (decode-shaped and large) per dtype, and memory copy bandwidth: each the best of five
    timings, on buffers allocated beforehand (a fresh allocation per copy would time page faults, not memory). On a
    CPU the matmul rate is the better of `torch.mm` and oneDNN's linear on a packed weight (what the decoding loop uses)."""
    import torch
    from sapo_nb.decoding import fused_linear
    sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)
    def best(fn, reps=5):
        fn(); times = []
        for _ in range(reps):
            sync(); t = time.perf_counter(); fn(); sync(); times.append(time.perf_counter() - t)
        return min(times)
    def rate(m, k, n, dt, it=10):
        x, w = torch.randn(m, k, dtype=dt, device=device), torch.randn(k, n, dtype=dt, device=device)
        out = torch.empty(m, n, dtype=dt, device=device)
        with torch.no_grad(): packed = fused_linear(torch.nn.Linear(k, n, bias=False, dtype=dt, device=device))
        seconds = min(best(lambda: [torch.mm(x, w, out=out) for _ in range(it)]), best(lambda: [packed(x) for _ in range(it)]))
        return 2 * m * k * n * it / seconds / 1e9
    out = dict(cpu=cpu_name(), threads=torch.get_num_threads(), torch=torch.__version__)
    if str(device).startswith("cuda"): out["gpu"] = torch.cuda.get_device_name()
    for d in dtypes:
        dt = getattr(torch, d)
        out[f"gflops_{d}"] = {str(b): rate(b, hidden, inter, dt) for b in batch}
        out[f"gflops_{d}"]["large"] = rate(2048, 2048, 2048, dt, it=3)
    x = torch.ones(128 * 2**20, dtype=torch.float32, device=device)  # 512 MB: larger than any cache
    y = torch.empty_like(x)
    out["copy_gb_per_s"] = 2 * x.numel() * 4 / best(lambda: y.copy_(x)) / 1e9
    return out


def model_dims(model, compute_dtype):
    "What the roofline needs to know of a model: parameters, and bytes per weight and per cached token."
    import torch
    c, size = model.config, torch.tensor([], dtype=compute_dtype).element_size()
    kv_heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return dict(params=sum(p.numel() for p in model.parameters()), dtype_bytes=size,
                kv_bytes_per_token=2 * c.num_hidden_layers * kv_heads * head_dim * size)


def decode_batches(B):
    "The batch sizes whose matmul rate the roofline needs: powers of two below `B`, and `B`."
    return tuple(sorted({2**k for k in range(max(B, 1).bit_length()) if 2**k < B} | {B}))


def rows_per_step(n_tokens):
    "Rows still decoding at each step, for completions of `n_tokens` tokens each (the least work that produces them)."
    return [sum(n > k for n in n_tokens) for k in range(max(n_tokens))]


def roofline(dims, mach, dt, rows, prompt_tokens, measured_seconds, G):
    """Lower bound on a generation call's time on this machine: the distinct prompts prefilled at the large-matmul
    rate, then for each decode step, with `rows[k]` sequences decoding, the larger of its matmul time (at the rate
    measured for the next measured batch size up) and the time to read the weights and those sequences' KV caches
    once at the measured copy bandwidth."""
    flops_tok = 2 * dims["params"]  # every weight is used once per token (the tied embedding as the output projection)
    rates = {int(b): r * 1e9 for b, r in mach[f"gflops_{dt}"].items() if b != "large"}
    rate = lambda b: rates[min((k for k in rates if k >= b), default=max(rates))]
    bw = mach["copy_gb_per_s"] * 1e9
    per_prompt = sum(prompt_tokens) / len(prompt_tokens)
    t_prefill = sum(prompt_tokens) * flops_tok / (mach[f"gflops_{dt}"]["large"] * 1e9)
    compute = [b * flops_tok / rate(b) for b in rows]
    memory = [(dims["params"] * dims["dtype_bytes"] + b * (per_prompt + k) * dims["kv_bytes_per_token"]) / bw for k, b in enumerate(rows)]
    t = t_prefill + sum(map(max, compute, memory))
    return dict(dims, batch=len(prompt_tokens) * G, steps=len(rows), rows_decoded=sum(rows), prefill_tokens=sum(prompt_tokens),
                machine=mach, prefill_s=t_prefill, step_compute_s_first=compute[0], step_memory_s_first=memory[0],
                roofline_seconds=t, measured_seconds=measured_seconds, ratio=measured_seconds / t,
                bound="compute" if sum(compute) > sum(memory) else "memory")


def roofline_of(gen, mach, dims, dt, G):
    "The roofline of the `shared` generation call (the rows it decoded), and that of `generate`'s fixed batch."
    B, shared = len(gen["prompt_tokens"]) * G, gen["shared"]
    rows = rows_per_step(shared["n_tokens"]) if "n_tokens" in shared else [B] * shared["steps"]  # files before the loop
    out = roofline(dims, mach, dt, rows, gen["prompt_tokens"], shared["seconds"], G)
    if "generate" in gen:
        fixed = roofline(dims, mach, dt, [B] * gen["generate"]["steps"], gen["prompt_tokens"], gen["generate"]["seconds"], G)
        out["generate"] = {k: fixed[k] for k in ("rows_decoded", "roofline_seconds", "measured_seconds", "ratio")}
    return out


def roofline_of_run(policy, cfg, gen):
    "The rooflines of the generation calls the worker timed, on the machine measured now."
    dt = str(policy.compute_dtype).replace("torch.", "")
    G = cfg.completions_per_question
    mach = machine(policy.device, dtypes=(dt,), batch=decode_batches(len(gen["prompt_tokens"]) * G))
    return roofline_of(gen, mach, model_dims(policy.model, policy.compute_dtype), dt, G)


# ---------------------------------------------------------------- the driver
def run_child(args, extra):
    cmd = [sys.executable, __file__] + extra + [f"--model={args.model}", f"--device={args.device}", f"--seed={args.seed}",
           f"--rounds={args.rounds}", f"--plain-rounds={args.plain_rounds}", f"--peers={args.peers}"] \
        + ["--overhead-peers"] + [str(p) for p in args.overhead_peers] + (["--real-rewards"] if args.real_rewards else [])
    print("  $ " + " ".join(cmd[1:]), file=sys.stderr, flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, TOKENIZERS_PARALLELISM="false"))
    if p.returncode: sys.stderr.write(p.stderr[-4000:]); raise SystemExit(f"child failed: {' '.join(extra)}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def table(res):
    "The results as markdown: one line per config, then the phases and the overheads."
    L = [f"{res['machine']['cpu']}, {res['machine']['threads']} threads, torch {res['machine']['torch']}, model {res['model']}, {res['date']}", "",
         "| config | plain s/round | batched (before) s/round | ours s/round | ours / plain | ours / plain per generated token | ours / batched | gen tok/s plain / ours | peak MB plain / ours |",
         "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in res["configs"].items():
        o, p, b = r["ours"], r["plain"], r.get("batched")
        bt = b["seconds"]["total"] if b else float("nan")
        L.append(f"| {name} | {p['seconds']['total']:.2f} | {bt:.2f} | {o['seconds']['total']:.2f} "
                 f"| **{o['seconds']['total'] / p['seconds']['total']:.2f}** "
                 f"| {(o['seconds']['total'] / o['tokens_generated']) / (p['seconds']['total'] / p['tokens_generated']):.2f} | {o['seconds']['total'] / bt:.2f} "
                 f"| {p['generate_tokens_per_s']:.0f} / {o['generate_tokens_per_s']:.0f} | {p['peak_memory_mb']:.0f} / {o['peak_memory_mb']:.0f} |")
    L += ["", "| config | " + " | ".join(PHASES) + " | total |", "|---|" + "---:|" * (len(PHASES) + 1)]
    for name, r in res["configs"].items():
        s = r["ours"]["seconds"]
        L.append(f"| {name} (ours) | " + " | ".join(f"{s[k]:.3f}" for k in PHASES) + f" | {s['total']:.2f} |")
        if "batched" in r:
            s = r["batched"]["seconds"]
            L.append(f"| {name} (batched, before) | " + " | ".join(f"{s[k]:.3f}" for k in PHASES) + f" | {s['total']:.2f} |")
        s = r["plain"]["seconds"]
        L.append(f"| {name} (plain) | {s['generate']:.3f} | {s['reward']:.3f} | - | - | - | - | {s['train']:.3f} | {s['total']:.2f} |")
    L += ["", "| config | peers | publish + collect + select s | share of round |", "|---|---:|---:|---:|"]
    for name, r in res["configs"].items():
        for peers, v in r["ours"]["overhead"].items():
            s = v["publish"] + v["collect"] + v["select"]
            L.append(f"| {name} | {peers} | {s:.4f} | {100 * s / r['ours']['seconds']['total']:.2f}% |")
    L += ["", "| config | generation s (ours) | weights not packed (/ ours) | generate's loop (/ ours) "
          "| + prompt copied G times (/ generate) | + multinomial draw (/ generate) | float32 weights + autocast (/ ours) "
          "| roofline s | ours / roofline | bound | generate / its roofline |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    for name, r in res["configs"].items():
        g, rf = r["ours"]["prefill"], r["ours"]["roofline"]
        base = "generate" if "generate" in g else "shared"  # results before the decoding loop: every change against ours
        alt = lambda k, b: f"{g[k]['seconds']:.2f} ({g[k]['seconds'] / g[b]['seconds']:.2f}x)" if k in g else "-"
        fixed = f"{rf['generate']['ratio']:.2f}" if "generate" in rf else "-"
        L.append(f"| {name} | {g['shared']['seconds']:.2f} | {alt('unpacked', 'shared')} | {alt('generate', 'shared')} "
                 f"| {alt('copied', base)} | {alt('multinomial', base)} "
                 f"| {alt('autocast', 'shared')} | {rf['roofline_seconds']:.2f} | {rf['ratio']:.2f} | {rf['bound']} | {fixed} |")
    nodes = [(n, r["nodes"]) for n, r in res["configs"].items() if "nodes" in r]
    if nodes:
        L += ["", "| config | nodes in one process | peak MB | MB per node | s/round, all nodes |", "|---|---:|---:|---:|---:|"]
        L += [f"| {n} | {v['nodes']} | {v['peak_memory_mb']:.0f} | {v['per_node_mb']:.0f} | {v['seconds_per_round_all']:.1f} |" for n, v in nodes]
    return "\n".join(L)


def retable(path, remeasure=False):
    """Re-derive the rooflines and the tables of a results file from its timings, with the stored machine numbers or
    (`remeasure`) the machine measured again now; no round is re-run."""
    from sapo_nb.models import load_policy
    res = json.loads(path.read_text())
    for r in res["configs"].values():
        o, rf = r["ours"], r["ours"]["roofline"]
        dt = o["compute_dtype"].replace("torch.", "")
        pol = load_policy(res["model"], device=res.get("device", "cpu"), compute_dtype=dt)
        G = rf["batch"] // len(o["prefill"]["prompt_tokens"])
        mach = machine(pol.device, dtypes=(dt,), batch=decode_batches(rf["batch"])) if remeasure else rf["machine"]
        o["roofline"] = roofline_of(o["prefill"], mach, model_dims(pol.model, pol.compute_dtype), dt, G)
    res["machine"] = next(iter(res["configs"].values()))["ours"]["roofline"]["machine"]
    res["table"] = table(res)
    path.write_text(json.dumps(res, indent=1))
    print(res["table"])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", nargs="+", default=["quick", "paper"], choices=list(CONFIGS))
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=3, help="measured rounds of ours (after one warm-up round)")
    p.add_argument("--plain-rounds", type=int, default=1, help="measured rounds of the plain way and of the batched variant")
    p.add_argument("--peers", type=int, default=8, help="simulated peers filling the pool each measured round")
    p.add_argument("--overhead-peers", type=int, nargs="+", default=[8, 512])
    p.add_argument("--nodes-per-process", type=int, default=0, help="also run N nodes in one process (memory per node)")
    p.add_argument("--no-batched", action="store_true", help="skip the batched (before) variant")
    p.add_argument("--nodes-only", action="store_true", help="with --nodes-per-process: run only that, keep the rest of --out")
    p.add_argument("--real-rewards", action="store_true")
    p.add_argument("--out", default=None)
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--nodes-worker", help=argparse.SUPPRESS)
    p.add_argument("--retable", action="store_true", help="recompute the roofline and the table of --out from its measurements")
    p.add_argument("--remeasure-machine", action="store_true", help="with --retable: measure the machine's roofline again")
    a = p.parse_args(argv)
    out = Path(a.out or HERE / "results" / f"round_breakdown_{a.device.split(':')[0]}.json")
    if a.worker: return worker(a)
    if a.retable: return retable(out, a.remeasure_machine)
    if a.nodes_worker: return nodes_worker(a)
    res = dict(date=time.strftime("%Y-%m-%d"), model=a.model, device=a.device, host=platform.node(), configs={})
    if a.nodes_only and not (a.nodes_per_process and out.exists()):
        raise SystemExit("--nodes-only needs --nodes-per-process N and an existing results file (--out)")
    if out.exists():  # keep the configs this run does not redo: one file per device, built up config by config
        old = json.loads(out.read_text())
        if a.nodes_only: res = old
        elif old.get("model") == a.model: res["configs"] = {k: v for k, v in old["configs"].items() if k not in a.configs}
    out.parent.mkdir(parents=True, exist_ok=True)
    for name in a.configs:  # the file is rewritten after each config, so a run cut short keeps what it measured
        if not a.nodes_only:
            res["configs"][name] = {v: run_child(a, [f"--worker={name}:{v}"]) for v in ("ours", "plain") + (() if a.no_batched else ("batched",))}
        if a.nodes_per_process:
            res["configs"][name]["nodes"] = run_child(a, [f"--nodes-worker={name}", f"--nodes-per-process={a.nodes_per_process}"])
        res["machine"] = res["configs"][a.configs[0]]["ours"]["roofline"]["machine"]
        res["table"] = table(res)
        out.write_text(json.dumps(res, indent=1))
    print(res["table"])
    print(f"\nwritten to {out}")


if __name__ == "__main__":
    sys.exit(main())
