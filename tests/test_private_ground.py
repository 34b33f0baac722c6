"""A node's own files are out of a peer's reach: one named test per attack on the private ground.
Anyone who can write to the shared root can plant links, folders and FIFOs under `<root>/<experiment>/`. Each test plants
one and checks that nothing outside the root is read, written, signalled or deleted, and that nothing crashes or locks
out. Each fails on the code before `core`'s descriptor-walking helpers (links were followed, folders opened). Tiny model,
temp folders.
"""
import json, os, socket, subprocess, sys, time
from pathlib import Path
import pytest

from conftest import sapo_cli as cli, tiny_config as tiny
from sapo_nb.core import (UnsafePath, append_jsonl, checkpoint_dir, experiment_dir, metrics_path, read_jsonl, safe_text, trust_root)
from sapo_nb.node import SwarmNode
from sapo_nb.durability import NodeLease, NodeRunning, CheckpointError, lease_path, file_digest
from sapo_nb.transport import MemoryTransport


pytestmark = pytest.mark.usefixtures("private_keys")


def node(cfg, log=lambda *_: None): return SwarmNode(cfg, transport=MemoryTransport(), log=log)

def other_run(tmp_path) -> Path:
    "Another run's experiment folder, outside the attacked root: a checkpoint, a config, metrics."
    other = tmp_path / "other_root" / "exp"
    ck = other / "checkpoints" / "node-0" / "round_5"; ck.mkdir(parents=True); (ck / "complete").write_text("{}")
    (ck / "model.safetensors").write_bytes(b"another run's weights")
    logs = other / "logs" / "node-0"; logs.mkdir(parents=True)
    (logs / "config.json").write_text('{"rounds": 99}')
    (logs / "metrics.jsonl").write_text(json.dumps(dict(round=0, node_id="node-0", I=1, J=0, reward_train=0.5, pool_available=0,
                                                        pool_selected=0, seconds=dict(total=1.0), time=1.0)) + "\n")
    return other

def snapshot(folder) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(Path(folder).rglob("*")) if p.is_file()}


# --- code execution ---------------------------------------------------------------------------------------------------

def test_node_log_link_into_shell_startup_refused(tmp_path):
    "A `node.log` planted as a link into a shell start-up file: the launcher refuses it; the file gets no byte."
    from sapo_nb.swarm import ProcessSwarm
    bashrc = tmp_path / "home" / ".bashrc"; bashrc.parent.mkdir(); bashrc.write_text("# mine\n")
    cfg = tiny(tmp_path / "root", transport="folder")
    log = metrics_path(cfg).parent / "node.log"; log.parent.mkdir(parents=True); log.symlink_to(bashrc)
    with pytest.raises(UnsafePath, match="is a link"): ProcessSwarm([cfg]).start()
    assert bashrc.read_text() == "# mine\n"


def test_peer_name_with_quotes_and_control_characters_is_inert(tmp_path):
    "A peer-chosen file name with quotes, `$(...)` and control characters, escaped: one printable token a shell never runs."
    name = "x'\"$(touch PWNED)`touch PWNED2`\n\x1b[2J\\" + "y" * 500
    token = safe_text(name)
    assert all(" " <= c <= "~" for c in token) and len(token) < 200 and "\n" not in token  # 80 characters, escaped
    out = subprocess.run(["sh", "-c", f"echo {token}"], cwd=tmp_path, capture_output=True, text=True).stdout
    assert not list(tmp_path.iterdir()) and out.count("\n") == 1  # nothing ran; one line


# --- writes, reads and deletes outside the root ----------------------------------------------------------------------

def test_metrics_link_not_appended(tmp_path):
    "A `metrics.jsonl` planted as a link to a file outside the root: the row is refused, the file untouched."
    victim = tmp_path / "victim.txt"; victim.write_text("precious\n")
    cfg = tiny(tmp_path / "root")
    m = metrics_path(cfg); m.parent.mkdir(parents=True); m.symlink_to(victim)
    with pytest.raises(UnsafePath): append_jsonl(metrics_path(cfg), {"round": 0})
    assert victim.read_text() == "precious\n"


