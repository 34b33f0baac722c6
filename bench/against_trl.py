"""One training step of TRL's `GRPOTrainer` against one round of a sapo_nb node: same model, prompts, reward, settings.

    pip install -e ".[bench]"                        # trl==1.16.0, datasets
    python bench/against_trl.py                      # embedded SmolLM2-135M on CPU, 3 measured steps per variant
    python bench/against_trl.py --threads 1          # how bench/results/against_trl_cpu.json was made (loaded CPU)
    python bench/against_trl.py --steps 1 --out /tmp/against_trl.json

Four variants, each in a fresh subprocess (its own memory and threads), each a warm-up step then `--steps` measured:
  trl-full / trl-lora    TRL 1.16 `GRPOTrainer` (transformers generate, no vLLM), timed per optimizer step by a
                         callback (between consecutive `on_step_end`s, the first from `on_train_begin`: the warm-up)
  sapo-full / sapo-lora  one `SwarmNode` (MemoryTransport, I=4 local questions, J=0 external), timed per round
                         (`begin_round` + `step`: generate, score, publish, select, train)
Shared settings: 4 prompts x G=4 completions, 32 new tokens, temperature 0.8, top_p 1, beta 0, clip 0.2 low / 0.28
high, one optimizer step per batch (num_iterations=1), AdamW (fused), grad-norm clip 1.0, constant learning rate
1e-5 full / 1e-4 LoRA (r=4, alpha 32, all linear layers, no dropout), no gradient checkpointing, micro-batches of 8
sequences (TRL: per_device_train_batch_size=8 x gradient_accumulation_steps=2, one generation batch of 16), the
questions of the node's own `TaskStream` (mix 'quick') through `format_prompt`, scored by sapo_nb's reward (TRL:
`RewardFn` in-process; the node: the same checks in its bounded scoring worker). Token-level loss: TRL
`loss_type="dapo"`, which divides by the active tokens of the whole accumulated generation batch, as sapo_nb's
`loss_norm="token"` does ("bnpo" divides per micro-batch, so with 2 micro-batches it is not the same loss).
Differences left as each library does them: TRL runs fp32 (bf16=False set: TRL defaults to bf16 autocast even on
CPU), the sapo `cpu` preset autocasts to bfloat16 where the CPU has it natively (recorded as `compute_dtype`;
`--compute-dtype float32` runs sapo_nb in fp32 too); sapo_nb skips zero-advantage completions in the backward
pass, TRL trains all 16 (see `tokens_trained`).
Reported per variant: median seconds per step, peak RSS (MB), completion tokens; ratios sapo/trl for full and LoRA.
Ratios compare only within one run of this script (the same machine, under the same load). On a CPU shared with
other work, `--threads 1` avoids OpenMP threads spinning on cores that another process holds (2 threads ran
generation 20x slower than 1 on a loaded 2-core machine).
"""
import argparse, json, os, platform, statistics, subprocess, sys, tempfile, time
from importlib.metadata import version

VARIANTS = ("trl-full", "sapo-full", "trl-lora", "sapo-lora")


def sapo_cfg(a, lora):
    from sapo_nb.config import preset
    extra = dict(adapter="lora", lora_rank=4, learning_rate=a.lora_lr) if lora else dict(learning_rate=a.lr)
    return preset("cpu", node_id="node-0", root=tempfile.mkdtemp(), transport="memory", device="cpu", eval_every=0,
                  checkpoint_every=0, rounds=a.steps + 1, local_questions=4, external_questions=0,
                  completions_per_question=4, max_new_tokens=32, temperature=0.8, compute_dtype=a.compute_dtype, **extra)


def run_sapo(a, lora):
    from sapo_nb.node import SwarmNode
    from sapo_nb.transport import MemoryTransport
    node = SwarmNode(sapo_cfg(a, lora), transport=MemoryTransport(), log=lambda *_: None)
    secs, gen, trained = [], [], []
    for r in range(a.steps + 1):
        t = time.perf_counter(); row = node.step(node.begin_round(r))
        if r: secs.append(time.perf_counter() - t); gen.append(row["tokens_generated"]); trained.append(row["tokens_trained"])
    return secs, gen, trained, dict(weights=str(node.policy.dtype).replace("torch.", ""),
                                    compute_dtype=str(node.policy.compute_dtype).replace("torch.", ""))


