"""A run is never lost by running a command again: one named test per way the CLI used to lose or hide one.

Running a finished run's command again, resuming a run stopped before its first checkpoint, a start that fails next
to a finished run, Ctrl-C, an expected error and `--help`: each test fails on the code before the fix (rows were
replaced, config files overwritten, `sapo: stopped` said nothing, `--help` showed the paper's defaults). Tiny model.
"""
import json, shutil, time
from pathlib import Path

import pytest

from conftest import learning_node, sapo_cli, tiny_config
from sapo_nb.core import checkpoint_dir, metrics_path, read_jsonl
from sapo_nb.node import SwarmNode
from sapo_nb.transport import MemoryTransport

pytestmark = pytest.mark.usefixtures("private_keys")

SWARM = ["swarm", "--model", "tiny", "--nodes", "2", "--rounds", "2", "-G", "3", "--max-new-tokens", "6",
         "--eval-questions", "4", "--experiment", "run"]


def records(root) -> dict:
    "Every file a run leaves under its experiment folder (checkpoints aside), with its bytes."
    exp = Path(root) / "run"
    return {str(p.relative_to(exp)): p.read_bytes() for p in sorted(exp.rglob("*"))
            if p.is_file() and "checkpoints" not in p.parts and "locks" not in p.parts}


def test_rerunning_a_finished_run_changes_nothing(tmp_path):
    "The same command after a run finished: it says so, trains nothing, and every metrics row, record and config stays."
    assert sapo_cli(*SWARM, "--root", tmp_path)[0] == 0
    before = records(tmp_path)
    code, out, err = sapo_cli(*SWARM, "--root", tmp_path)
    assert code == 0 and "finished: its 2 rounds are in" in out
    assert records(tmp_path) == before


def test_run_stopped_before_its_first_checkpoint_keeps_its_rows_aside(tmp_path):
    "Two rounds logged, no checkpoint (stopped before the first): the node says it starts over and keeps the rows aside."
    cfg = tiny_config(tmp_path, rounds=4, checkpoint_every=0)
    n = SwarmNode(cfg, transport=MemoryTransport(), log=lambda *_: None); n.resume(); n.step(); n.step(); n.close()
    first = metrics_path(cfg).read_text()
    said = []
    SwarmNode(cfg, transport=MemoryTransport(), log=said.append).run(on_round=lambda row: None)
    aside = list(metrics_path(cfg).parent.glob("metrics.before-*.jsonl"))
    assert len(aside) == 1 and aside[0].read_text() == first
    assert any("starting over from round 0" in s and str(aside[0]) in s for s in said)
    assert [json.loads(l)["round"] for l in metrics_path(cfg).read_text().splitlines()] == [0, 1, 2, 3]


@pytest.mark.parametrize("flags, why", [(["--model", "/nonexistent/model"], "SAPOConfig.model"),
                                        (["--device", "cuda"], "SAPOConfig.device")])
def test_failed_start_next_to_a_finished_run_writes_nothing(tmp_path, flags, why):
    "A start that cannot load its model or device, in a finished run's folder: one line, and no byte of the run changes."
    pytest.importorskip("torch")
    import torch
    if flags[0] == "--device" and torch.cuda.is_available(): pytest.skip("this machine has CUDA")
    assert sapo_cli(*SWARM, "--root", tmp_path)[0] == 0
    before = records(tmp_path)
    code, out, err = sapo_cli(*SWARM, "--root", tmp_path, *flags)
    assert code == 2 and err.startswith(f"sapo: {why}") and err.count("\n") == 1 and "Traceback" not in err
    assert records(tmp_path) == before


def test_ctrl_c_says_what_was_kept_and_the_command_that_goes_on(tmp_path, monkeypatch):
    "Ctrl-C part-way: per node the rounds logged and the checkpoint it resumes from, and the command to run again."
    import sapo_nb.swarm as swarm
    run_inline = swarm.run_inline
    def interrupted(cfgs, **kw):
        nodes = [SwarmNode(c, log=lambda *_: None) for c in cfgs]
        for n in nodes: n.resume(); n.step()
        for n in nodes: n.close()
        raise KeyboardInterrupt
    monkeypatch.setattr(swarm, "run_inline", interrupted)
    args = [*SWARM, "--root", str(tmp_path), "--rounds", "5", "--checkpoint-every", "1"]
    code, out, err = sapo_cli(*args)
    assert code == 130
    assert "node-0: 1 round logged; resumes after 1 round" in err and "node-1: 1 round logged" in err
    assert err.strip().endswith("The same command goes on: sapo " + " ".join(args))
    monkeypatch.setattr(swarm, "run_inline", run_inline)
    assert sapo_cli(*args)[0] == 0  # ... and it does