def test_linked_logs_folder_config_not_replaced(tmp_path):
    "`logs/<node>` planted as a link to another run's folder: the launcher's `config.json` is not written there."
    from sapo_nb.swarm import ProcessSwarm
    other = other_run(tmp_path); before = snapshot(other)
    cfg = tiny(tmp_path / "root", transport="folder", experiment="exp")
    (experiment_dir(cfg) / "logs").mkdir(parents=True); (experiment_dir(cfg) / "logs" / "node-0").symlink_to(other / "logs" / "node-0")
    with pytest.raises(UnsafePath): ProcessSwarm([cfg]).start()
    assert snapshot(other) == before


def test_linked_checkpoint_folder_neither_resumed_nor_deleted(tmp_path):
    "`checkpoints/<node>` linked to another run's: the node refuses to resume from it, and its checkpoint stays."
    other = other_run(tmp_path)
    donor = tiny(tmp_path / "donor"); d = node(donor); d.run()  # a real checkpoint, in the other run's folder
    os.rename(checkpoint_dir(donor), other / "checkpoints" / "node-1")
    before = snapshot(other)
    # more rounds than the donor ran: a node that followed the link would train on, save its next checkpoints there
    # and delete the donor's (one kept)
    cfg = tiny(tmp_path / "root", experiment="exp", rounds=5)
    checkpoint_dir(cfg).parent.mkdir(parents=True); checkpoint_dir(cfg).symlink_to(other / "checkpoints" / "node-1")
    n = node(cfg)
    with pytest.raises(UnsafePath, match="is a link"): n.run()
    assert snapshot(other) == before and not metrics_path(cfg).exists()


def test_pool_root_holds_only_the_pool(tmp_path):
    "With `pool_root` on a share, the share gets only rollouts and the swarm id; logs, metrics, checkpoints and the lease stay under each node's own `root`, and the nodes still read each other."
    pool = tmp_path / "share"
    cfgs = [tiny(tmp_path / f"home-{i}", transport="folder", pool_root=str(pool), node_id=f"node-{i}", rounds=2,
                 external_questions=1, wait_policy="none") for i in range(2)]
    nodes = [SwarmNode(c, log=lambda *_: None) for c in cfgs]
    for n in nodes: n.resume()  # takes the lease
    for r in range(2):
        for n in nodes: n.step()
    for n in nodes: n.close()
    shared = sorted(str(p.relative_to(pool)) for p in pool.rglob("*") if not p.is_dir())
    assert shared and all(s == "sapo/swarm_id" or s.startswith("sapo/rollouts/round_") for s in shared), shared
    for c in cfgs:
        assert metrics_path(c).is_file() and checkpoint_dir(c).is_dir() and tmp_path / f"home-{c.node_id[-1]}" in metrics_path(c).parents
    rows = read_jsonl(metrics_path(cfgs[1]))
    assert rows[-1]["pool_available"] > 0  # node-1 saw node-0's rollouts in the share


def test_root_inside_pool_root_is_refused(tmp_path):
    "A run folder inside the shared pool folder, where peers could plant links among a node's own files: refused at start, saying why."
    cfg = tiny(tmp_path / "share" / "mine", transport="folder", pool_root=str(tmp_path / "share"))
    with pytest.raises(ValueError, match="inside pool_root"): node(cfg)
    assert not (tmp_path / "share").exists()


def test_linked_experiment_folder_refused_by_the_node(tmp_path):
    "The experiment folder itself a link to another run: the node stops at start, naming the link; nothing is written there."
    other = other_run(tmp_path); before = snapshot(other)
    cfg = tiny(tmp_path / "root", experiment="exp")
    Path(cfg.root).mkdir(); experiment_dir(cfg).symlink_to(other)
    with pytest.raises(UnsafePath, match="exp' is a link"): node(cfg)
    assert snapshot(other) == before


def test_clean_on_linked_experiment_deletes_nothing(tmp_path):
    "`sapo clean` on an experiment folder that is a link: exit 2, the other run's checkpoints stay."
    other = other_run(tmp_path); before = snapshot(other)
    root = tmp_path / "root"; root.mkdir(); (root / "exp").symlink_to(other)
    code, out, err = cli("clean", "--root", str(root), "--experiment", "exp")
    assert code == 2 and "not a folder" in err
    assert snapshot(other) == before


