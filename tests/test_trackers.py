"""The trackers against their real packages, offline: what a node logs can be read back from TensorBoard's
event files, a W&B offline run and Trackio's local store; a failing tracker never raises to the node; and
`import sapo_nb.trackers` imports none of the packages. A test whose package is not installed is skipped,
saying which extra installs it."""
import json, os, shutil, struct, subprocess, sys, textwrap, time
from pathlib import Path
import pytest
from sapo_nb.config import SAPOConfig
from sapo_nb.core import metrics_path
from conftest import sapo_cli
from sapo_nb.trackers import Tracker, TrackerError, export_run, flatten_row, make_tracker, open_tracker, tracker_dir

NBS_DATA = Path(__file__).resolve().parent.parent / "nbs" / "data"
PACKAGES = ("tensorboardX", "wandb", "trackio")

def rows(n=3):
    "Metrics rows as a node writes them: nested seconds, an evaluation, text and a None."
    return [{"round": r, "node_id": "node-0", "model": "tiny", "I": 2, "J": 2, "reward_local": 0.25 * r,
             "reward_external": None, "loss": 0.5 - 0.125 * r, "seconds": {"generate": 1.5 + r, "total": 4.0 + r},
             **({"eval_pass1": 0.5, "eval_by_task": {"bf": 0.25}} if r == n - 1 else {}), "time": 1_800_000_000.0 + 10 * r}
            for r in range(n)]

def needs(module):
    extra = {"tensorboardX": "tensorboard"}.get(module, module)
    return pytest.importorskip(module, reason=f"{module} is not installed (pip install \"sapo_nb[{extra}]\")")

def test_import_does_not_load_the_tracker_packages():
    code = "import sys, sapo_nb.trackers; print([m for m in %r if m in sys.modules])" % (PACKAGES,)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out

def test_none_is_a_silent_no_op(tmp_path):
    said = []
    t = open_tracker(SAPOConfig(root=str(tmp_path)), log=said.append)
    assert type(t) is Tracker and t.log(rows()[0]) and said == []
    t.close()
    assert not (tmp_path / "sapo" / "tracker").exists()

class Breaks(Tracker):
    kind = "breaks"
    def __init__(self, log): super().__init__(log); self.calls = 0
    def write(self, step, scalars, walltime):
        self.calls += 1
        raise RuntimeError("tracker service down")

def test_a_failing_tracker_reports_once_and_turns_itself_off():
    said = []
    t = Breaks(said.append)
    assert [t.log(r) for r in rows(5)] == [False] * 5  # no exception reaches the caller
    assert t.calls == 1 and not t.enabled and t.rows == 0
    assert said == ["tracker breaks: logging round 0 failed (RuntimeError: tracker service down); it is off now, metrics.jsonl goes on"]
    t.close(); t.close()
    assert len(said) == 1

def test_a_tracker_that_cannot_open_is_off_and_never_raises(tmp_path):
    needs("tensorboardX")
    blocker = tmp_path / "root"; blocker.write_text("a file where the experiment folder should be")
    said = []
    t = open_tracker(SAPOConfig(root=str(blocker), tracker="tensorboard"), log=said.append)
    assert not t.enabled and t.log(rows()[0]) is False
    t.close()
    assert len(said) == 1 and "tracker tensorboard: opening failed" in said[0], said
    with pytest.raises(TrackerError, match="could not open"):
        make_tracker("tensorboard", blocker / "x", "p", "n", strict=True)

# --- TensorBoard ---------------------------------------------------------------------------------------------

def scalar_events(folder) -> list:
    "[(tag, step, value, wall time)] of every scalar in the TFRecord event files of `folder`, repeats kept."
    from tensorboardX.proto import event_pb2
    out = []
    for f in sorted(Path(folder).glob("events.out.tfevents.*")):
        data, pos = f.read_bytes(), 0
        while pos + 12 <= len(data):  # record: u64 length, u32 crc of it, the event, u32 crc of it
            (n,) = struct.unpack("<Q", data[pos:pos + 8]); pos += 12
            e = event_pb2.Event(); e.ParseFromString(data[pos:pos + n]); pos += n + 4
            out += [(v.tag, e.step, v.simple_value, e.wall_time) for v in e.summary.value if v.HasField("simple_value")]
    return out

