"""The benchmark scripts still run end to end (on the tiny model, in seconds) and write what the docs read.

Timings are not asserted: they belong to the recorded runs in bench/results/, not to tests."""
import json, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_round_breakdown_runs_and_writes_the_table(tmp_path):
    out = tmp_path / "rb.json"
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "round_breakdown.py"), "--model", "tiny", "--configs", "quick",
                        "--rounds", "1", "--overhead-peers", "2", "16", "--no-batched", "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads(out.read_text())
    ours, plain = res["configs"]["quick"]["ours"], res["configs"]["quick"]["plain"]
    for phase in ("generate", "reward", "publish", "collect", "select", "encode", "train", "total"):
        assert ours["seconds"][phase] >= 0, phase
    assert ours["pool_selected"] == 2  # J = 2 external groups reached training through the folder pool
    assert set(ours["overhead"]) == {"2", "16"} and ours["overhead"]["16"]["groups"] == 16 * 2
    assert ours["prefill"]["shared"]["tokens"] > 0 and plain["seconds"]["total"] > 0
    assert ours["roofline"]["roofline_seconds"] > 0
    assert "| quick |" in res["table"] and "ours / plain" in res["table"]
    assert {"shared", "unpacked", "generate", "copied", "multinomial", "autocast"} <= set(ours["prefill"])  # each generation change undone
    assert ours["roofline"]["generate"]["roofline_seconds"] > 0 and ours["roofline"]["rows_decoded"] <= ours["roofline"]["generate"]["rows_decoded"]
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "round_breakdown.py"), "--model", "tiny", "--retable",
                        "--remeasure-machine", "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    again = json.loads(out.read_text())
    assert again["configs"]["quick"]["ours"]["seconds"] == ours["seconds"]  # timings kept, roofline re-derived
    assert again["machine"]["copy_gb_per_s"] > 0 and "| quick |" in again["table"]
    n = subprocess.run([sys.executable, str(ROOT / "bench" / "round_breakdown.py"), "--model", "tiny", "--configs", "quick",
                        "--nodes-only", "--nodes-per-process", "2", "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert n.returncode == 0, n.stderr[-3000:]
    nodes = json.loads(out.read_text())["configs"]["quick"]
    assert nodes["ours"]["seconds"] == ours["seconds"]  # the measured rounds are kept; only the nodes are added
    assert nodes["nodes"]["nodes"] == 2 and nodes["nodes"]["seconds_per_round_all"] > 0
    assert "nodes in one process" in json.loads(out.read_text())["table"]


def test_round_breakdown_nodes_only_needs_a_results_file(tmp_path):
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "round_breakdown.py"), "--model", "tiny", "--nodes-only",
                        "--nodes-per-process", "2", "--out", str(tmp_path / "missing.json")], capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "--nodes-only needs" in p.stderr


def test_logprob_slices_runs_and_writes(tmp_path):
    out = tmp_path / "lp.json"
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "logprob_slices.py"), "--tokens", "50", "--hidden", "16",
                        "--vocab", "300", "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads(out.read_text())
    assert set(res["seconds"]) == {"plain", "slices", "projection_only"} and res["slices_over_plain"] > 0


def test_decode_profile_sorts_operators_into_parts(monkeypatch):
    "The parts a step is split into, by operator name: the matmuls (packed or not), the attention, the rest."
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    from decode_profile import category
    names = ("aten::addmm", "aten::mm", "mkldnn::_linear_pointwise", "aten::_scaled_dot_product_flash_attention_for_cpu",
             "aten::softmax", "aten::cat", "aten::mul")
    assert [category(n) for n in names] == ["matmul"] * 3 + ["attention"] + ["other"] * 3


def test_decode_profile_runs_and_splits_the_step(tmp_path):
    out = tmp_path / "dp.json"
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "decode_profile.py"), "--model", "tiny", "--reps", "2",
                        "--shapes", "4x10", "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    step = json.loads(out.read_text())["steps"][0]
    assert (step["rows"], step["cached_tokens"]) == (4, 10)
    assert step["ms"]["matmul"] > 0 and step["ms"]["attention"] > 0