def test_clean_through_linked_checkpoints_folder_deletes_nothing(tmp_path):
    "`sapo clean` where `checkpoints` is a link to another run's: it says so and removes nothing."
    other = other_run(tmp_path); before = snapshot(other)
    root = tmp_path / "root"; (root / "exp" / "logs" / "node-0").mkdir(parents=True)  # a run folder of its own
    (root / "exp" / "checkpoints").symlink_to(other / "checkpoints")
    code, out, err = cli("clean", "--root", str(root), "--experiment", "exp")
    assert code == 0 and "left in place" in out and "freed 0 B" in out
    assert snapshot(other) == before


def test_status_reads_nothing_through_a_link(tmp_path):
    "`sapo status` where `logs/node-0` links to another run's: that run's rows are not shown."
    other = other_run(tmp_path)
    root = tmp_path / "root"; (root / "exp" / "logs").mkdir(parents=True)
    (root / "exp" / "logs" / "node-0").symlink_to(other / "logs" / "node-0")
    code, out, _ = cli("status", "--root", str(root), "--experiment", "exp")
    assert code == 0 and "no node has started in" in out, out


def test_monitor_called_directly_reads_nothing_through_a_link(tmp_path):
    "`swarm_status`, `run_summary` and `SwarmWatcher` called by a user's own code (no CLI recording the root first)."
    from sapo_nb.monitor import SwarmWatcher, run_summary, swarm_status
    other = other_run(tmp_path)
    for linked in ("logs", "logs/node-0"):
        root = tmp_path / f"root-{linked.replace('/', '-')}"; (root / "exp" / linked).parent.mkdir(parents=True, exist_ok=True)
        (root / "exp" / linked).symlink_to(other / linked)
        watcher = SwarmWatcher(root, "exp"); watcher.refresh()
        assert (swarm_status(root, "exp"), run_summary(root, "exp"), watcher.nodes) == ([], [], {})


def test_panel_stop_through_linked_pid_file_and_logs_signals_nothing(tmp_path):
    "The panel's Stop where the pid file and `logs` link to another run's: that run's node keeps running."
    pytest.importorskip("ipywidgets")
    import psutil
    from sapo_nb.panel import SwarmPanel
    from sapo_nb.swarm import PID_FILE
    other = other_run(tmp_path)
    config = other / "logs" / "node-0" / "config.json"
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "node", "--threads", "1", "--config", str(config)],
                              start_new_session=True)
    try:
        (other / PID_FILE).write_text(json.dumps(dict(host=socket.gethostname(), launched_at=1.0, nodes={
            "node-0": dict(pid=victim.pid, create_time=psutil.Process(victim.pid).create_time())})))
        root = tmp_path / "root"; (root / "exp").mkdir(parents=True)
        (root / "exp" / PID_FILE).symlink_to(other / PID_FILE); (root / "exp" / "logs").symlink_to(other / "logs")
        p = SwarmPanel(root=str(root), experiment="exp", interval=None)
        assert p.stop(timeout=2) == {}
        time.sleep(0.2); assert victim.poll() is None
        # the pid file alone linked, `logs` a real folder holding a link to the other's node folder: still nothing
        (root / "exp" / "logs").unlink(); (root / "exp" / "logs").mkdir()
        (root / "exp" / "logs" / "node-0").symlink_to(other / "logs" / "node-0")
        (root / "exp" / PID_FILE).unlink(); (root / "exp" / PID_FILE).write_text((other / PID_FILE).read_text())
        assert p.stop(timeout=2) == {} and victim.poll() is None
    finally: victim.kill(); victim.wait()


# --- planted folders -------------------------------------------------------------------------------------------------

