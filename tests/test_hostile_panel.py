"""The hostile-folder suite for `sapo status` and the panel: one named test per attack, each failing without its defence.

The experiment folder is shared: peers and other users can write anything into it. Attackers here plant metrics
rows of the wrong shape, pid files naming processes the panel never started (pid 0, init, the test process
itself, a bystander with its true start time), FIFOs and oversized files, and folder names and log lines that are
HTML. Every test runs in a temp folder in seconds; no signal ever leaves the test (sends are recorded instead).
"""
import json, os, signal, socket, subprocess, sys, threading, time

import psutil
import pytest

from sapo_nb import swarm
from sapo_nb.core import RoundMetrics
from sapo_nb.monitor import MetricsReader, SwarmWatcher, format_status, swarm_status, tail_lines
from sapo_nb.panel import SwarmPanel, status_html
from sapo_nb.swarm import PID_FILE, process_states, read_pid_file, stop_swarm

XSS = "<img src=x onerror=alert(1)>"


def row(node="node-0", r=0, reward=0.5, t=1000.0, spr=2.0, **kw):
    "A metrics row as a node writes it (`core.RoundMetrics`), with `kw` written over it as is (a hostile file's values)."
    good = RoundMetrics(round=r, node_id=node, I=2, J=2, G=4, reward_local=reward, reward_train=reward, pool_selected=1,
                        pool_available=2, seconds={"train": 1.0, "total": spr}, time=t + r * spr).to_row()
    return {**good, **kw}


MALFORMED = [  # each one of these crashed `sapo status` or the panel when it was a node's newest row
    {k: v for k, v in row(r=90).items() if k != "seconds"},
    row(r=91, seconds=2.0), row(r=92, seconds={"total": "2"}), row(r=93, time="12:00"), row(r=94, round="95"),
    row(r=96, reward_train="high"), row(r=97, node_id=["node-0"]), row(r=98, time=float("nan")),
    {k: v for k, v in row(r=99).items() if k != "time"}, row(r=100, I=None), row(r=101, round=-1),
]


def write_rows(path, rows, tail=""):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(x) + "\n" for x in rows) + tail)


def in_thread(fn, timeout=5.0):
    "Run fn in a daemon thread; (finished, result). A defence against hangs must finish."
    out = {}
    th = threading.Thread(target=lambda: out.setdefault("r", fn()), daemon=True)
    th.start(); th.join(timeout)
    return not th.is_alive(), out.get("r")


@pytest.fixture
def signals(monkeypatch):
    "Record every signal the stop path would send (signal 0, an existence probe, still goes through)."
    sent, kill, killpg = [], os.kill, os.killpg
    monkeypatch.setattr(swarm.os, "kill", lambda pid, sig: kill(pid, 0) if sig == 0 else sent.append(("kill", pid, sig)))
    monkeypatch.setattr(swarm.os, "killpg", lambda pid, sig: killpg(pid, 0) if sig == 0 else sent.append(("killpg", pid, sig)))
    return sent


def plant(exp, nodes, host=None):
    exp.mkdir(parents=True, exist_ok=True)
    (exp / PID_FILE).write_text(json.dumps(dict(host=socket.gethostname() if host is None else host, launched_at=1.0, nodes=nodes)))


# --- malformed metrics rows ---------------------------------------------------------------------------------------

def test_valid_metrics_row_rules():
    from sapo_nb.core import valid_metrics_row
    assert valid_metrics_row(row()) and valid_metrics_row(row(reward=None))
    for bad in MALFORMED + [None, [row()], "row", row(pool_available=10**400), row(time=10**400), row(round=True)]:
        assert not valid_metrics_row(bad), bad


def test_status_skips_row_without_seconds(tmp_path):
    logs = tmp_path / "exp" / "logs"
    write_rows(logs / "node-0" / "metrics.jsonl", [row(r=0), row(r=1)] + MALFORMED[:1])  # the newest row has no `seconds`
    write_rows(logs / "node-1" / "metrics.jsonl", [row("node-1", r=0)] + MALFORMED)
    write_rows(logs / "node-2" / "metrics.jsonl", MALFORMED)                            # nothing usable at all
    st = swarm_status(tmp_path, "exp", now=1010.0)
    assert [(s["node"], s["rounds"], s["last_round"], s["reward"], s["seconds_per_round"]) for s in st] == \
           [("node-0", 2, 1, 0.5, 2.0), ("node-1", 1, 0, 0.5, 2.0), ("node-2", 0, None, None, None)]
    assert [s["skipped"] for s in st] == [1, len(MALFORMED), len(MALFORMED)]
    assert st[2]["state"] == "no round yet"
    table = format_status(st)
    assert "node-0" in table and f"({len(MALFORMED)} lines skipped: malformed or repeated)" in table, table


