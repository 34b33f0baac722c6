"""A model to take home: a trained node saved as a merged transformers model, as its LoRA adapter alone, as GGUF
(where llama.cpp's converter is installed) and pushed to a hub, each read back answering exactly as the node did.
Tiny model, a LoRA node trained for two rounds; a local folder stands in for the hub, a stub for the converter.
"""
import os, re, shutil, stat, sys
from pathlib import Path

import pytest

from conftest import learning_node, sapo_cli, tiny_config
from sapo_nb.generation import generate_completions
from sapo_nb.models import load_policy, push_to_hub
from sapo_nb.node import SwarmNode, ExportError, save_model
from sapo_nb.transport import MemoryTransport

pytestmark = pytest.mark.usefixtures("private_keys")

PROMPTS = ["What is 3 + 4?", "Calculate 12 - 5."]


def greedy(model, tokenizer) -> list:
    return generate_completions(model, tokenizer, PROMPTS, 1, 8, temperature=0, backend="generate").texts


@pytest.fixture
def trained(tmp_path):
    "A LoRA node trained three rounds (its checkpoint kept) and the greedy answers of its trained policy."
    cfg = tiny_config(tmp_path, adapter="lora", rounds=3, learning_rate=1e-2, experiment="run")
    n = learning_node(cfg, transport=MemoryTransport(), log=lambda *_: None)
    n.resume(); n.step(); n.step(); n.step()
    assert any(v.abs().sum() > 0 for k, v in n.policy.state_dict().items() if "lora_B" in k)  # it trained
    answers = greedy(n.policy.sampler(), n.policy.tokenizer)
    n.close()
    base = load_policy("tiny", device="cpu")
    assert greedy(base.model, base.tokenizer) != answers  # so an export that lost the training cannot pass as the node
    return cfg, answers


def test_merged_model_answers_as_the_node(trained, tmp_path):
    "`save_model` (merged): a whole model that `load_policy` reads, no peft needed, with the node's greedy answers."
    cfg, answers = trained
    out = save_model(cfg, tmp_path / "merged", log=lambda *_: None)
    # readable by others like any file a model folder holds (the weights file was written owner-only: 0600)
    assert {f.name: oct(f.stat().st_mode & 0o777) for f in out.iterdir() if f.stat().st_mode & 0o777 != 0o644} == {}
    assert not (out / "adapter_config.json").exists()
    p = load_policy(str(out), device="cpu")
    assert greedy(p.model, p.tokenizer) == answers


def test_adapter_alone_answers_as_the_node_on_its_base(trained, tmp_path):
    "`save_model(form='adapter')`: peft's adapter folder (small), which on the base answers as the node did."
    from peft import PeftModel
    cfg, answers = trained
    import warnings
    with warnings.catch_warnings(record=True) as caught:  # peft's lookup of the base on the hub, offline, is not news
        warnings.simplefilter("always")
        out = save_model(cfg, tmp_path / "adapter", form="adapter", log=lambda *_: None)
    assert not [str(w.message) for w in caught if "config file" in str(w.message) or "fetch remote" in str(w.message)]
    assert (out / "adapter_config.json").is_file() and not (out / "model.safetensors").exists()
    base = load_policy("tiny", device="cpu")
    assert greedy(PeftModel.from_pretrained(base.model, str(out)), base.tokenizer) == answers


def test_adapter_of_a_full_node_is_refused_in_one_line(tmp_path):
    "A node that trained every weight has no adapter: a one-line error that says what to use."
    cfg = tiny_config(tmp_path, rounds=1)
    SwarmNode(cfg, transport=MemoryTransport(), log=lambda *_: None).run(on_round=lambda r: None)
    with pytest.raises(ExportError, match="no adapter to save; use 'merged'"): save_model(cfg, tmp_path / "a", form="adapter")
    assert not (tmp_path / "a").exists()


def test_gguf_without_the_converter_says_how_to_get_it(trained, tmp_path, monkeypatch):
    "No llama.cpp converter here: one line naming it and how to install it; nothing written."
    monkeypatch.delenv("LLAMA_CPP", raising=False); monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ExportError, match="llama.cpp"): save_model(trained[0], tmp_path / "g", form="gguf")
    assert not (tmp_path / "g").exists()


