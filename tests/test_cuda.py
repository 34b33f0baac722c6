"""The CUDA path does what the CPU path does: generation by both backends, a GRPO step (full and LoRA), a batch of
several adapters, evaluation, checkpoint and resume, and a two-node swarm, all on the tiny model.

Every test needs a CUDA GPU and is skipped, with the reason, where there is none (`bench/gpu_check.sh` runs them on a
lent GPU). Where a CPU result is the reference, both sides compute in float32, so they agree to rounding.
"""
import math, os

import pytest
import torch

from conftest import tiny_config
from sapo_nb.config import SAPOConfig
from sapo_nb.core import Group
from sapo_nb.generation import generate_completions
from sapo_nb.grpo import GRPOTrainer
from sapo_nb.models import check_fits, load_policy, lora_policy, precision_note
from sapo_nb.node import SwarmNode
from sapo_nb.swarm import node_configs, run_inline
from sapo_nb.transport import MemoryTransport

NO_GPU = "no CUDA GPU here: these tests check the GPU path"
pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU),
              pytest.mark.usefixtures("private_keys")]

F32 = dict(compute_dtype="float32", dtype="float32")  # both sides in float32: results agree to rounding
PROMPTS = ["What is 3 + 4?", "Calculate 12 - 5.", "Hi"]


def greedy_ids(model, tokenizer, backend, adapters=None, prompts=PROMPTS):
    return generate_completions(model, tokenizer, prompts, 1, 12, temperature=0, backend=backend, adapters=adapters).ids


def groups():
    "Two groups of four completions with spread rewards: every row trains."
    return [Group(task="t", item={}, question=q, completions=[c + str(k) for k in range(4)],
                  truncated=[False, True, False, True], rewards=[1.0, 0.0, 0.0, 1.0], prompt=q, node_id="n", round=0)
            for q, c in [("What is 3 + 9?", "12"), ("Calculate 7 - 2.", "5 ")]]


def test_precision_and_fit_say_what_this_gpu_does():
    major, _ = torch.cuda.get_device_capability()
    note = precision_note("cuda")
    assert note.startswith(f"precision: {'bfloat16' if major >= 8 else 'float32'} matmuls")
    assert torch.cuda.get_device_name() in note
    fit = check_fits(SAPOConfig(model="tiny", device="cuda"), 2)
    assert fit.fits and 0 < fit.free <= torch.cuda.get_device_properties(0).total_memory


def test_a_card_without_bfloat16_trains_in_float32_and_says_so(monkeypatch, tmp_path):
    "The T4's path on whatever card is here: 'auto' picks float32 matmuls where bfloat16 is not native, and a node trains."
    import sapo_nb.models as models
    monkeypatch.setattr(models, "native_bf16", lambda device="cpu": False)
    assert models.resolve_compute_dtype("auto", "cuda") == torch.float32
    assert "float32 matmuls" in precision_note("cuda") and "no native bfloat16" in precision_note("cuda")
    node = SwarmNode(tiny_config(tmp_path, device="cuda"), transport=MemoryTransport())
    try:
        assert node.policy.compute_dtype == torch.float32
        row = node.run_round(0)
        assert row["tokens_generated"] > 0 and (row["loss"] is None or math.isfinite(row["loss"]))  # no NaN
    finally: node.close()


def test_greedy_generation_agrees_across_backends_and_with_the_cpu():
    gpu, cpu = load_policy("tiny", device="cuda", **F32), load_policy("tiny", device="cpu", **F32)
    on_gpu = greedy_ids(gpu.model, gpu.tokenizer, "generate")
    assert on_gpu == greedy_ids(cpu.model, cpu.tokenizer, "generate")
    try: looped = greedy_ids(gpu.model, gpu.tokenizer, "loop")  # the decoding loop, asked for on the GPU ...
    except ValueError as e:  # ... where it runs this model at all; it says so in one line where it does not
        assert "decoding loop cannot run" in str(e); return
    assert looped == on_gpu  # ... samples the same tokens


def test_sampling_on_the_gpu_is_seeded_and_ends_at_eos():
    p = load_policy("tiny", device="cuda")
    a, b = (generate_completions(p.model, p.tokenizer, PROMPTS, 4, 16, seed=[1, 2, 3], compute_dtype=p.compute_dtype)
            for _ in range(2))
    assert a.texts == b.texts and a.backend == "generate"
    assert all(len(lp) == n for lps, ns in zip(a.logprobs, a.n_tokens) for lp, n in zip(lps, ns))


def test_compiled_decoding_samples_what_the_dynamic_cache_samples():
    "Through a static cache that transformers compiles (CUDA graphs), float32: the same tokens, greedy and seeded."
    from torch._dynamo.utils import counters
    from sapo_nb.generation import static_cache_problem
    p = load_policy("tiny", device="cuda", **F32)
    assert static_cache_problem(p.model) is None
    graphs = counters["stats"]["unique_graphs"]
    for kw in (dict(temperature=0, seed=0), dict(temperature=0.8, seed=[1, 2, 3])):
        eager, compiled, again = (generate_completions(p.model, p.tokenizer, PROMPTS, 4, 16, backend="generate",
                                                       compile_decoding=c, **kw) for c in (False, True, True))
        assert compiled.ids == eager.ids and again.ids == eager.ids  # a second call replays the recorded graphs
    assert counters["stats"]["unique_graphs"] > graphs  # transformers did compile the decoding step