def test_report_and_export_read_nothing_through_a_link(tmp_path):
    """The report's readers and the trackers' export, on a run whose `logs/node-1` links to another run's node folder
    and whose `logs/node-2/metrics.jsonl` links to another run's metrics: only the real `node-0` is read."""
    from sapo_nb.analysis import find_runs, load_eval_items, load_runs, run_provenance
    from sapo_nb.trackers import export_run
    other = other_run(tmp_path)
    (other / "logs" / "node-0" / "provenance.jsonl").write_text(json.dumps({"commit": "f" * 40}) + "\n")
    (other / "logs" / "node-0" / "eval_items.jsonl").write_text(json.dumps({"round": 0}) + "\n")
    run = tmp_path / "root" / "exp"; (run / "logs" / "node-0").mkdir(parents=True); (run / "logs" / "node-2").mkdir()
    (run / "logs" / "node-0" / "metrics.jsonl").write_text((other / "logs" / "node-0" / "metrics.jsonl").read_text())
    (run / "logs" / "node-1").symlink_to(other / "logs" / "node-0")
    (run / "logs" / "node-2" / "metrics.jsonl").symlink_to(other / "logs" / "node-0" / "metrics.jsonl")
    assert find_runs(tmp_path / "root") == [run]
    assert set(load_runs(tmp_path / "root").node_id) == {"node-0"}
    assert len(load_eval_items(tmp_path / "root")) == 0 and run_provenance(run)["commits"] is None
    assert set(export_run(run, "tensorboard", out=tmp_path / "tb")) == {"node-0"}
    linked_only = tmp_path / "linked" / "exp"; (linked_only / "logs").mkdir(parents=True)
    (linked_only / "logs" / "node-0").symlink_to(other / "logs" / "node-0")
    assert find_runs(tmp_path / "linked") == []  # a run of linked node folders is no run


def test_planted_folders_crash_no_reader(tmp_path):
    "Folders where `metrics.jsonl`, `config.json` and `panel_pids.json` should be: status, clean and the panel read on."
    from sapo_nb.swarm import PID_FILE, read_pid_file
    root = tmp_path / "root"; exp = root / "exp"
    for p in (exp / "logs" / "node-0" / "metrics.jsonl", exp / "logs" / "node-0" / "config.json", exp / "config.json",
              exp / PID_FILE):
        p.mkdir(parents=True)
    assert cli("status", "--root", str(root), "--experiment", "exp")[0] == 0
    assert cli("clean", "--root", str(root), "--experiment", "exp")[0] == 0
    assert read_pid_file(trust_root(root) / "exp") == {}
    from sapo_nb.panel import SwarmPanel  # ipywidgets is a dependency: the panel is always there to check
    p = SwarmPanel(root=str(root), experiment="exp", interval=None); p.refresh(); p.attach()
    assert p.stop() == {} and "no node of this panel is running" in p.message.value


def test_planted_folders_stop_the_node_with_a_message(tmp_path):
    "A folder where the node's metrics file goes: the node stops with `UnsafePath` naming it, not `IsADirectoryError`."
    cfg = tiny(tmp_path / "root")
    metrics_path(cfg).mkdir(parents=True)
    with pytest.raises(UnsafePath, match="metrics.jsonl' is a folder"): node(cfg).run()
    from sapo_nb.swarm import run_node
    assert run_node(tiny(tmp_path / "root", transport="folder")) == 2  # `sapo node`: a message and exit 2


def test_planted_folder_at_the_write_test_path(tmp_path):
    "A folder where the old fixed write-test name was: the node starts (its probe has a fresh name)."
    cfg = tiny(tmp_path / "root", rounds=1)
    (experiment_dir(cfg) / ".write_test_node-0").mkdir(parents=True)
    node(cfg).run()
    assert [r["round"] for r in read_jsonl(metrics_path(cfg))] == [0]



def test_node_folder_whose_lease_name_is_too_long_crashes_no_reader(tmp_path):
    """A node folder named so that its lease file's name is too long to open (ENAMETOOLONG): status, clean and the
    panel list it and read on (the lease read of nodes with no row raised through all of them)."""
    from sapo_nb.monitor import SwarmWatcher, swarm_status
    root = tmp_path / "root"; exp = root / "exp"
    for d in ("logs/node-0", "locks", "logs/" + "a" * 255): (exp / d).mkdir(parents=True)
    assert {r["node"] for r in swarm_status(root, "exp")} == {"node-0", "a" * 255}
    code, out, _ = cli("status", "--root", str(root), "--experiment", "exp")
    assert code == 0 and "node-0" in out, out
    assert cli("clean", "--root", str(root), "--experiment", "exp")[0] == 0
    watcher = SwarmWatcher(root, "exp"); watcher.refresh()
    assert len(watcher.status()) == 2


