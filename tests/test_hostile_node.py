"""The hostile-ground suite for a node's own files: one named test per attack or accident, each failing without its defence.

A node's lease, checkpoints and metrics live under the pool root, which may be a folder that other people and
other machines write to (a shared Drive). Here a second process starts the same node id, a checkpoint is cut short
or edited, and a run is resumed with other settings. Every test runs the tiny random model in seconds.
"""
import json, signal, subprocess, sys, time
from pathlib import Path

import pytest
import torch

from conftest import tiny_config as tiny

from sapo_nb.core import checkpoint_dir, metrics_path, read_jsonl
from sapo_nb.node import SwarmNode
from sapo_nb.durability import NodeLease, NodeRunning, ResumeError, CheckpointError, lease_path, file_digest
from sapo_nb.transport import MemoryTransport


pytestmark = pytest.mark.usefixtures("private_keys")


def node(cfg, said=None):
    return SwarmNode(cfg, transport=MemoryTransport(), log=(said.append if said is not None else lambda *_: None))


def test_duplicate_node_id_refused(tmp_path):
    "The same node id started twice on one root: the second refuses, naming who runs it; rows are not interleaved."
    cfg = tiny(tmp_path)
    first = node(cfg); first.resume()
    with pytest.raises(NodeRunning, match="node-0 is already running"): node(cfg).resume()
    first.close()
    second = node(cfg); test_rounds = second.run()
    assert test_rounds == 3 and [r["round"] for r in read_jsonl(metrics_path(cfg))] == [0, 1, 2]