def read_events(folder) -> dict:
    "{(tag, step): (value, wall time)} of the scalars in the TFRecord event files of `folder`."
    return {(tag, step): (v, t) for tag, step, v, t in scalar_events(folder)}

def steps_of(folder, tag) -> list:
    "The steps `tag` has points at, one entry per point: a step sent twice is there twice."
    return sorted(step for t, step, *_ in scalar_events(folder) if t == tag)

def test_tensorboard_values_read_back(tmp_path):
    needs("tensorboardX")
    cfg = SAPOConfig(root=str(tmp_path), experiment="exp", node_id="node-0", tracker="tensorboard")
    said = []
    t = open_tracker(cfg, log=said.append)
    assert t.enabled and t.kind == "tensorboard", said
    for r in rows(): assert t.log(r)
    t.close()
    events = read_events(tracker_dir(cfg))
    assert tracker_dir(cfg) == tmp_path / "exp" / "tracker" / "node-0"
    want = {(k, r["round"]): v for r in rows() for k, v in flatten_row(r).items()}
    assert set(events) == set(want)
    # stated by hand: every number, nested ones by path; not the round (the step), the time, text or None
    assert {k for k, _ in events} == {"I", "J", "loss", "reward_local", "seconds/generate", "seconds/total", "eval_pass1",
                                      "eval_by_task/bf"}
    for key, v in want.items():
        assert events[key][0] == pytest.approx(v, rel=1e-6), key
    assert events[("seconds/generate", 2)][0] == 3.5 and events[("eval_by_task/bf", 2)][0] == 0.25
    assert events[("loss", 1)][1] == pytest.approx(1_800_000_010.0)  # the row's time is the event's wall time
    import importlib.util  # the extra installs the writer; the viewer is a package of its own, which says how to get it
    viewer = "" if importlib.util.find_spec("tensorboard") else ", after pip install tensorboard"
    assert said == [f"node-0: metrics also go to tensorboard (tensorboard --logdir {tmp_path / 'exp' / 'tracker'}{viewer})"]

def test_tensorboard_failure_while_logging_does_not_reach_the_node(tmp_path, monkeypatch):
    needs("tensorboardX")
    said = []
    t = open_tracker(SAPOConfig(root=str(tmp_path), tracker="tensorboard"), log=said.append)
    assert t.log(rows()[0])
    def full(*a, **k): raise OSError(28, "No space left on device")
    monkeypatch.setattr(t.writer, "add_scalar", full)
    assert t.log(rows()[1]) is False and t.log(rows()[2]) is False
    t.close()
    assert t.rows == 1 and not t.enabled
    assert len(said) == 2 and "logging round 1 failed (OSError" in said[1], said

def test_export_run_to_tensorboard(tmp_path):
    needs("tensorboardX")
    said = []
    sent = export_run(NBS_DATA / "swarm4_cpu", "tensorboard", out=tmp_path, log=said.append)
    assert sent == {f"node-{i}": 20 for i in range(4)}
    source = [json.loads(l) for l in (NBS_DATA / "swarm4_cpu" / "logs" / "node-3" / "metrics.jsonl").read_text().splitlines()]
    events = read_events(tmp_path / "node-3")
    assert [events[("reward_train", r["round"])][0] for r in source] == pytest.approx([r["reward_train"] for r in source])
    assert len(said) == 4 and said[0].startswith("node-0: 20 rounds sent to tensorboard")

def write_metrics(cfg, rows):
    "A node's metrics file as the node leaves it: written before its tracker opens (what names the run)."
    metrics_path(cfg).parent.mkdir(parents=True, exist_ok=True)
    metrics_path(cfg).write_text("".join(json.dumps(r) + "\n" for r in rows))