def test_format_status_escapes_control_characters(tmp_path):
    write_rows(tmp_path / "exp" / "logs" / "evil\x1b]0;pwned\x07" / "metrics.jsonl", [row()])
    table = format_status(swarm_status(tmp_path, "exp", now=1010.0))
    assert "\x1b" not in table and "\x07" not in table and "pwned" in table, table


def test_panel_skips_malformed_rows(tmp_path):
    exp = tmp_path / "exp"
    good = [row(r=r) for r in range(3)]
    write_rows(exp / "logs" / "node-0" / "metrics.jsonl", good + MALFORMED + [[1, 2], 7, "x"], tail="[" * 100_000 + "\n")
    write_rows(exp / "logs" / "node-1" / "metrics.jsonl", MALFORMED)
    rd = MetricsReader(exp / "logs" / "node-0" / "metrics.jsonl")
    assert [x["round"] for x in rd.read()] == [0, 1, 2] and rd.bad == len(MALFORMED) + 4

    w = SwarmWatcher(tmp_path, "exp")
    w.refresh()
    st = w.status(now=1010.0)
    assert [(s["node"], s["rounds"], s["last_round"], s["state"]) for s in st] == \
           [("node-0", 3, 2, "stopped"), ("node-1", 0, None, "no round yet")]  # no lease held: nothing runs it
    assert [s["skipped"] for s in st] == [len(MALFORMED) + 4, len(MALFORMED)]
    assert [s["skipped"] for s in swarm_status(tmp_path, "exp", now=1010.0)] == [s["skipped"] for s in st]  # one count
    assert w.nodes["node-0"].rewards == [0.5, 0.5, 0.5]
    assert f"({len(MALFORMED) + 4} skipped)" in status_html(st)

    p = SwarmPanel(root=str(tmp_path), experiment="exp", interval=None)  # builds the plot, the table and the log view
    p.refresh()
    assert "node-0 round 3/3" in p.log_view.value, p.log_view.value
    assert [len(t.y) for t in p.fig.data] == [3, 3, 0, 0]
    with open(exp / "logs" / "node-0" / "metrics.jsonl", "a") as f: f.write(json.dumps(MALFORMED[3]) + "\n")
    p.refresh()  # a malformed row appended while watching: skipped too
    assert p.watcher.status(now=1010.0)[0]["last_round"] == 2


def test_panel_ignores_malformed_configs(tmp_path):
    exp = tmp_path / "exp"
    write_rows(exp / "logs" / "node-0" / "metrics.jsonl", [row(r=r) for r in range(3)])
    write_rows(exp / "logs" / "node-1" / "metrics.jsonl", [row("node-1", r=r) for r in range(3)])
    (exp / "config.json").write_text(json.dumps({"nodes": [{"node_id": "node-0", "rounds": "ten", "model": ["x"], "local_questions": "2"},
                                                           {"node_id": ["node-1"], "rounds": 10}]}))
    (exp / "logs" / "node-1" / "config.json").write_text(json.dumps({"rounds": 10**400}))
    w = SwarmWatcher(tmp_path, "exp"); w.refresh()
    assert [(s["total_rounds"], s["eta_seconds"]) for s in w.status(now=1010.0)] == [(None, None), (None, None)]
    p = SwarmPanel(root=str(tmp_path), experiment="exp", interval=None)
    p.attach()  # the form keeps its own values where config.json's do not fit
    assert p.fields["nodes"].value == 2 and p.fields["model"].value != ["x"] and "watching" in p.message.value
    (exp / "config.json").write_text(json.dumps({"nodes": "abc"}))
    p.attach()
    assert "watching" in p.message.value


