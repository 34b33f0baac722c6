"""Each check of `sapo_nb.seam` (and the decoding loop's check of a whole step) against a library internal made to
misbehave: the caller takes the plain path, says so once, and computes what the plain path computes."""
import copy, functools, sys, types, warnings
import pytest
import torch
from transformers import LlamaForCausalLM
from transformers.cache_utils import DynamicCache
from transformers.models.llama.modeling_llama import LlamaDecoderLayer
from sapo_nb import seam
from sapo_nb.decoding import decode_completions, decode_loop_problem, stacked_linear, token_picker
from sapo_nb.generation import encode_prompts, generate_completions
from sapo_nb.grpo import GRPOTrainer, shared_prompt_logprobs, token_logprobs, training_groups
from sapo_nb.models import load_policy, lora_policy, move_adapters


@pytest.fixture(autouse=True)
def fresh_checks():
    seam.forget_checks()
    yield
    seam.forget_checks()


@pytest.fixture
def tiny():
    return load_policy("tiny")


def chat(tok, q):
    return tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)


def said(caught, text):
    "The warnings whose message holds `text`."
    return [str(w.message) for w in caught if text in str(w.message)]


def sample(model, tok, **kw):
    prompts = [chat(tok, "What is 2 + 3?"), chat(tok, "Name a colour.")]
    return generate_completions(model, tok, prompts, G=3, max_new_tokens=8, temperature=0.8, seed=[3, 4], **kw)


def test_rotary_function_that_returns_garbage_falls_back_to_generate(tiny):
    "The rotary function the loop finds is not the one the model's attention applies: `generate` samples, one warning."
    module = types.ModuleType("sapo_test_garbage_rotary")
    module.apply_rotary_pos_emb = lambda q, k, cos, sin, *a, **kw: (torch.randn_like(q), torch.randn_like(k))
    sys.modules[module.__name__] = module
    cls = type("GarbageRotary", (LlamaForCausalLM,), {"__module__": module.__name__})
    model = cls(tiny.model.config).eval()
    model.load_state_dict(tiny.model.state_dict())
    assert "off by" in seam.rotary_problem(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = [sample(model, tiny.tokenizer) for _ in range(2)]
    assert [c.backend for c in got] == ["generate", "generate"]
    assert len(said(caught, "sapo_nb")) == 1 and said(caught, "rotary embedding"), [str(w.message) for w in caught]
    assert got[0].texts == sample(tiny.model, tiny.tokenizer, backend="generate").texts


def deafen(model):
    "The decoder's forward swallows the cache, as `**kwargs` swallows a renamed argument."
    forward = model.model.forward
    @functools.wraps(forward)
    def drops_the_cache(*args, **kw):
        kw.pop("cache", None)
        kw.pop("past_key_values", None)
        return forward(*args, **kw)
    model.model.forward = drops_the_cache
    return model


def test_forward_that_ignores_the_cache_gets_no_cache_and_log_probs_stay_right(tiny):
    "The log-prob pass runs whole sequences, with the plain path's numbers, and one warning."
    tok = tiny.tokenizer
    deaf = deafen(copy.deepcopy(tiny.model))
    prompts = [chat(tok, "What is 2 + 3?"), chat(tok, "Name a colour.")]
    groups = training_groups(prompts, [["4", "it is 5"], ["blue", "red or green"]], [[1, 0], [0, 1]])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        deaf_trainer = GRPOTrainer(deaf, tok)
        batch = deaf_trainer.prepare_batch(groups)
        rows = list(range(len(batch)))
        got = [deaf_trainer.batch_logprobs(batch, rows) for _ in range(2)]
    assert len(said(caught, "sapo_nb")) == 1 and said(caught, "a forward given a KV cache"), [str(w.message) for w in caught]
    plain = GRPOTrainer(tiny.model, tok, share_prompts=False).batch_logprobs(batch, rows)
    torch.testing.assert_close(got[0], plain, atol=1e-5, rtol=0)
    assert seam.prompt_cache(deaf, batch.input_ids[:1, :4], batch.attention_mask[:1, :4]) is None


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="no oneDNN in this PyTorch")
def test_mkldnn_pack_that_returns_wrong_numbers_falls_back_to_linear(tiny, monkeypatch):
    "Packed matmuls that disagree with `linear` are not used: the loop multiplies with `linear`, one warning."
    real = torch.ops.mkldnn._linear_pointwise
    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", lambda *args: real(*args) * 1.5)
    lins = [torch.nn.Linear(16, 8), torch.nn.Linear(16, 4)]
    x = torch.randn(3, 16)
    tok = tiny.tokenizer
    enc = encode_prompts(tok, [chat(tok, "What is 2 + 3?")])
    run = lambda pack: decode_completions(tiny.model, enc["input_ids"], enc["attention_mask"], 2, 6, token_picker(0),
                                          {tok.eos_token_id}, tok.pad_token_id, pack=pack)
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        fused = stacked_linear(*lins)(x)
        packed_run = run(True)
    torch.testing.assert_close(fused, torch.cat([l(x) for l in lins], -1).detach())
    with torch.no_grad(): assert torch.equal(packed_run, run(False))
    if seam.pack_problem(torch.float32) is not None:  # the op was present: its check failed, and said so once
        assert len(said(caught, "sapo_nb")) == 1 and said(caught, "oneDNN's packed linear"), [str(w.message) for w in caught]