def test_gguf_hands_the_merged_model_to_the_converter(trained, tmp_path, monkeypatch):
    "With a converter on the PATH (a stub here), it gets the merged transformers folder and writes `model.gguf`."
    bin_ = tmp_path / "bin"; bin_.mkdir()
    stub = bin_ / "convert_hf_to_gguf.py"
    stub.write_text(f"#!{sys.executable}\nimport sys, pathlib\nsrc = pathlib.Path(sys.argv[1])\n"
                    "assert (src / 'config.json').is_file() and any(src.glob('*.safetensors'))\n"
                    "out = pathlib.Path(sys.argv[sys.argv.index('--outfile') + 1]); out.write_bytes(b'GGUF' + (src / 'config.json').read_bytes())\n")
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    monkeypatch.delenv("LLAMA_CPP", raising=False); monkeypatch.setenv("PATH", f"{bin_}{os.pathsep}{os.environ['PATH']}")
    out = save_model(trained[0], tmp_path / "g", form="gguf", log=lambda *_: None)
    assert (out / "model.gguf").read_bytes().startswith(b"GGUF{")


class LocalHub:
    "A stand-in for `huggingface_hub.HfApi`: repositories are folders under `root`."
    def __init__(self, root): self.root, self.created = Path(root), []
    def create_repo(self, repo_id, private=True, exist_ok=False):
        self.created.append((repo_id, private)); (self.root / repo_id).mkdir(parents=True, exist_ok=exist_ok)
        return f"https://hub.example/{repo_id}"
    def upload_folder(self, folder_path, repo_id, commit_message=""):
        shutil.copytree(folder_path, self.root / repo_id, dirs_exist_ok=True)


def test_push_to_hub_uploads_a_model_that_answers_as_the_node(trained, tmp_path):
    "`push_to_hub`: a private repository by default, the saved folder uploaded whole, read back with the node's answers."
    cfg, answers = trained
    hub = LocalHub(tmp_path / "hub")
    url = push_to_hub(save_model(cfg, tmp_path / "m", log=lambda *_: None), "me/sapo-node", api=hub)
    assert url.endswith("me/sapo-node") and hub.created == [("me/sapo-node", True)]
    p = load_policy(str(tmp_path / "hub" / "me" / "sapo-node"), device="cpu")
    assert greedy(p.model, p.tokenizer) == answers
    with pytest.raises(ValueError, match="repo_id"): push_to_hub(tmp_path / "m", "not a repo id", api=hub)
    with pytest.raises(ValueError, match="holds no saved model"): push_to_hub(tmp_path, "me/x", api=hub)


def test_cli_saves_an_adapter(trained, tmp_path):
    "`sapo save-model RUN --as adapter`: exit 0 and the adapter folder."
    cfg, _ = trained
    code, out, err = sapo_cli("save-model", Path(cfg.root) / "run", "--node", "node-0", "--to", tmp_path / "cli", "--as", "adapter")
    assert code == 0 and (tmp_path / "cli" / "adapter_config.json").is_file(), err


def test_compare_sets_base_and_trained_answers_side_by_side(tmp_path):
    """`sapo compare` on a finished run: the pass@1 before and after with the counts, then each held-out question
    answered differently, with both answers; a node the run lacks is named with the nodes it has."""
    args = ["swarm", "--model", "tiny", "--nodes", "2", "--rounds", "2", "-G", "3", "--max-new-tokens", "6",
            "--eval-questions", "4", "--root", tmp_path, "--experiment", "run"]
    assert sapo_cli(*args)[0] == 0
    code, out, err = sapo_cli("compare", tmp_path / "run", "--node", "node-1")
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("node-1: held-out pass@1") and "on 4 questions" in lines[0]
    fixed, broken = map(int, re.search(r"(\d+) fixed, (\d+) broken", lines[0]).groups())
    if fixed + broken: assert len(lines) == 2 + fixed + broken and all(("✓" in l or "✗" in l) for l in lines[2:])
    else: assert lines[1:] == ["no question is answered differently"], lines
    code, _, err = sapo_cli("compare", tmp_path / "run", "--node", "node-7")
    assert code == 2 and "has no node node-7; its nodes: node-0, node-1" in err, err


def test_an_exported_adapter_names_a_base_others_can_load():
    """The adapter names its base as others can load it: the embedded model as the hub model it is a 4-bit build of
    (peft recorded a folder in this machine's cache), a local base by its absolute path, a hub id as it is."""
    import os
    from sapo_nb.node import adapter_base
    assert adapter_base("smollm2-135m") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert adapter_base("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"
    assert adapter_base(".") == os.getcwd()