def test_a_resumed_node_sends_each_round_to_tensorboard_once(tmp_path):
    "A node resumed from its round-0 checkpoint runs rounds 1 and 2 again: TensorBoard gets no second point there."
    needs("tensorboardX")
    cfg = SAPOConfig(root=str(tmp_path), experiment="exp", node_id="node-0", tracker="tensorboard")
    first = rows(5)
    write_metrics(cfg, first[:3])
    t = open_tracker(cfg, log=lambda s: None)
    assert [t.log(r) for r in first[:3]] == [True] * 3
    t.close()
    rerun = [{**r, "loss": 9.0, "time": r["time"] + 1000} for r in first[1:]]
    write_metrics(cfg, first[:1] + rerun[:1])  # cut back to round 0, and round 1 run again
    t = open_tracker(cfg, log=lambda s: None)
    assert [t.log(r) for r in rerun] == [False, False, True, True]
    t.close()
    assert steps_of(tracker_dir(cfg), "loss") == [0, 1, 2, 3, 4]
    # a fresh start in the same folder (its old rows set aside, a new round 0): not the old run, sent from round 0
    fresh = [{**r, "time": r["time"] + 10**6} for r in rows(2)]
    write_metrics(cfg, fresh[:1])
    t = open_tracker(cfg, log=lambda s: None)
    assert [t.log(r) for r in fresh] == [True, True]
    t.close()
    assert steps_of(tracker_dir(cfg), "loss") == [0, 0, 1, 1, 2, 3, 4]  # three writers, three files: none overwritten

def test_exporting_twice_sends_each_round_once(tmp_path):
    "`sapo export` run again, to the same folder: nothing is sent, not even an empty event file is made."
    needs("tensorboardX")
    said = []
    assert export_run(NBS_DATA / "swarm4_cpu", "tensorboard", out=tmp_path, log=said.append) == {
        f"node-{i}": 20 for i in range(4)}
    files = sorted((tmp_path / "node-3").iterdir())
    assert export_run(NBS_DATA / "swarm4_cpu", "tensorboard", out=tmp_path, log=said.append) == {
        f"node-{i}": 0 for i in range(4)}
    assert said[4:] == [f"node-{i}: its 20 rounds are in tensorboard already (sent before)" for i in range(4)]
    assert steps_of(tmp_path / "node-3", "reward_train") == list(range(20))
    assert sorted((tmp_path / "node-3").iterdir()) == files

def test_export_of_a_grown_run_sends_only_the_new_rounds(tmp_path):
    needs("tensorboardX")
    run = tmp_path / "run"
    shutil.copytree(NBS_DATA / "swarm4_cpu", run)
    metrics = run / "logs" / "node-0" / "metrics.jsonl"
    lines = metrics.read_text().splitlines(keepends=True)
    metrics.write_text("".join(lines[:12]))  # exported while it ran, at round 11
    said = []
    assert export_run(run, "tensorboard", out=tmp_path / "tb", log=said.append)["node-0"] == 12
    metrics.write_text("".join(lines))
    assert export_run(run, "tensorboard", out=tmp_path / "tb", log=said.append)["node-0"] == 8
    assert said[4].endswith("; 12 were there before"), said[4]
    assert steps_of(tmp_path / "tb" / "node-0", "reward_train") == list(range(20))

def test_export_refuses_a_destination_holding_another_run(tmp_path):
    "Two runs' rounds in one TensorBoard folder would be drawn as one line: the second export is refused, clearly."
    needs("tensorboardX")
    run = tmp_path / "run"
    shutil.copytree(NBS_DATA / "swarm4_cpu", run)
    export_run(run, "tensorboard", out=tmp_path / "tb", log=lambda s: None)
    metrics = run / "logs" / "node-0" / "metrics.jsonl"
    metrics.write_text("".join(json.dumps({**json.loads(l), "time": 1.0 + i}) + "\n"  # the folder's run started afresh
                               for i, l in enumerate(metrics.read_text().splitlines())))
    with pytest.raises(TrackerError, match="node-0: 'tensorboard' .* holds another run's rounds; export this one "
                                           "with another --out"):
        export_run(run, "tensorboard", out=tmp_path / "tb", log=lambda s: None)
    assert steps_of(tmp_path / "tb" / "node-0", "reward_train") == list(range(20))

# --- Weights & Biases ----------------------------------------------------------------------------------------

def wandb_records(path):
    "The protobuf records of a W&B transaction log (`run-*.wandb`): LevelDB-style 32 KiB blocks after a 7-byte header."
    from wandb.proto import wandb_internal_pb2 as pb
    data, block, pos, chunk = Path(path).read_bytes(), 32768, 7, b""
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        if block - pos % block < 7: pos += block - pos % block; continue  # a block's tail too short for a header
        _crc, n, kind = struct.unpack("<IHB", data[pos:pos + 7]); pos += 7
        if pos + n > len(data): return  # a record still being written
        chunk += data[pos:pos + n]; pos += n
        if kind in (1, 4):  # FULL or LAST
            rec = pb.Record(); rec.ParseFromString(chunk); chunk = b""
            yield rec