def test_planted_folder_name_with_terminal_escapes_is_inert_in_clean(tmp_path):
    "A checkpoint folder named with a terminal escape sequence (title, clear screen): `sapo clean` names it escaped."
    root = tmp_path / "root"; (root / "exp" / "logs" / "node-0").mkdir(parents=True)
    for name in ("node-0", "\x1b]0;PWNED\x07\x1b[2J"):
        ck = root / "exp" / "checkpoints" / name / "round_1"; ck.mkdir(parents=True); (ck / "w").write_bytes(b"x")
    code, out, err = cli("clean", "--root", str(root), "--experiment", "exp")
    assert code == 0 and "left in place" in out and "PWNED" in out, out   # named, so the user sees it
    assert "not finished: node-0" in out, out  # its checkpoints are gone: it would start over
    assert "\x1b" not in out + err and "\x07" not in out + err, repr(out)


def test_planted_answers_with_terminal_escapes_are_inert_in_compare(tmp_path):
    "Held-out records planted with answers that are terminal escape sequences: `sapo compare` prints them escaped."
    from sapo_nb.tasks import eval_items
    from sapo_nb.evaluation import item_key
    es = eval_items("quick", 2)
    rec = lambda when, oks: dict(round=0, node_id="node-0", when=when, mix="quick", n=2, pass1=sum(oks) / 2,
                                 items=[[item_key(e), "basic_arithmetic", "\x1b]0;PWNED\x07\x1b[2J\u202e7", ok]
                                        for e, ok in zip(es, oks)])
    logs = tmp_path / "run" / "logs" / "node-0"; logs.mkdir(parents=True)
    (logs / "eval_items.jsonl").write_text(json.dumps(rec("base", [False, True])) + "\n"
                                           + json.dumps(rec("final", [True, False])) + "\n")
    code, out, err = cli("compare", tmp_path / "run")
    assert code == 0 and "1 fixed, 1 broken" in out and "\\x1b]0;PWNE" in out, out + err  # shown, escaped
    assert not any(c in out for c in "\x1b\x07\u202e"), repr(out)


def test_unreadable_lease_stops_the_heartbeat_with_a_reason(tmp_path, monkeypatch):
    """A lease file that cannot be read (its mode changed under the node, a failing disk): a moment of it is ridden
    out; once it lasts half of `stale_after` the heartbeat reports the lease lost, with why, instead of its thread
    dying in silence and the node running on unguarded."""
    from sapo_nb import durability
    def unreadable(p): raise PermissionError(13, "Permission denied", str(p))
    real = durability.read_lease
    lease = NodeLease(tiny(tmp_path / "root"), stale_after=4.0, heartbeat=0.05).acquire()
    try:
        monkeypatch.setattr(durability, "read_lease", unreadable)
        time.sleep(0.5)                                     # a moment: within its patience of 2 s
        monkeypatch.setattr(durability, "read_lease", real)
        time.sleep(0.3)
        assert lease.lost is None, lease.lost
        monkeypatch.setattr(durability, "read_lease", unreadable)
        deadline = time.monotonic() + 6
        while lease.lost is None and time.monotonic() < deadline: time.sleep(0.05)
        assert lease.lost and "could not be read for" in lease.lost and "PermissionError" in lease.lost, lease.lost
    finally: monkeypatch.undo(); lease.release()

# --- leases and restored state ---------------------------------------------------------------------------------------

def test_future_dated_lease_is_recovered(tmp_path):
    "A lease dated a day in the future (mtime and heartbeat) is invalid, not fresh: the node id starts."
    cfg = tiny(tmp_path)
    p = lease_path(cfg); p.parent.mkdir(parents=True)
    p.write_text(json.dumps(dict(host="elsewhere", pid=4242, token="t", heartbeat=time.time() + 86400)))
    os.utime(p, (time.time() + 86400,) * 2)
    NodeLease(cfg).acquire().release()