def gradients_at_step(trainer) -> dict:
    "Fills, at the trainer's next optimizer step, a dict of every trained parameter's gradient (float32, on the CPU)."
    grads, step = {}, trainer.opt.step
    def recording_step(*a, **k):
        grads.update({n: t.grad.detach().float().cpu().clone() for n, t in trainer.model.named_parameters()
                      if t.requires_grad and t.grad is not None})
        return step(*a, **k)
    trainer.opt.step = recording_step
    return grads


@pytest.mark.parametrize("adapter", ["none", "lora"])
def test_grpo_step_matches_the_cpu(adapter):
    """Loss, gradient norm, entropy and every gradient agree with the CPU's. (The weights after Adam's first step are
    not compared: it moves each weight by about lr * g / (|g| + eps), so a gradient near eps turns rounding into a
    step of up to lr.)"""
    def step(device):
        p = (load_policy("tiny", device=device, **F32) if adapter == "none"
             else lora_policy("tiny", f"grpo-{device}", rank=4, seed=1, device=device, **F32))
        try:
            if adapter == "lora":
                with torch.no_grad():  # a trained adapter (B != 0), the same on both devices
                    for name, t in p.model.named_parameters():
                        if "lora_B" in name: t.copy_(torch.linspace(-0.05, 0.05, t.numel()).view_as(t))
            trainer = GRPOTrainer(p.model, p.tokenizer, learning_rate=1e-2, max_new_tokens=8,
                                  compute_dtype=p.compute_dtype)
            grads = gradients_at_step(trainer)
            return trainer.step(groups()), {k.replace(f"grpo-{device}", "x"): g for k, g in grads.items()}
        finally:
            if adapter == "lora": p.release()
    (gpu, g_gpu), (cpu, g_cpu) = step("cuda"), step("cpu")
    assert gpu.tokens_trained == cpu.tokens_trained > 0
    for k in ("loss", "grad_norm", "entropy"):
        assert getattr(gpu, k) == pytest.approx(getattr(cpu, k), rel=1e-3, abs=1e-5), k
    assert list(g_gpu) == list(g_cpu) and len(g_cpu) > 0
    for k, b in g_cpu.items():  # to rounding, relative to the tensor's largest gradient
        torch.testing.assert_close(g_gpu[k], b, rtol=1e-3, atol=1e-4 * float(b.abs().max()) + 1e-12, msg=k)


def test_a_batch_of_several_adapters_answers_as_each_alone():
    a, b = (lora_policy("tiny", name, rank=4, seed=s, device="cuda", **F32) for name, s in (("mix-a", 1), ("mix-b", 2)))
    try:
        with torch.no_grad():
            for name, t in b.model.named_parameters():
                if "lora_B" in name and "mix-b" in name: t.add_(0.2)  # b differs from the base, a does not
        model, tok = a.base.model, a.tokenizer
        mixed = greedy_ids(model, tok, "generate", adapters=["mix-a", "mix-b", "mix-a"])
        a.activate(); alone_a = greedy_ids(model, tok, "generate")
        b.activate(); alone_b = greedy_ids(model, tok, "generate")
        assert mixed == [alone_a[0], alone_b[1], alone_a[2]] and alone_a != alone_b
    finally: b.release(); a.release()


def test_evaluation_on_the_gpu_equals_the_cpu():
    from sapo_nb.evaluation import evaluate
    from sapo_nb.rewards import make_reward_fn
    from sapo_nb.tasks import eval_items, format_prompt
    short = lambda tok, e: format_prompt(tok, e, style="short")
    items = eval_items("quick", 8)
    reward = make_reward_fn(answer_fallback=True)
    res = {d: evaluate(load_policy("tiny", device=d, **F32), items, short, reward, max_new_tokens=8)
           for d in ("cuda", "cpu")}
    assert res["cuda"].items == res["cpu"].items and res["cuda"].n == 8


def test_checkpoint_saved_on_the_gpu_resumes_there(tmp_path):
    cfg = tiny_config(tmp_path, device="cuda", rounds=1)
    n = SwarmNode(cfg, transport=MemoryTransport(), log=lambda *_: None); n.resume(); n.step()
    saved = {k: v.detach().cpu().clone() for k, v in n.policy.state_dict().items()}
    n.close()
    again = SwarmNode(cfg.replace(rounds=2), transport=MemoryTransport(), log=lambda *_: None)
    try:
        assert again.resume() == 1 and next(again.policy.model.parameters()).device.type == "cuda"
        for k, v in again.policy.state_dict().items(): assert torch.equal(v.cpu(), saved[k]), k
        again.step()
        assert again.round == 2
    finally: again.close()


@pytest.mark.parametrize("adapter,compiled", [("none", False), ("lora", False), ("none", True)])
def test_two_node_swarm_runs_rounds_on_the_gpu(tmp_path, adapter, compiled):
    from sapo_nb.core import experiment_dir
    one = tiny_config(tmp_path, device="cuda", external_questions=1, adapter=adapter, compile_decoding=compiled,
                      experiment=f"gpu-{adapter}-{compiled}")
    cfgs = node_configs(one, 2)
    assert run_inline(cfgs, log=lambda *_: None) == {"node-0": "done", "node-1": "done"}
    import json
    for c in cfgs:
        log = experiment_dir(c) / "logs" / c.node_id / "metrics.jsonl"
        rows = [json.loads(line) for line in log.read_text().splitlines()]
        assert [r["round"] for r in rows] == [0, 1, 2] and all(r["tokens_generated"] > 0 for r in rows)
        assert sum(r["pool_available"] for r in rows) > 0  # each node received the other's rollouts