def test_fifos_in_the_folder_never_block(tmp_path):
    exp = tmp_path / "exp"
    (exp / "logs" / "node-0").mkdir(parents=True)
    write_rows(exp / "logs" / "node-1" / "metrics.jsonl", [row("node-1")])
    fifos = [exp / "logs" / "node-0" / "metrics.jsonl", exp / "logs" / "node-1" / "node.log", exp / "config.json", exp / PID_FILE]
    for f in fifos: os.mkfifo(f)
    try:
        done, p = in_thread(lambda: SwarmPanel(root=str(tmp_path), experiment="exp", interval=None))
        assert done, "the panel hung on a FIFO"
        p.log_node.value = "node-1"  # its node.log is a FIFO: the log view shows its metrics rows instead
        assert "node-1 round 1/1" in p.log_view.value, p.log_view.value
        assert in_thread(lambda: (read_pid_file(exp), tail_lines(fifos[1]), stop_swarm(exp, timeout=0.1))) == (True, ({}, [], {}))
    finally:
        for f in fifos:  # let any reader still blocked on a FIFO (the old code) finish
            try: os.close(os.open(f, os.O_WRONLY | os.O_NONBLOCK))
            except OSError: pass


# --- the pid file -------------------------------------------------------------------------------------------------

def test_pid_file_malformed_entries_ignored(tmp_path):
    me = psutil.Process(os.getpid()).create_time()
    exp = tmp_path / "exp"
    plant(exp, {"a": "x", "b": dict(pid="123", create_time=me), "c": dict(pid=0, create_time=me), "d": dict(pid=-1, create_time=me),
                "e": dict(pid=1, create_time=me), "f": dict(pid=True, create_time=me), "g": dict(pid=2**40, create_time=me),
                "h": dict(pid=os.getpid(), create_time="now"), "i": dict(pid=os.getpid(), create_time=float("nan")),
                "j": dict(pid=os.getpid()), "k": [os.getpid(), me], "../l": dict(pid=os.getpid(), create_time=me),
                "ok": dict(pid=os.getpid(), create_time=me)})
    assert read_pid_file(exp)["nodes"] == {"ok": dict(pid=os.getpid(), create_time=me)}
    assert process_states(exp) == {"ok": "exited"}  # well-formed, but this test process is not a node of the folder
    for content in ("{torn", "[]", "7", json.dumps(dict(host=socket.gethostname(), nodes=[1, 2])),
                    json.dumps(dict(host=["me"], nodes={})), json.dumps(dict(nodes={"ok": dict(pid=os.getpid(), create_time=me)}))):
        (exp / PID_FILE).write_text(content)
        assert read_pid_file(exp) == {} and process_states(exp) == {}, content
    (exp / PID_FILE).write_text(json.dumps(dict(host=socket.gethostname(), nodes={"ok": dict(pid=os.getpid(), create_time=me)}))
                                + " " * (2 << 20))  # valid JSON, but 2 MB: not read
    assert read_pid_file(exp) == {}


def test_stop_never_signals_bad_pid(tmp_path, signals, monkeypatch):
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        ct = lambda pid: psutil.Process(pid).create_time()
        exp = tmp_path / "exp"
        entries = {"bystander": dict(pid=bystander.pid, create_time=ct(bystander.pid)),  # its true start time
                   "me": dict(pid=os.getpid(), create_time=ct(os.getpid())), "init": dict(pid=1, create_time=ct(1)),
                   "group": dict(pid=0, create_time=ct(1)), "everyone": dict(pid=-1, create_time=ct(1)), "text": dict(pid="1", create_time=0)}
        for name, e in entries.items():  # one at a time: each must be refused on its own
            plant(exp, {name: e})
            assert stop_swarm(exp, timeout=0.2) == {}, name
            assert signals == [], (name, signals)
        plant(exp, entries)
        assert stop_swarm(exp, timeout=0.2) == {} and signals == []
        assert bystander.poll() is None
    finally:
        monkeypatch.undo()  # real signals again, to end the bystander
        bystander.kill(); bystander.wait()