def test_help_shows_the_defaults_the_bare_command_uses():
    "`sapo swarm --help` shows the laptop preset's values (what a bare `sapo swarm` runs); `sapo node --help` the paper's."
    import contextlib, io
    from sapo_nb.cli import main
    def help_of(cmd):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit): main([cmd, "--help"])
        return " ".join(out.getvalue().split())
    swarm, node = help_of("swarm"), help_of("node")
    assert "training rounds to run (default: 10)" in swarm and "(default: 'lora')" in swarm and "(default: laptop)" in swarm
    assert "training rounds to run (default: 2000)" in node and "(default: 'none')" in node


def test_status_knows_an_exited_node(tmp_path):
    "A node that stopped part-way (its lease released), and one killed (its lease naming a dead pid): `stopped`, not `alive`."
    import socket, subprocess, sys
    from sapo_nb.monitor import swarm_status
    from sapo_nb.durability import lease_path
    for node_id in ("node-0", "node-1"):
        cfg = tiny_config(tmp_path, node_id=node_id, experiment="run")
        n = SwarmNode(cfg, transport=MemoryTransport(), log=lambda *_: None); n.resume(); n.step()
        assert {r["node"]: r["state"] for r in swarm_status(tmp_path, "run")}[node_id] == "alive"  # it holds its lease
        n.close()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout.strip()
    lease_path(tiny_config(tmp_path, node_id="node-1", experiment="run")).write_text(
        json.dumps(dict(host=socket.gethostname(), pid=int(dead), token="x", heartbeat=time.time())))
    assert {r["node"]: r["state"] for r in swarm_status(tmp_path, "run")} == {"node-0": "stopped", "node-1": "stopped"}
    code, out, _ = sapo_cli("status", "--root", tmp_path, "--experiment", "run")
    assert out.count("stopped") == 2 and "alive" not in out


def test_damaged_newest_checkpoint_falls_back_under_the_bare_commands_settings(tmp_path):
    "The bare `sapo swarm`'s nodes (the laptop preset) keep two checkpoints: a newest one damaged on disk falls back to the one before."
    from sapo_nb.config import preset
    from sapo_nb.core import checkpoint_dir
    cfg = preset("laptop", model="tiny", root=str(tmp_path), rounds=3, checkpoint_every=1, max_new_tokens=6, eval_every=0,
                 transport="memory", external_questions=0)
    SwarmNode(cfg, transport=MemoryTransport(), log=lambda *_: None).run(on_round=lambda r: None)
    (checkpoint_dir(cfg) / "round_2" / "model.safetensors").write_bytes(b"damaged")
    said = []
    n = SwarmNode(cfg.replace(rounds=4), transport=MemoryTransport(), log=said.append)
    assert n.resume() == 2 and any("checkpoint of round 2 skipped" in s for s in said)
    n.close()


def test_a_run_that_cannot_start_says_why_in_one_line(tmp_path, monkeypatch):
    "A key folder inside the pool (a ValueError deep in the transport): one line, exit 2, no traceback; SAPO_DEBUG=1 raises."
    monkeypatch.setenv("SAPO_KEY_DIR", str(tmp_path / "keys"))
    code, out, err = sapo_cli(*SWARM, "--root", tmp_path)
    assert code == 2 and err.count("\n") == 1 and "inside the shared pool" in err and "Traceback" not in err
    monkeypatch.setenv("SAPO_DEBUG", "1")
    with pytest.raises(ValueError, match="inside the shared pool"): sapo_cli(*SWARM, "--root", tmp_path)
    monkeypatch.delenv("SAPO_DEBUG"); monkeypatch.setenv("SAPO_KEY_DIR", str(tmp_path.parent / f"{tmp_path.name}-keys"))
    assert sapo_cli(*SWARM, "--root", tmp_path)[0] == 0  # the failed starts left no LoRA adapter behind on the shared base


def test_a_failed_batch_of_nodes_loses_no_question(tmp_path, monkeypatch):
    "Nodes on one base sample in one batch; when that batch fails, it is said, and each node samples the questions it drew itself (none drawn twice, none skipped)."
    import sapo_nb.node as node_module
    from sapo_nb.swarm import node_configs, run_inline
    real = node_module.generate_completions
    def no_batches(*args, adapters=None, **kw):
        if adapters is not None and len(set(adapters)) > 1: raise RuntimeError("a batch of adapters failed")
        return real(*args, adapters=adapters, **kw)
    monkeypatch.setattr(node_module, "generate_completions", no_batches)
    said, nodes = [], {}
    def build(c, **kw): nodes[c.node_id] = SwarmNode(c, **kw); return nodes[c.node_id]
    cfg = tiny_config(tmp_path, adapter="lora", rounds=2, transport="folder", external_questions=0, checkpoint_every=0)
    assert set(run_inline(node_configs(cfg, 2), log=said.append, build=build).values()) == {"done"}
    assert sum("sampling 2 nodes in one batch failed" in s for s in said) == 2  # once a round
    for n in nodes.values():
        assert n.stream.drawn == 2 * cfg.local_questions  # each question drawn once, and sampled
        assert all(json.loads(l)["tokens_generated"] > 0 for l in metrics_path(n.cfg).read_text().splitlines())


