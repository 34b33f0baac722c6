"""Whole-process behaviour of the swarm: kill -9 and resume, a malicious peer, the `sapo` command line."""
import json, os, signal, subprocess, sys, time
from collections import Counter
from pathlib import Path
import pytest

TINY = ["--model", "tiny", "--mix", "quick", "-I", "2", "-J", "2", "-G", "3", "--max-new-tokens", "6",
        "--selection", "uniform", "--learning-rate", "1e-3"]

def sapo(*args, **kw):
    return subprocess.run([sys.executable, "-c", "from sapo_nb.cli import main; raise SystemExit(main())", *args],
                          capture_output=True, text=True, timeout=300, **kw)

def start_node(root, node_id, rounds, *extra):
    return subprocess.Popen([sys.executable, "-c", "from sapo_nb.cli import main; raise SystemExit(main())", "node",
                             *TINY, "--root", str(root), "--node-id", node_id, "--rounds", str(rounds), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

def rounds_of(root, node_id):
    p = Path(root) / "sapo" / "logs" / node_id / "metrics.jsonl"
    if not p.exists(): return []
    out = []
    for line in p.read_text().splitlines():
        try: out.append(json.loads(line)["round"])
        except json.JSONDecodeError: pass
    return out

def wait_for_rounds(root, node_id, n, proc, timeout=120):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if len(rounds_of(root, node_id)) >= n: return
        if proc.poll() is not None: raise AssertionError(proc.stdout.read())
        time.sleep(0.05)
    raise AssertionError(f"{node_id} did not reach {n} rounds")

@pytest.mark.parametrize("kill_after", [2, 5])
def test_kill9_resume(tmp_path, kill_after):
    "kill -9 mid-run, restart with the same command: resumes from the checkpoint, one row per round, peer unaffected."
    peer = start_node(tmp_path, "node-1", 12, "--checkpoint-every", "3")
    victim = start_node(tmp_path, "node-0", 12, "--checkpoint-every", "3")
    wait_for_rounds(tmp_path, "node-0", kill_after, victim)
    time.sleep(0.1)  # land somewhere inside a later round: generating, publishing or checkpointing
    victim.send_signal(signal.SIGKILL); victim.wait()
    again = start_node(tmp_path, "node-0", 12, "--checkpoint-every", "3")
    out, _ = again.communicate(timeout=300)
    assert again.returncode == 0, out
    assert "resumed from its checkpoint" in out or kill_after < 3, out
    assert rounds_of(tmp_path, "node-0") == list(range(12))
    peer.wait(timeout=300)
    assert peer.returncode == 0
    assert rounds_of(tmp_path, "node-1") == list(range(12))
    ck = tmp_path / "sapo" / "checkpoints" / "node-0"
    assert not [p for p in ck.iterdir() if p.name.startswith(".tmp")]  # a save cut by the kill was cleaned up
    assert sorted(p.name for p in ck.glob("round_*")) == ["round_11"]  # one checkpoint per node
    assert all((p / "complete").exists() for p in ck.glob("round_*"))

FP = "f" * 20  # a fingerprint's shape: each file is named like a real node's rollout, so its name stops none of them

def plant_junk(pool, r):
    "What a malicious peer writes into round r of the pool: random bytes, a 9 MB file, a traversal name, a NaN."
    d = pool / f"round_{r}"; d.mkdir(parents=True, exist_ok=True)
    (d / f"junk.{FP}.json").write_bytes(b"\xff" + os.urandom(199))
    (d / f"huge.{FP}.json").write_bytes(b'{"schema": 4, "pad": "' + b"x" * 9_000_000 + b'"}')
    (d / f"up..evil.{FP}.json").write_text("{}")
    (d / f"nan.{FP}.json").write_text('{"schema": 4, "round": %d, "G": NaN, "groups": []}' % r)

def refusals(rows):
    "Every reason a node's rows name for the files it refused, summed over its senders and rounds."
    out = Counter()
    for x in rows:
        for account in (x.get("peers") or {}).values(): out.update(account["refused"])
    return out

def attack_while_running(proc, root, timeout):
    "Plant junk into every round of the pool as node-0 reaches it, until `proc` ends."
    pool, deadline, r = root / "sapo" / "rollouts", time.monotonic() + timeout, 0
    while proc.poll() is None and time.monotonic() < deadline:
        plant_junk(pool, r)
        r = max(r, len(rounds_of(root, "node-0")))
        time.sleep(0.05)

def test_malicious_peer(tmp_path):
    "A peer writing junk, huge files, traversal names and NaN rewards into the pool: honest nodes finish and count rejects."
    node = start_node(tmp_path, "node-0", 8, "--max-staleness", "1")
    attack_while_running(node, tmp_path, 120)
    out, _ = node.communicate(timeout=120)
    assert node.returncode == 0, out
    rows = [json.loads(l) for l in (tmp_path / "sapo" / "logs" / "node-0" / "metrics.jsonl").read_text().splitlines()]
    assert [x["round"] for x in rows] == list(range(8))
    assert rows[-1]["pool_rejected"] >= 4 and all(x["pool_selected"] == 0 for x in rows)
    why = refusals(rows)
    assert {"bad_json", "too_large", "bad_node_id"} <= set(why) and not why["legacy_id"]

def test_cli_swarm_and_status(tmp_path):
    "`sapo swarm --model tiny --nodes 2 --rounds 3 --root DIR`: seconds, one row per node per round, status reads it."
    res = sapo("swarm", "--model", "tiny", "--nodes", "2", "--rounds", "3", "--root", str(tmp_path))
    assert res.returncode == 0, res.stdout + res.stderr
    for n in ("node-0", "node-1"): assert rounds_of(tmp_path, n) == [0, 1, 2]
    st = sapo("status", "--root", str(tmp_path), "--experiment", "sapo")
    assert "node-0" in st.stdout and "node-1" in st.stdout and st.stdout.count(" done") == 2  # finished, not stale
    rep = sapo("report", str(tmp_path / "sapo"))
    assert rep.returncode == 0, rep.stderr
    html = Path(rep.stdout.strip()).read_text()
    assert "node-0" in html and "plotly" in html.lower()
    assert sapo("report", str(tmp_path / "nothing")).returncode == 2

def test_cli_bad_value_fails_fast(tmp_path):
    res = sapo("swarm", "--model", "tiny", "-J", "-1", "--root", str(tmp_path))
    assert res.returncode == 2 and "SAPOConfig.external_questions" in res.stderr
    res = sapo("node", "--model", "tiny", "--root", str(tmp_path), env={**os.environ, "NUM_GENERATIONS": "eight"})
    assert res.returncode == 2 and "NUM_GENERATIONS" in res.stderr

def test_process_mode_node_failure_exit_code(tmp_path):
    "A node that fails makes `sapo swarm` exit non-zero; the other finishes."
    (tmp_path / "sapo" / "logs" / "node-1" / "metrics.jsonl").mkdir(parents=True)  # node-1 stops at its first row
    res = sapo("swarm", "--model", "tiny", "--nodes", "2", "--rounds", "2", "--root", str(tmp_path), "--mode", "process",
               "--wait-policy", "none")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "node-1" in res.stderr
    assert rounds_of(tmp_path, "node-0") == [0, 1]

def test_process_mode_sees_its_peers_from_the_first_round(tmp_path):
    "Process mode: node processes start seconds apart, so each waits for the others' rollouts; every node's first round offers external groups."
    res = sapo("swarm", *TINY, "--nodes", "2", "--rounds", "2", "--root", str(tmp_path), "--mode", "process", "--eval-every", "0")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "each node waits up to" in res.stdout
    for node in ("node-0", "node-1"):
        first = json.loads((tmp_path / "sapo" / "logs" / node / "metrics.jsonl").read_text().splitlines()[0])
        assert first["round"] == 0 and first["pool_peers"] == 1, first


def test_import_is_fast():
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import sapo_nb, sapo_nb.config, sapo_nb.cli"], check=True)
    assert time.perf_counter() - t < 2.0


LORA = ["--adapter", "lora", "--lora-rank", "4", "--nodes", "4", "--mode", "inline"]

def start_swarm(root, rounds, *extra):
    return subprocess.Popen([sys.executable, "-c", "from sapo_nb.cli import main; raise SystemExit(main())", "swarm",
                             *TINY, *LORA, "--root", str(root), "--rounds", str(rounds), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

def test_lora_swarm_kill9_resume(tmp_path):
    "Four LoRA nodes on one shared base in one process, killed with -9 mid-run: the same command resumes every node from its adapter checkpoint."
    swarm = start_swarm(tmp_path, 10, "--checkpoint-every", "3")
    wait_for_rounds(tmp_path, "node-3", 5, swarm)
    time.sleep(0.1)
    swarm.send_signal(signal.SIGKILL); swarm.wait()
    nodes = ("node-0", "node-1", "node-2", "node-3")
    saved = {n: sorted((tmp_path / "sapo" / "checkpoints" / n).glob("round_*/complete")) for n in nodes}
    assert all(saved.values()), saved  # each node had saved at least once before the kill
    for n in nodes:
        size = sum(f.stat().st_size for f in saved[n][-1].parent.iterdir())
        assert size < 200_000, size  # the adapter and its optimizer state, not the base
    again = start_swarm(tmp_path, 10, "--checkpoint-every", "3")
    out, _ = again.communicate(timeout=300)
    assert again.returncode == 0, out
    assert out.count("resumed from its checkpoint") >= 4, out
    for n in nodes:
        assert rounds_of(tmp_path, n) == list(range(10)), n  # one row per round: nothing lost, nothing twice
        assert not list((tmp_path / "sapo" / "checkpoints").glob(f"{n}/.tmp*"))

def test_lora_swarm_survives_malicious_peer(tmp_path):
    "The pool attack of `test_malicious_peer` against four LoRA nodes sharing one base: every node finishes and rejects it."
    swarm = start_swarm(tmp_path, 8, "--max-staleness", "1")
    attack_while_running(swarm, tmp_path, 180)
    out, _ = swarm.communicate(timeout=120)
    assert swarm.returncode == 0, out
    for n in ("node-0", "node-1", "node-2", "node-3"):
        rows = [json.loads(l) for l in (tmp_path / "sapo" / "logs" / n / "metrics.jsonl").read_text().splitlines()]
        assert [x["round"] for x in rows] == list(range(8))
        assert rows[-1]["pool_rejected"] >= 4  # the junk was seen and refused, each file for what it holds
        why = refusals(rows)
        assert {"bad_json", "too_large", "bad_node_id"} <= set(why) and not why["legacy_id"]
        assert sum(x["pool_selected"] for x in rows) > 0  # while the honest peers' groups were used