def copy_rows_wrong(monkeypatch):
    "transformers' caches copy rows in the wrong order from now on (tiled instead of repeated row by row, reversed)."
    def tiled(self, repeats):
        for layer in self.layers:
            layer.keys, layer.values = layer.keys.repeat(repeats, 1, 1, 1), layer.values.repeat(repeats, 1, 1, 1)
    def reversed_rows(self, indices):
        for layer in self.layers:
            layer.keys, layer.values = layer.keys[indices.flip(0)], layer.values[indices.flip(0)]
    monkeypatch.setattr(DynamicCache, "batch_repeat_interleave", tiled)
    monkeypatch.setattr(DynamicCache, "batch_select_indices", reversed_rows)


def test_cache_rows_copied_wrong_fall_back_to_computed_rows(tiny, monkeypatch):
    "A cache whose rows come out in the wrong order is not copied: each row is computed, samples unchanged, one warning."
    before = (sample(tiny.model, tiny.tokenizer), sample(tiny.model, tiny.tokenizer, backend="generate"))
    seam.forget_checks()
    copy_rows_wrong(monkeypatch)
    model = copy.deepcopy(tiny.model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        after = (sample(model, tiny.tokenizer), sample(model, tiny.tokenizer, backend="generate"))
    assert len(said(caught, "sapo_nb")) == 1 and said(caught, "copying KV cache rows"), [str(w.message) for w in caught]
    assert after[0].backend == "loop"
    assert [a.texts for a in after] == [b.texts for b in before]


def test_cache_rows_computed_for_prompts_through_their_own_adapters(monkeypatch):
    """Where copied cache rows may not stand for computed ones, prompts sampled together through their own LoRA adapters
    are each prefilled G times, each copy through its prompt's adapter: the same samples as with copies."""
    nodes = [lora_policy("tiny", f"rows-{k}", rank=4, seed=k, compute_dtype="float32") for k in range(2)]
    try:
        for k, node in enumerate(nodes): move_adapters(node.model, seed=k)  # adapters that change the samples
        model, tok = nodes[0].base.model, nodes[0].base.tokenizer
        mixed = lambda: sample(model, tok, adapters=["rows-0", "rows-1"])
        before = mixed()
        seam.forget_checks()
        copy_rows_wrong(monkeypatch)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            after = mixed()
        assert said(caught, "copying KV cache rows"), [str(w.message) for w in caught]
        assert (after.backend, after.texts) == ("loop", before.texts)
    finally:
        for node in nodes: node.release()


def test_head_that_does_more_than_project_falls_back_to_forward(tiny):
    "A model whose forward changes the head's logits: the log-prob pass uses the forward's logits, one warning."
    class Halved(LlamaForCausalLM):
        @functools.wraps(LlamaForCausalLM.forward)  # the same signature: it takes the cache by name
        def forward(self, *args, **kw):
            out = super().forward(*args, **kw)
            out.logits = out.logits / 2
            return out
    model = Halved(tiny.model.config).eval()
    model.load_state_dict(tiny.model.state_dict())
    tok = tiny.tokenizer
    batch = GRPOTrainer(model, tok).prepare_batch(training_groups([chat(tok, "Hi?")], [["yes", "no, never"]], [[1, 0]]))
    ids, att, cm = batch.input_ids, batch.attention_mask, batch.completion_mask
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        shared = [shared_prompt_logprobs(model, ids, att, cm, [0, 0]) for _ in range(2)]
    assert shared[0] is not None  # the shared path ran, with the forward's logits
    assert len(said(caught, "sapo_nb")) == 1 and said(caught, "output head alone"), [str(w.message) for w in caught]
    with torch.no_grad(): plain = token_logprobs(model, ids, att)
    mask = cm[:, 1:].bool()
    torch.testing.assert_close(shared[0][mask], plain[mask], atol=1e-5, rtol=0)


def test_decoder_layer_that_changed_falls_back_to_generate(tiny, monkeypatch):
    "A decoder layer that computes more than the loop assumes (its output scaled): the step's check fails, `generate` samples."
    real = LlamaDecoderLayer.forward
    def scaled(self, *args, **kw):
        out = real(self, *args, **kw)
        return out * 0.9 if torch.is_tensor(out) else (out[0] * 0.9, *out[1:])
    monkeypatch.setattr(LlamaDecoderLayer, "forward", scaled)
    model = copy.deepcopy(tiny.model)
    assert "off by" in decode_loop_problem(model)
    seam.forget_checks()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = [sample(model, tiny.tokenizer) for _ in range(2)]
    assert [c.backend for c in got] == ["generate", "generate"]
    assert len(said(caught, "sapo_nb")) == 1 and said(caught, "one decoding step"), [str(w.message) for w in caught]
    assert got[0].texts == sample(model, tiny.tokenizer, backend="generate").texts