def run_trl(a, lora):
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
    from sapo_nb.models import embedded_model_dir
    from sapo_nb.rewards import RewardFn
    from sapo_nb.tasks import TaskStream, format_prompt, mix_settings
    cfg, path = sapo_cfg(a, lora), str(embedded_model_dir())
    tok = AutoTokenizer.from_pretrained(path)
    stream = TaskStream(cfg.mix, seed=cfg.seed, node_id=cfg.node_id, share_stream=cfg.share_stream, tasks=cfg.tasks)
    entries = stream.next(4 * (a.steps + 1))  # the node's questions, round after round
    style = mix_settings(cfg.mix)["prompt_style"]
    data = Dataset.from_dict(dict(prompt=[format_prompt(tok, e, style) for e in entries], idx=list(range(len(entries)))))
    score = RewardFn(answer_fallback=cfg.answer_fallback, partial_credit=cfg.partial_credit)

    def sapo_reward(prompts, completions, idx, **_): return [score(entries[i], [c])[0] for i, c in zip(idx, completions)]

    class Clock(TrainerCallback):
        stamps = []
        def on_train_begin(self, *_, **__): self.stamps.append(time.perf_counter())
        def on_step_end(self, *_, **__): self.stamps.append(time.perf_counter())

    args = GRPOConfig(output_dir=tempfile.mkdtemp(), max_steps=a.steps + 1, learning_rate=a.lora_lr if lora else a.lr,
                      lr_scheduler_type="constant", per_device_train_batch_size=8, gradient_accumulation_steps=2,
                      num_generations=4, max_completion_length=32, temperature=0.8, top_p=1.0, beta=0.0,
                      epsilon=0.2, epsilon_high=0.28, loss_type="dapo", num_iterations=1, scale_rewards="group",
                      use_vllm=False, bf16=False, use_cpu=True, gradient_checkpointing=False, shuffle_dataset=False,
                      seed=cfg.seed, report_to="none", save_strategy="no", logging_steps=1, disable_tqdm=True)
    peft = LoraConfig(r=4, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM") if lora else None
    trainer = GRPOTrainer(model=path, reward_funcs=sapo_reward, args=args, train_dataset=data, peft_config=peft,
                          callbacks=[Clock()])
    trainer.train()
    s = Clock.stamps
    lens = [h["completions/mean_length"] * 16 for h in trainer.state.log_history if "completions/mean_length" in h]
    trained = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    return [b - a_ for a_, b in zip(s[1:], s[2:])], lens[1:], lens[1:], dict(
        weights=str(trainer.model.dtype).replace("torch.", ""), compute_dtype="bfloat16" if args.bf16 else "float32",
        trainable_parameters=trained)


def worker(a):
    os.environ.setdefault("SAPO_KEY_DIR", tempfile.mkdtemp()); os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if a.threads: os.environ["OMP_NUM_THREADS"] = str(a.threads)
    import torch
    if a.threads: torch.set_num_threads(a.threads)
    from sapo_nb.models import peak_memory_mb
    torch.manual_seed(0)
    lib, kind = a.variant.split("-")
    secs, gen, trained, dtypes = (run_trl if lib == "trl" else run_sapo)(a, kind == "lora")
    med = statistics.median
    print(json.dumps(dict(variant=a.variant, seconds_per_step=med(secs), seconds=secs, tokens_generated_per_step=med(gen),
                          tokens_trained_per_step=med(trained), peak_memory_mb=peak_memory_mb("cpu"),
                          torch_threads=torch.get_num_threads(), **dtypes)))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=3, help="measured steps/rounds per variant, after one warm-up")
    p.add_argument("--lr", type=float, default=1e-5); p.add_argument("--lora-lr", type=float, default=1e-4)
    p.add_argument("--compute-dtype", default="auto", help="sapo_nb's compute_dtype; 'float32' matches TRL's fp32")
    p.add_argument("--threads", type=int, default=0, help="torch threads in every variant (0: torch's default)")
    p.add_argument("--out", default="bench/results/against_trl_cpu.json"); p.add_argument("--variant", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.variant: return worker(a)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
    res = dict(steps=a.steps, threads=a.threads, sapo_compute_dtype=a.compute_dtype, cpu=cpu, cores=os.cpu_count(),
               load_average=os.getloadavg(),
               versions={k: version(k) for k in ("trl", "transformers", "torch", "peft", "accelerate")})
    for v in VARIANTS:
        cmd = [sys.executable, __file__, "--variant", v, "--steps", str(a.steps), "--lr", str(a.lr), "--lora-lr", str(a.lora_lr),
               "--compute-dtype", a.compute_dtype, "--threads", str(a.threads)]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode: print(out.stderr[-3000:], file=sys.stderr); raise SystemExit(f"{v} failed")
        r = res[v] = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{v:10s} {r['seconds_per_step']:7.2f} s/step  peak {r['peak_memory_mb']:6.0f} MB  "
              f"{r['tokens_generated_per_step']:5.0f} tokens generated  {r['compute_dtype']}", flush=True)
    res["ratios"] = {f"sapo_over_trl_{k}": res[f"sapo-{k}"]["seconds_per_step"] / res[f"trl-{k}"]["seconds_per_step"]
                     for k in ("full", "lora")}
    print(json.dumps(res["ratios"]))
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True); open(a.out, "w").write(json.dumps(res, indent=1))


if __name__ == "__main__": main()