def test_nodes_resumed_at_different_rounds_go_on_level(tmp_path, monkeypatch):
    """A swarm of LoRA nodes stopped between two nodes' checkpoints of one round: on resume the node behind catches up
    alone, and from then on the nodes go level again, generating in one batch, as an uninterrupted swarm does."""
    from sapo_nb import swarm
    batches, real = [], swarm.sample_together
    monkeypatch.setattr(swarm, "sample_together", lambda nodes, r: batches.append((r, len(nodes))) or real(nodes, r))
    cfgs = swarm.node_configs(tiny_config(tmp_path, adapter="lora", transport="folder", external_questions=2,
                                          rounds=2, checkpoints_kept=2), 2)
    assert swarm.run_inline(cfgs, log=lambda *_: None) == {"node-0": "done", "node-1": "done"}
    assert batches == [(0, 2), (1, 2)]
    shutil.rmtree(checkpoint_dir(cfgs[1]) / "round_1")  # stopped after node-0's checkpoint of round 1, before node-1's
    batches.clear()
    more = [c.replace(rounds=4) for c in cfgs]
    assert swarm.run_inline(more, log=lambda *_: None) == {"node-0": "done", "node-1": "done"}
    assert batches == [(1, 1), (2, 2), (3, 2)]
    assert [[x["round"] for x in read_jsonl(metrics_path(c))] for c in more] == [[0, 1, 2, 3]] * 2


def test_inline_nodes_with_dropout_resume_exactly(tmp_path):
    """Two LoRA nodes with dropout in one process, stopped after round 1 and resumed: each drew its masks from a random
    state of its own and kept it in its checkpoint, so both go on as nodes that never stopped, bit for bit (with one
    state for the process the two swarms drew other masks: from their first update, after other draws of the process,
    and after the resume, which restored each node's checkpoint over the same state in turn)."""
    from sapo_nb import swarm
    straight, stopped = [swarm.node_configs(tiny_config(tmp_path / k, adapter="lora", lora_dropout=0.1, rounds=4,
                                                        transport="folder", external_questions=2), 2) for k in "ab"]
    assert swarm.run_inline(straight, log=lambda *_: None, build=learning_node) == {"node-0": "done", "node-1": "done"}
    swarm.run_inline([c.replace(rounds=2) for c in stopped], log=lambda *_: None, build=learning_node)
    assert swarm.run_inline(stopped, log=lambda *_: None, build=learning_node) == {"node-0": "done", "node-1": "done"}
    for a, b in zip(straight, stopped):
        rows_a, rows_b = read_jsonl(metrics_path(a)), read_jsonl(metrics_path(b))
        assert [r["round"] for r in rows_b] == [0, 1, 2, 3] and all(r["tokens_trained"] for r in rows_b[2:])
        assert [(r["loss"], r["grad_norm"]) for r in rows_a] == [(r["loss"], r["grad_norm"]) for r in rows_b]
        assert ((checkpoint_dir(a) / "round_3" / "model.safetensors").read_bytes()
                == (checkpoint_dir(b) / "round_3" / "model.safetensors").read_bytes())


def test_resume_leaves_the_process_random_state_alone(tmp_path):
    """A checkpoint's random state is its node's: resuming a node does not reset the random state of the process it
    runs in (a notebook's own draws after it go on as they would have)."""
    import random, torch
    cfg = tiny_config(tmp_path, rounds=2)
    SwarmNode(cfg, transport=MemoryTransport(), log=lambda *_: None).run()
    n = SwarmNode(cfg.replace(rounds=3), transport=MemoryTransport(), log=lambda *_: None)
    torch.manual_seed(123); random.seed(123)
    before = torch.get_rng_state(), random.getstate()
    assert n.resume() == 2
    assert torch.equal(torch.get_rng_state(), before[0]) and random.getstate() == before[1]
    n.close()


def test_a_start_stopped_in_its_first_round_leaves_one_base_evaluation(tmp_path):
    """A node stopped in its first round after writing its base evaluation, before its first metrics row, then run
    again: its records hold one base evaluation, not two (the second start appended another, which per-question
    analyses then counted twice)."""
    from sapo_nb.core import eval_records_path
    cfg = tiny_config(tmp_path, rounds=1, eval_every=1, eval_questions=4, eval_curve_questions=4)
    base = dict(round=0, node_id="node-0", when="base", mix="quick", n=4, pass1=0.0, items=[])
    eval_records_path(cfg).parent.mkdir(parents=True)
    eval_records_path(cfg).write_text(json.dumps(base) + "\n")  # what the stopped start left
    n = SwarmNode(cfg, transport=MemoryTransport(), log=lambda *_: None)
    n.run(); n.close()
    assert [r["when"] for r in read_jsonl(eval_records_path(cfg))] == ["base", "final"]