@pytest.fixture
def wandb_offline_env(tmp_path, monkeypatch):
    for var in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL"): monkeypatch.delenv(var, raising=False)
    for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"): monkeypatch.setenv(var, str(tmp_path / "wandb_home"))
    monkeypatch.setenv("WANDB_SILENT", "true")

def test_wandb_offline_run_reads_back(tmp_path, wandb_offline_env):
    needs("wandb")
    cfg = SAPOConfig(root=str(tmp_path), experiment="exp", node_id="node-1", tracker="wandb", local_questions=3)
    said = []
    t = open_tracker(cfg, log=said.append)
    assert t.enabled and t.kind == "wandb", said
    for r in rows(): assert t.log(r)
    t.close()
    runs = list((tracker_dir(cfg) / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, runs  # offline: a run folder under the experiment, nothing sent anywhere
    log_file = next(runs[0].glob("run-*.wandb"))
    deadline = time.monotonic() + 60  # W&B's service writes the file a moment after finish(), at the latest at exit
    while not any(r.WhichOneof("record_type") == "exit" for r in wandb_records(log_file)):
        assert time.monotonic() < deadline, "the offline run was never completed"
        time.sleep(0.2)
    history, config, summary = {}, {}, {}
    for rec in wandb_records(log_file):
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item}
            history[items["_step"]] = items
        elif kind == "run":
            config = {i.key: json.loads(i.value_json) for i in rec.run.config.update}
            assert (rec.run.project, rec.run.display_name) == ("exp", "node-1")
        elif kind == "summary":
            summary.update({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.summary.update})
    assert sorted(history) == [0, 1, 2]
    for r in rows():
        for k, v in flatten_row(r).items(): assert history[r["round"]][k] == pytest.approx(v), (r["round"], k)
    assert config["local_questions"] == 3 and config["node_id"] == "node-1"
    assert summary["loss"] == pytest.approx(rows()[-1]["loss"]) and summary["eval_by_task/bf"] == 0.25
    assert said[0].startswith("node-1: metrics also go to wandb (wandb sync ") and str(runs[0]) in said[0]

# --- Trackio -------------------------------------------------------------------------------------------------

TRACKIO_SCRIPT = textwrap.dedent("""
    import json, sys, time
    from sapo_nb.config import SAPOConfig
    from sapo_nb.trackers import open_tracker
    rows = json.loads(sys.argv[1])
    said = []
    a, b = (open_tracker(SAPOConfig(root=sys.argv[2], experiment="exp", node_id=n, tracker="trackio"), log=said.append)
            for n in ("node-0", "node-1"))
    for r in rows:                      # two nodes taking turns in one thread, as `sapo swarm --mode inline` runs them
        assert a.log(r) and b.log({**r, "loss": -r["loss"]})
    import sqlite3
    from trackio.sqlite_storage import SQLiteStorage
    def logs(n):
        try: return SQLiteStorage.get_logs("exp", n)
        except sqlite3.OperationalError: return []  # "database is locked": its writer holds it this moment
    deadline = time.monotonic() + 30    # both runs are live: their rows reach the store before close()
    while min(len(logs(n)) for n in ("node-0", "node-1")) < len(rows):
        assert time.monotonic() < deadline, {n: len(logs(n)) for n in ("node-0", "node-1")}
        time.sleep(0.1)
    a.close(); b.close()
    print("RESULT", json.dumps(dict(said=said, errors=[a.error, b.error],
                          logs={n: SQLiteStorage.get_logs("exp", n) for n in ("node-0", "node-1")})))
""")

def test_trackio_local_store_reads_back(tmp_path):
    needs("trackio")
    env = {**os.environ, "TRACKIO_DIR": str(tmp_path / "store"), "HF_HUB_OFFLINE": "1"}
    for var in ("TRACKIO_SPACE_ID", "TRACKIO_SERVER_URL"): env.pop(var, None)
    p = subprocess.run([sys.executable, "-c", TRACKIO_SCRIPT, json.dumps(rows()), str(tmp_path / "runs")],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(next(l for l in p.stdout.splitlines() if l.startswith("RESULT "))[len("RESULT "):])
    assert out["errors"] == [None, None] and len(out["said"]) == 2, out
    assert (tmp_path / "store" / "exp.db").is_file()  # Trackio's own store, not the experiment folder
    for node, sign in (("node-0", 1), ("node-1", -1)):
        logs = {e["step"]: e for e in out["logs"][node]}
        assert sorted(logs) == [0, 1, 2], node
        for r in rows():
            want = {**flatten_row(r), "loss": sign * r["loss"]}
            for k, v in want.items(): assert logs[r["round"]][k] == pytest.approx(v), (node, r["round"], k)


TRACKIO_EXPORT_SCRIPT = textwrap.dedent("""
    import json, sys
    from sapo_nb.trackers import export_run
    from trackio.sqlite_storage import SQLiteStorage
    sent = [export_run(sys.argv[1], "trackio", out=sys.argv[2], project="p", log=lambda s: None) for _ in range(2)]
    print("RESULT", json.dumps(dict(sent=sent, steps=[e["step"] for e in SQLiteStorage.get_logs("p", "node-1")])))
""")

def test_trackio_export_twice_resumes_the_run_without_repeating_a_round(tmp_path):
    "Trackio resumes a run by its name, so a second export would add every round again; it adds none."
    needs("trackio")
    env = {**os.environ, "TRACKIO_DIR": str(tmp_path / "store"), "HF_HUB_OFFLINE": "1"}
    for var in ("TRACKIO_SPACE_ID", "TRACKIO_SERVER_URL"): env.pop(var, None)
    p = subprocess.run([sys.executable, "-c", TRACKIO_EXPORT_SCRIPT, str(NBS_DATA / "swarm4_cpu"), str(tmp_path / "out")],
                       capture_output=True, text=True, env=env, timeout=180)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(next(l for l in p.stdout.splitlines() if l.startswith("RESULT "))[len("RESULT "):])
    assert out["sent"] == [{f"node-{i}": 20 for i in range(4)}, {f"node-{i}": 0 for i in range(4)}]
    assert sorted(out["steps"]) == list(range(20))

def test_node_copies_every_row_to_its_tracker(tmp_path, monkeypatch):
    "A node run with tracker='tensorboard' sends each metrics row it writes, and the JSONL stays complete."
    needs("tensorboardX")
    monkeypatch.setenv("SAPO_KEY_DIR", str(tmp_path / "keys"))
    from sapo_nb.node import SwarmNode
    from sapo_nb.core import read_jsonl, metrics_path
    from sapo_nb.transport import MemoryTransport
    cfg = SAPOConfig(model="tiny", mix="quick", root=str(tmp_path), node_id="node-0", local_questions=2, external_questions=0,
                     completions_per_question=3, max_new_tokens=6, rounds=3, checkpoint_every=0, eval_every=0,
                     transport="memory", tracker="tensorboard")
    node = SwarmNode(cfg, transport=MemoryTransport(), log=lambda *_: None)
    node.run()
    assert node.tracker is None  # closed with the run
    events = read_events(tracker_dir(cfg))
    assert sorted(s for k, s in events if k == "reward_local") == [0, 1, 2]
    assert [r["round"] for r in read_jsonl(metrics_path(cfg))] == [0, 1, 2]
    # exported afterwards to its own tracker folder (the default): TensorBoard holds every round already
    from sapo_nb.core import experiment_dir
    assert export_run(experiment_dir(cfg), "tensorboard", log=lambda s: None) == {"node-0": 0}
    assert steps_of(tracker_dir(cfg), "reward_local") == [0, 1, 2]
    # while it runs, an export into its own folder leaves it to send its rounds itself: no second writer there
    from sapo_nb.durability import NodeLease
    held, said = NodeLease(cfg).acquire(), []
    try:
        (tracker_dir(cfg) / "sent.json").unlink()  # even with nothing marked, it does not write beside the node
        from sapo_nb.durability import lease_alive, lease_file
        running = lambda run, node: lease_alive(lease_file(run, node))  # as `sapo export` asks
        assert export_run(experiment_dir(cfg), "tensorboard", log=said.append, running=running) == {"node-0": 0}
        assert said == ["node-0: runs now, and sends its rounds to tensorboard itself"]
        assert export_run(experiment_dir(cfg), "tensorboard", out=tmp_path / "elsewhere", log=said.append,
                          running=running) == {"node-0": 3}
        code, out, err = sapo_cli("export", str(experiment_dir(cfg)), "--to", "tensorboard")
        assert code == 0 and "node-0: runs now" in out, (code, out, err)
    finally: held.release()