def test_unconfirmable_lease_says_how_to_recover(tmp_path):
    "A fresh lease of another host: refused, and the message names the file to delete if no such node runs."
    cfg = tiny(tmp_path)
    p = lease_path(cfg); p.parent.mkdir(parents=True)
    p.write_text(json.dumps(dict(host="elsewhere", pid=4242, token="t", heartbeat=time.time())))
    with pytest.raises(NodeRunning, match=f"delete '{p}' and start again"): NodeLease(cfg).acquire()


def test_rewritten_lease_token_says_what_happened(tmp_path):
    "A lease rewritten with another token under a running node: the node stops saying so, not that it stalled."
    cfg = tiny(tmp_path, rounds=2)
    n = node(cfg); n.resume()
    n.lease.release(); n.lease = NodeLease(cfg, heartbeat=0.05).acquire()
    lease_path(cfg).write_text(json.dumps(dict(host="h", pid=7, token="someone else")))
    time.sleep(0.4)
    with pytest.raises(NodeRunning) as e: n.step()
    assert "names another holder" in str(e.value) and "stalled" not in str(e.value)
    n.close()


def _fix_marker(ck, state:dict):
    "Rewrite `state.json` of checkpoint `ck` with its checksum fixed up, as someone who edits it would."
    (ck / "state.json").write_text(json.dumps(state))
    marker = json.loads((ck / "complete").read_text()); marker["files"]["state.json"] = file_digest(ck / "state.json")
    (ck / "complete").write_text(json.dumps(marker))


def test_absurd_restored_controller_is_refused(tmp_path):
    "A checkpoint whose controller claims I + J = 10**9 (checksum fixed up): refused, and resume falls back."
    cfg = tiny(tmp_path, rounds=3, checkpoints_kept=2)
    n = node(cfg); n.resume(); n.step(); n.step(); n.close()  # checkpoints of rounds 0 and 1
    ck = checkpoint_dir(cfg) / "round_1"
    state = json.loads((ck / "state.json").read_text())
    state["controller"] = dict(state["controller"], total=10**9, J=0)
    _fix_marker(ck, state)
    fresh = node(cfg)
    with pytest.raises(CheckpointError, match="controller"): fresh._check_restored(state)
    assert fresh.resume() == 1 and fresh.controller.ij == (2, 0)  # from round 0's checkpoint
    fresh.close()


def test_damaged_newest_checkpoint_falls_back_to_the_one_kept_before(tmp_path):
    "With `checkpoints_kept=2` the checkpoint before the newest stays: a damaged newest falls back to it."
    cfg = tiny(tmp_path, rounds=3, checkpoints_kept=2)
    n = node(cfg); n.resume(); n.step(); n.step(); n.close()  # stopped after round 1 of 3
    f = checkpoint_dir(cfg) / "round_1" / "model.safetensors"; f.write_bytes(f.read_bytes()[:100])
    again = node(cfg)
    assert again.resume() == 1
    again.close()


def test_damaged_only_checkpoint_stops_with_what_to_do(tmp_path):
    "Under the default (one checkpoint kept) a damaged newest one is refused: the node stops and says how to start over."
    cfg = tiny(tmp_path, rounds=3)
    n = node(cfg); n.resume(); n.step(); n.step(); n.close()
    assert sorted(p.name for p in checkpoint_dir(cfg).iterdir()) == ["round_1"]
    f = checkpoint_dir(cfg) / "round_1" / "model.safetensors"; f.write_bytes(f.read_bytes()[:100])
    said = []
    again = node(cfg, log=said.append)
    with pytest.raises(CheckpointError, match="no checkpoint is intact.*move the folder away"): again.resume()
    assert any("round 1 skipped" in line for line in said), said
    assert [r["round"] for r in read_jsonl(metrics_path(cfg))] == [0, 1]  # nothing thrown away on its own
    again.close()


