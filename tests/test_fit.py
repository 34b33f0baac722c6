"""A swarm that cannot fit the GPU's memory is refused before a weight loads, with the numbers and what would fit,
instead of an out-of-memory error mid-run; on a CPU nothing changes (it swaps rather than fails)."""
import pytest

import sapo_nb.models as models
from sapo_nb.config import ConfigError, preset
from sapo_nb.swarm import check_startable, node_configs


@pytest.fixture
def a_t4(monkeypatch):
    "This machine seen as one with a 15 GiB CUDA card (a T4) whose memory is all free."
    monkeypatch.setattr(models, "resolve_device", lambda device="auto": device if device.startswith("cuda:") else "cuda:0")
    monkeypatch.setattr(models, "free_memory", lambda device, fresh_process=False: 15 * models.GiB)
    monkeypatch.setattr(models, "resolve_compute_dtype", lambda dtype="auto", device="cpu": "float32")


def test_full_nodes_that_do_not_fit_the_card_are_refused_with_the_lora_hint(a_t4, tmp_path):
    cfgs = node_configs(preset("paper", root=str(tmp_path), adapter="none"), 8)
    with pytest.raises(ConfigError, match=r"SAPOConfig.adapter: 8 nodes of .* need about .* GiB on cuda:0, "
                                          r"15.0 GiB free; with --adapter lora about .*: add --adapter lora"):
        check_startable(cfgs)


def test_the_bare_commands_nodes_fit_the_card(a_t4, tmp_path):
    check_startable(node_configs(preset("laptop", root=str(tmp_path)), 4))  # no error


def test_nodes_too_many_even_as_adapters_are_told_how_many_fit(a_t4, tmp_path):
    with pytest.raises(ConfigError, match=r"SAPOConfig.device: .* at most \d+ fit \(--nodes \d+\)"):
        check_startable(node_configs(preset("paper", root=str(tmp_path), adapter="lora"), 4000))


def test_a_cpu_run_is_not_sized(monkeypatch, tmp_path):
    "On a CPU the check is not made: a refusal there would stop runs that swap and finish."
    monkeypatch.setattr(models, "free_memory", lambda device, fresh_process=False: 1)  # would refuse anything, if asked
    check_startable(node_configs(preset("paper", root=str(tmp_path), adapter="none", device="cpu"), 16))


def test_nodes_spread_over_cards_are_sized_card_by_card(a_t4, tmp_path):
    "8 full nodes refused on one card fit one per card (`--override node-k:device=cuda:k`)."
    cfgs = node_configs(preset("paper", root=str(tmp_path), adapter="none"), 8)
    with pytest.raises(ConfigError): check_startable(cfgs)
    check_startable([c.replace(device=f"cuda:{k}") for k, c in enumerate(cfgs)])  # no error


def test_a_model_the_estimate_cannot_read_is_left_to_its_loading(a_t4, tmp_path, monkeypatch):
    "A config of another shape (GPT-2's keys) is not sized, rather than stopping the start with a traceback."
    def gpt2_shape(model): raise KeyError("num_attention_heads")
    monkeypatch.setattr(models, "model_shape", gpt2_shape)
    check_startable(node_configs(preset("paper", root=str(tmp_path), adapter="none"), 64))  # no error


def test_a_process_swarm_asks_the_card_from_a_fresh_process(a_t4, tmp_path, monkeypatch):
    "In process mode the launcher never uses the card: the free memory is read without leaving it a CUDA context."
    asked = []
    def free(device, fresh_process=False):
        asked.append(fresh_process)
        return 15 * models.GiB
    monkeypatch.setattr(models, "free_memory", free)
    check_startable(node_configs(preset("laptop", root=str(tmp_path)), 2), processes=True)
    check_startable(node_configs(preset("laptop", root=str(tmp_path)), 2))
    assert asked == [True, False]