def test_stop_still_stops_its_own_node(tmp_path):
    "The defences above leave the real case working: a `sapo node` process of this folder, found from the pid file."
    exp = tmp_path / "exp"
    cmd = ["node", "--config", str(exp / "logs" / "node-0" / "config.json")]
    node = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", *cmd], start_new_session=True)
    try:
        plant(exp, {"node-0": dict(pid=node.pid, create_time=psutil.Process(node.pid).create_time())})
        assert process_states(exp) == {"node-0": "running"}
        assert stop_swarm(exp, timeout=5) == {"node-0": "terminated"}
        assert node.wait(5) == -signal.SIGTERM
    finally:
        if node.poll() is None: node.kill(); node.wait()


# --- HTML ---------------------------------------------------------------------------------------------------------

def test_status_html_escapes_node_names(tmp_path):
    names = [XSS, "q'><img src=y onerror=alert(2)>"]
    for n in names: write_rows(tmp_path / "exp" / "logs" / n / "metrics.jsonl", [row(n)])
    w = SwarmWatcher(tmp_path, "exp"); w.refresh()
    h = status_html(w.status(now=1010.0))
    assert "<img" not in h and "&lt;img src=x onerror=alert(1)&gt;" in h, h
    p = SwarmPanel(root=str(tmp_path), experiment="exp", interval=None)
    for widget in (p.status, p.summary, p.log_view):
        assert "<img" not in widget.value, widget.value
    assert "&lt;img src=x onerror=alert(1)&gt;" in p.status.value
    assert all("<img" not in t.name for t in p.fig.data)  # plotly renders a subset of HTML in legend names


def test_panel_escapes_log_lines_and_errors(tmp_path):
    exp = tmp_path / "exp"
    write_rows(exp / "logs" / "node-0" / "metrics.jsonl", [row()])
    (exp / "logs" / "node-0" / "node.log").write_text(f"loading\n{XSS}\n<script>alert(3)</script>\n")
    p = SwarmPanel(root=str(tmp_path), experiment="exp", interval=None)
    assert "<img" not in p.log_view.value and "<script" not in p.log_view.value and "&lt;script&gt;" in p.log_view.value
    p.set_values(experiment=XSS)
    p.attach()  # not a valid experiment name: the message and the field's error quote it
    shown = p.message.value + "".join(w.value for w in p.errors.values())
    assert "<img" not in shown and "&lt;img" in shown, shown
    def boom(): raise RuntimeError(XSS)
    p._guarded(boom)  # an exception's text, as a button shows it
    assert "<img" not in p.message.value and "&lt;img" in p.message.value


def test_future_dated_launch_on_another_host_does_not_block_launch(tmp_path):
    """A pid file of another host dated a day ahead, with no lease: its node reads as exited, not as one still loading
    its model (which refused every launch in the folder for as long as the date stayed ahead)."""
    exp = tmp_path / "exp"
    plant(exp, {"node-0": dict(pid=4242, create_time=1.0)}, host="elsewhere")
    info = json.loads((exp / PID_FILE).read_text())
    (exp / PID_FILE).write_text(json.dumps(dict(info, launched_at=time.time() + 86_400)))
    assert process_states(exp) == {"node-0": "exited"}
    (exp / PID_FILE).write_text(json.dumps(dict(info, launched_at=time.time() - 10)))  # launched just now: loading
    assert process_states(exp) == {"node-0": "remote"}


def test_a_node_started_again_reads_running_despite_an_old_pid_file(tmp_path):
    """The pid file of an earlier launch names node-0's process, long gone; node-0 was started again by hand since and
    holds its lease, with fresh rows: `sapo status` and the panel read it as running, not as stopped."""
    from sapo_nb.config import SAPOConfig
    from sapo_nb.durability import NodeLease
    exp = tmp_path / "exp"
    write_rows(exp / "logs" / "node-0" / "metrics.jsonl", [row(r=0, t=time.time() - 5)])
    plant(exp, {"node-0": dict(pid=4242, create_time=1.0)})  # this host: no such process of that start time
    lease = NodeLease(SAPOConfig(root=str(tmp_path), experiment="exp", node_id="node-0")).acquire()
    try:
        assert process_states(exp) == {"node-0": "exited"}
        assert swarm_status(tmp_path, "exp", states=process_states(exp))[0]["state"] == "running"
        w = SwarmWatcher(tmp_path, "exp"); w.refresh()
        assert w.status(process_states(exp))[0]["state"] == "running"
    finally: lease.release()