def test_a_round_interrupted_in_a_notebook_is_not_run_twice(tmp_path, monkeypatch):
    """Ctrl-C in `step()` (here while it writes its checkpoint, after its row is logged): the next `step()` runs the next
    round, once. Interrupted before its row, the round is refused until `resume()` restores the checkpoint."""
    from sapo_nb.node import RoundInterrupted
    cfg = tiny_config(tmp_path, rounds=4, checkpoint_every=1)
    n = SwarmNode(cfg, transport=MemoryTransport(), log=lambda *_: None)
    n.resume(); n.step()
    real = SwarmNode._checkpoint
    def cut(self, r): raise KeyboardInterrupt
    monkeypatch.setattr(SwarmNode, "_checkpoint", cut)
    with pytest.raises(KeyboardInterrupt): n.step()  # round 1 logged, its checkpoint not written
    monkeypatch.setattr(SwarmNode, "_checkpoint", real)
    n.step()
    assert [r["round"] for r in read_jsonl(metrics_path(cfg))] == [0, 1, 2]
    def torn(self, *a, **k): raise KeyboardInterrupt
    monkeypatch.setattr(SwarmNode, "finish_round", torn)
    with pytest.raises(KeyboardInterrupt): n.step()  # round 3 drawn, not logged
    monkeypatch.undo()
    with pytest.raises(RoundInterrupted, match="round 3 was interrupted part-way"): n.step()
    assert n.resume() == 3 and n.step()["round"] == 3  # from round 2's checkpoint, the round drawn again
    assert [r["round"] for r in read_jsonl(metrics_path(cfg))] == [0, 1, 2, 3]
    n.close()


def test_running_again_a_node_object_with_no_checkpoint_is_refused(tmp_path):
    "A node object that ran rounds, with no checkpoint to go back to: `run()` again says to make a new node."
    from sapo_nb.node import RoundInterrupted
    cfg = tiny_config(tmp_path, rounds=4, checkpoint_every=0)
    n = SwarmNode(cfg, transport=MemoryTransport(), log=lambda *_: None)
    n.resume(); n.step(); n.lease.release(); n.lease = None
    with pytest.raises(RoundInterrupted, match="a new SwarmNode starts it over"): n.run()
    n.close()


def test_a_resumed_round_does_not_change_what_peers_read(tmp_path):
    """Killed after publishing rounds past its checkpoint, a node runs them again on resume; the pool keeps their first
    publication (peers may have trained on it): the files are not rewritten."""
    cfg = tiny_config(tmp_path, rounds=6, checkpoint_every=3, transport="folder")
    n = SwarmNode(cfg, log=lambda *_: None)
    n.resume()
    for _ in range(5): n.step()  # rounds 0-4; the checkpoint of round 2
    files = {r: next((tmp_path / "sapo" / "rollouts" / f"round_{r}").glob("node-0.*.json")) for r in (3, 4)}
    before = {r: (f.stat().st_ino, f.stat().st_mtime_ns, f.read_bytes()) for r, f in files.items()}
    n.close()
    again = SwarmNode(cfg, log=lambda *_: None)
    assert again.resume() == 3
    again.step(); again.step()
    assert {r: (f.stat().st_ino, f.stat().st_mtime_ns, f.read_bytes()) for r, f in files.items()} == before
    assert again.transport.unpublished["published_before"] == 2
    again.close()


def test_a_node_whose_lease_was_taken_mid_round_writes_no_row(tmp_path, monkeypatch):
    """Another process took the node's lease while a round ran (a laptop slept past the lease's staleness, and the node
    was started elsewhere): the old holder stops before its metrics row, which the new holder writes."""
    from sapo_nb.durability import NodeRunning, lease_path
    cfg = tiny_config(tmp_path, rounds=3)
    n = SwarmNode(cfg, transport=MemoryTransport(), log=lambda *_: None)
    n.resume(); n.step()
    real = SwarmNode.finish_round
    def slept(self, state):  # the round trains; meanwhile the lease is taken over
        row = real(self, state)
        info = json.loads(lease_path(cfg).read_text())
        lease_path(cfg).write_text(json.dumps(dict(info, token="f" * 32, pid=info["pid"] + 1)))
        return row
    monkeypatch.setattr(SwarmNode, "finish_round", slept)
    with pytest.raises(NodeRunning, match="names another holder.*stopping before the metrics row of round 1"):
        n.step()
    assert [r["round"] for r in read_jsonl(metrics_path(cfg))] == [0]