def test_planted_sparse_state_is_refused_unread(tmp_path):
    """A checkpoint planted with a marker that vouches for a sparse 4 GB `state.json` (no disk used): refused before
    a byte is read, where the node once read it whole to hash it (out of memory)."""
    from sapo_nb.durability import checkpoint_state
    ck = tmp_path / "round_9"; ck.mkdir()
    with open(ck / "state.json", "wb") as f: f.truncate(4 << 30)
    (ck / "complete").write_text(json.dumps(dict(files={n: dict(bytes=4 << 30, sha256="0" * 64)
                                                        for n in ("model.safetensors", "optimizer.pt", "state.json")})))
    t0 = time.monotonic()
    with pytest.raises(CheckpointError, match="more than the"): checkpoint_state(ck)
    assert time.monotonic() - t0 < 1


def test_pool_root_inside_the_run_folder_is_refused(tmp_path):
    """The shared pool folder inside the node's own run folder (`pool_root` = `<root>/<experiment>` or below it), where
    peers who write the pool would write its checkpoints and leases: refused at start, saying why."""
    for pool in ("sapo", "sapo/checkpoints"):
        cfg = tiny(tmp_path / "runs", transport="folder", experiment="sapo", pool_root=str(tmp_path / "runs" / pool))
        with pytest.raises(ValueError, match="inside this node's run folder"): node(cfg)


def test_disk_usage_survives_deep_planted_tree(tmp_path):
    """A chain of 1,500 nested folders planted under the pool (Python's own folder walk recursed once per level, and
    `sapo clean` and the end of `sapo swarm` crashed with RecursionError): counted as far as it goes, and clean works."""
    from sapo_nb.swarm import disk_usage
    root = tmp_path / "root"; (root / "exp" / "logs" / "node-0").mkdir(parents=True)
    (root / "exp" / "rollouts" / "f.json").parent.mkdir(parents=True)
    (root / "exp" / "rollouts" / "f.json").write_bytes(b"x" * 10)
    fd = os.open(root / "exp" / "rollouts", os.O_RDONLY)
    for _ in range(1500):  # level by level: Python's own mkdir(parents=True) recurses too
        os.mkdir("d", dir_fd=fd)
        fd, up = os.open("d", os.O_RDONLY, dir_fd=fd), fd
        os.close(up)
    os.close(fd)
    try:
        assert disk_usage(root / "exp") == 10
        code, out, err = cli("clean", "--root", str(root), "--experiment", "exp")
        assert code == 0 and "Traceback" not in err, err
    finally:
        for k in range(1500, 0, -1): os.rmdir(str(root / "exp" / "rollouts") + "/d" * k)


def test_linked_experiment_in_pool_creates_nothing_outside(tmp_path):
    """`<pool_root>/<experiment>` planted as a link to another folder: opening the pool refuses it, and creates no
    `rollouts/` in the folder it points to (the folder was created through the link before it was checked)."""
    from sapo_nb.transport import FolderTransport
    elsewhere = tmp_path / "elsewhere"; elsewhere.mkdir()
    (tmp_path / "pool").mkdir(); (tmp_path / "pool" / "exp").symlink_to(elsewhere)
    with pytest.raises(OSError, match="cannot use"): FolderTransport(tmp_path / "pool", "exp")
    assert list(elsewhere.iterdir()) == []


def test_report_never_overwrites_a_file_it_did_not_write(tmp_path):
    """`sapo report RUN --out` naming a file that is there and is not a report (the run's own metrics, a user's
    notes): refused, the file untouched; a report written before is replaced."""
    from sapo_nb.analysis import synthetic_runs
    synthetic_runs(tmp_path / "runs", seeds=range(1), eval_every=0)
    run = next(p.parent.parent.parent for p in (tmp_path / "runs").rglob("metrics.jsonl"))
    metrics = next(run.rglob("metrics.jsonl"))
    before = metrics.read_bytes()
    code, out, err = cli("report", str(run), "--out", str(metrics))
    assert code == 2 and "is not a report sapo_nb wrote" in err and metrics.read_bytes() == before, err
    code, _, _ = cli("report", str(run), "--out", str(tmp_path / "r.html"))
    assert code == 0 and cli("report", str(run), "--out", str(tmp_path / "r.html"))[0] == 0  # its own: replaced