def test_duplicate_node_id_in_another_process_refused_until_it_dies(tmp_path):
    "A node id held by a live process elsewhere is refused; once that process is killed, its lease is taken over at once."
    cfg = tiny(tmp_path)
    holder = subprocess.Popen([sys.executable, "-c",
        "import sys, time; from sapo_nb.config import SAPOConfig; from sapo_nb.node import NodeLease; "
        f"lease = NodeLease(SAPOConfig(root={str(tmp_path)!r}, node_id='node-0')).acquire(); print('held', flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(NodeRunning, match=f"pid {holder.pid}"): NodeLease(cfg).acquire()
    finally:
        holder.send_signal(signal.SIGKILL); holder.wait()
    NodeLease(cfg).acquire().release()  # SIGKILL left the file behind; its pid is gone, so it is taken over


def test_planted_lease_link_refused(tmp_path):
    "A lease path planted as a symlink is never followed or written through."
    cfg = tiny(tmp_path)
    target = tmp_path / "victim.txt"; target.write_text("precious")
    lease_path(cfg).parent.mkdir(parents=True); lease_path(cfg).symlink_to(target)
    with pytest.raises(NodeRunning, match="not a regular file"): NodeLease(cfg).acquire()
    assert target.read_text() == "precious"


def _checkpointed(tmp_path, rounds=3, **kw):
    "A node that ran `rounds` rounds with a checkpoint after each, the one before the newest kept (`checkpoints_kept=2`)."
    cfg = tiny(tmp_path, rounds=rounds, checkpoints_kept=2, **kw)
    node(cfg).run()
    return cfg


def _rewrite_state(ck:Path, drop=(), **changes):
    "Edit a checkpoint's state.json (`drop`: fields to remove) and fix its checksum, as someone with write access could."
    st = json.loads((ck / "state.json").read_text()); st.update(changes)
    for k in drop: st.pop(k)
    (ck / "state.json").write_text(json.dumps(st))
    marker = json.loads((ck / "complete").read_text()); marker["files"]["state.json"] = file_digest(ck / "state.json")
    (ck / "complete").write_text(json.dumps(marker))


def test_truncated_newest_checkpoint_falls_back(tmp_path):
    "The newest checkpoint's weights cut short: resume takes the previous good checkpoint instead of failing."
    cfg = _checkpointed(tmp_path)
    f = checkpoint_dir(cfg) / "round_2" / "model.safetensors"; f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    said = []
    n = node(cfg.replace(rounds=4), said)
    assert n.resume() == 2  # round 1's checkpoint
    assert any("round 2 skipped" in s and "checksum" in s for s in said), said
    assert [r["round"] for r in read_jsonl(metrics_path(cfg))] == [0, 1]
    n.close()


def test_absurd_questions_drawn_does_not_hang(tmp_path):
    """`questions_drawn=1e12` in the state.json of a checkpoint from before stream positions (checksum fixed up), where
    the stream is skipped question by question: the checkpoint is refused at once for the one before it, not a
    trillion questions generated."""
    cfg = _checkpointed(tmp_path)
    ck = checkpoint_dir(cfg) / "round_2"
    _rewrite_state(ck, drop=["stream"], questions_drawn=10**12)
    signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(TimeoutError("resume hung")))
    signal.alarm(60)
    said = []
    try:
        n = node(cfg.replace(rounds=4), said); t = time.perf_counter(); assert n.resume() == 2
        assert time.perf_counter() - t < 30
    finally: signal.alarm(0)
    assert any("questions_drawn=1000000000000 is impossible" in s for s in said), said
    n.close()


def test_out_of_bounds_state_falls_back(tmp_path):
    "A stream position or RNG state out of range in the newest checkpoint: it is skipped for the previous one."
    cfg = _checkpointed(tmp_path)
    ck = checkpoint_dir(cfg) / "round_2"
    st = json.loads((ck / "state.json").read_text())
    _rewrite_state(ck, stream=dict(st["stream"], pos=[10**9] * len(st["stream"]["pos"])))
    said = []
    n = node(cfg.replace(rounds=4), said); assert n.resume() == 2
    assert any("stream position" in s for s in said), said
    n.close()
    _rewrite_state(checkpoint_dir(cfg) / "round_1", rng=dict(torch=[0]))
    with pytest.raises(CheckpointError, match="no checkpoint is intact"): node(cfg.replace(rounds=4)).resume()


def test_invalid_random_state_falls_back(tmp_path):
    """A random state of the right size that torch cannot take (here all zeros) in the newest checkpoint: refused at
    the restore, the previous checkpoint resumed, rather than a crash at the node's next update."""
    cfg = _checkpointed(tmp_path)
    _rewrite_state(checkpoint_dir(cfg) / "round_2", rng=dict(torch=[0] * torch.get_rng_state().numel()))
    said = []
    n = node(cfg.replace(rounds=4), said); assert n.resume() == 2
    assert any("not a valid random state" in s for s in said), said
    while n.round < 4: n.step()  # and it trains on, drawing from the previous checkpoint's state
    n.close()
    assert [r["round"] for r in read_jsonl(metrics_path(cfg))] == [0, 1, 2, 3]


PEER = "node." + "f" * 20  # a wire id's shape


@pytest.mark.parametrize("trained", [
    [["not a wire id", 0, 0]],  # a name no peer can have
    [[PEER, 7, 0]],             # a round after the checkpoint's
    [[PEER, 0, -1]],            # a negative index
    [[PEER, 0]],                # not a group key
    {},                         # not a list
])
def test_out_of_bounds_trained_external_falls_back(tmp_path, trained):
    """The peers' groups a node trained on (what its top-ups must not repeat) are restored from the checkpoint only
    as group keys of rounds it has run: anything else in state.json skips the checkpoint for the one before it."""
    cfg = _checkpointed(tmp_path)
    _rewrite_state(checkpoint_dir(cfg) / "round_2", trained_external=trained)
    said = []
    n = node(cfg.replace(rounds=4), said); assert n.resume() == 2
    assert any("trained_external" in s for s in said), said
    assert n.trained_external == set()  # round 1's checkpoint: a node with J = 0 trained on no peer's group
    n.close()


def test_shorter_top_up_window_on_resume_keeps_the_checkpoint(tmp_path):
    """Resumed with a shorter top-up window than its checkpoint was written under, a node keeps that checkpoint and
    the keys of the window it now has, as its own rounds would have kept them."""
    cfg = _checkpointed(tmp_path)
    _rewrite_state(checkpoint_dir(cfg) / "round_2", trained_external=[[PEER, 0, 0], [PEER, 1, 3], [PEER, 2, 1]])
    n = node(cfg.replace(rounds=4, top_up_rounds=1), []); assert n.resume() == 3
    assert n.trained_external == {(PEER, 1, 3), (PEER, 2, 1)}
    n.close()


def test_resume_with_changed_mix_refused(tmp_path):
    "Resuming a checkpoint with another mix (what the weights and the stream mean) is refused with a message."
    cfg = _checkpointed(tmp_path, rounds=2)
    with pytest.raises(ResumeError, match="mix='quick'.*this run asks for mix='paper'"):
        node(cfg.replace(mix="paper", rounds=4)).resume()


def test_resume_with_changed_ij_applied(tmp_path):
    "Resuming with other I/J flags: the new ones are used from the next round and the log says so."
    cfg = _checkpointed(tmp_path, rounds=2, local_questions=2, external_questions=0)
    said = []
    n = node(cfg.replace(rounds=3, local_questions=3), said)
    n.run()
    rows = read_jsonl(metrics_path(cfg))
    assert [(r["round"], r["I"]) for r in rows] == [(0, 2), (1, 2), (2, 3)]
    assert any("local_questions 2 -> 3" in s for s in said), said


def test_resume_with_changed_learning_rate_applied(tmp_path):
    "The restored optimizer state carries the old learning rate; the one asked for now is what trains."
    cfg = _checkpointed(tmp_path, rounds=2)
    n = node(cfg.replace(rounds=3, learning_rate=5e-5)); n.resume()
    assert [g["lr"] for g in n.trainer.opt.param_groups] == [5e-5] * len(n.trainer.opt.param_groups)
    n.close()


def test_join_current_ignores_planted_empty_round_folder(tmp_path):
    """Someone creates empty `round_3` and `round_999999999` folders in the pool: a late joiner starts at the newest
    round the others published groups in (2), not at a planted one (round 999999999 would have ended it at once)."""
    from sapo_nb.transport import FolderTransport
    cfg = tiny(tmp_path, rounds=5, external_questions=2)
    early = SwarmNode(cfg, transport=FolderTransport(tmp_path / "pool", "exp"), log=lambda *_: None)
    for _ in range(3): early.step()
    for r in (3, 999_999_999): (tmp_path / "pool" / "exp" / "rollouts" / f"round_{r}").mkdir()
    late = SwarmNode(cfg.replace(node_id="node-1"), transport=FolderTransport(tmp_path / "pool", "exp"),
                     log=lambda *_: None)
    assert late.resume(join_current=True) == 2
    early.close(); late.close()


def test_a_round_the_pool_would_not_take_shows_in_its_metrics_row(tmp_path):
    """A file planted where round 1's folder goes: the node goes on, and its rows say what the pool took of its own
    rollouts (round 0's, nothing of round 1), where before only a line of its log did."""
    from sapo_nb.transport import FolderTransport
    cfg = tiny(tmp_path, rounds=2)
    pool = FolderTransport(tmp_path / "pool", "exp")
    (pool.dir / "round_1").write_text("planted")
    SwarmNode(cfg, transport=pool, log=lambda *_: None).run()
    rows = read_jsonl(metrics_path(cfg))
    assert [r["pool_published"] > 0 for r in rows] == [True, False]
    assert [r["pool_blocked"] for r in rows] == [0, 1]  # counted, so `sapo status` can say it
    from sapo_nb.monitor import swarm_status, format_status
    assert "(1 round not published: the pool's path is blocked" in format_status(swarm_status(cfg.root, cfg.experiment))
