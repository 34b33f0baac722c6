"""Text read from files anyone can write under the root never reaches a terminal, a report or a tracker live.

Folder names, a metrics row's keys and values, held-out records, `config.json`, `plan.json` and a checkpoint's
`state.json` are all anyone's. Each test plants one kind and checks the sink it reaches: a terminal escape sequence
must come out escaped, HTML or Markdown inert. Each fails without its defence.
"""
import json
from pathlib import Path

import pytest

from conftest import sapo_cli as cli

ESC = "\x1b]0;PWNED\x07\x1b[2J"  # sets the terminal's title, clears the screen


def row(node:str, r:int, **kw) -> dict:
    return dict(round=r, node_id=node, I=2, J=2, G=2, model="tiny", reward_train=0.5, reward_local=0.5,
                pool_available=0, pool_selected=0, seconds=dict(total=1.0), time=1.0 + r, **kw)


def write_rows(folder:Path, node:str, rows:list):
    (folder / "logs" / node).mkdir(parents=True, exist_ok=True)
    (folder / "logs" / node / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_planted_run_labels_are_inert_in_the_report(tmp_path):
    """A configuration folder and a node folder named with HTML: the report's figures (whose titles, legends and hover
    text plotly reads as HTML) and tables carry them as inert tokens."""
    from sapo_nb.analysis import load_runs, write_report
    root = tmp_path / "runs"
    evil_config, evil_node = "<i onmouseover=x>2-2", "<a href=https:evil.example>n"
    for config, node in ((evil_config, evil_node), ("4-0", "node-0")):
        for seed in (0, 1):
            write_rows(root / config / f"seed_{seed}", node, [row(node, r) for r in range(3)])
    df = load_runs(root)
    assert not any("<" in str(v) for c in ("config", "node_id", "run") for v in df[c].unique()), df.config.unique()
    html = write_report(root, tmp_path / "report.html").read_text()
    for raw in ("<i onmouseover", "<a href=https:evil", "\\u003ci onmouseover", "\\u003ca href=https:evil"):
        assert raw not in html, raw
    assert "x3ci onmouseover" in html  # named, escaped


def test_planted_refusal_reason_is_inert_in_status(tmp_path):
    "A metrics row whose peer refusal reasons are terminal escape sequences: `sapo status` prints them escaped."
    exp = tmp_path / "root" / "exp"
    peers = {"alice.0123456789abcdef": dict(offered=1, taken=0, refused={ESC: 3})}
    write_rows(exp, "node-0", [row("node-0", 0, peers=peers)])
    code, out, err = cli("status", "--root", tmp_path / "root", "--experiment", "exp")
    assert code == 0 and "PWNED" in out, out + err
    assert "\x1b" not in out and "\x07" not in out, repr(out)


def test_planted_node_id_is_inert_in_progress_lines():
    "A row whose node_id is an escape sequence (process mode reads rows back to print progress): escaped."
    from sapo_nb.trackers import progress_line
    line = progress_line(row(ESC, 0), rounds=3)
    assert "PWNED" in line and "\x1b" not in line and "\x07" not in line, repr(line)


def test_planted_config_keys_are_inert_in_save_model(tmp_path):
    "`config.json` files naming nodes and fields with escape sequences: `sapo save-model` says so, escaped."
    run = tmp_path / "root" / "exp"
    (run / "logs" / "node-0").mkdir(parents=True)
    (run / "logs" / "node-0" / "config.json").write_text(json.dumps({"node_id": "node-0", ESC: 1}))
    (run / "config.json").write_text(json.dumps([{"node_id": ESC}]))
    for node in ("node-9", "node-0"):  # the list of nodes; the unknown field of node-0's config
        code, out, err = cli("save-model", run, "--node", node, "--to", tmp_path / "out")
        assert code == 2 and "PWNED" in err and "\x1b" not in err and "\x07" not in err, repr(err)


def test_planted_checkpoint_state_key_is_inert_in_the_log(tmp_path, monkeypatch):
    """A checkpoint whose state.json holds a key that is an escape sequence, which the state's check quotes in its
    error (as `cls(**d)` does): the line saying the checkpoint was skipped escapes it."""
    from sapo_nb import durability
    (tmp_path / "checkpoints" / "round_0").mkdir(parents=True)
    (tmp_path / "checkpoints" / "round_0" / "complete").write_text("{}")
    monkeypatch.setattr(durability, "checkpoint_state", lambda ck: {ESC: 1})  # what state.json holds, read
    def check(state): raise durability.CheckpointError(f"unexpected keyword argument '{next(iter(state))}'")
    said = []
    with pytest.raises(durability.CheckpointError):
        durability.intact_checkpoint(tmp_path / "checkpoints", check=check, log=said.append)
    assert said and "PWNED" in said[0] and "\x1b" not in said[0], said


def test_planted_plan_pin_is_inert_in_the_refusal(tmp_path):
    "A started plan whose plan.json pins an escape sequence as its commit: the refusal to add runs escapes it."
    from sapo_nb.experiments import PlanCommitError, resolve_plan, run_plan
    plan_json = Path(resolve_plan("mini", tmp_path / "runs")["dir"]) / "plan.json"
    plan_json.parent.mkdir(parents=True)
    plan_json.write_text(json.dumps(dict(name="mini", library=dict(commit=ESC, dirty=False), started=True)))
    with pytest.raises(PlanCommitError) as e: run_plan("mini", tmp_path / "runs", seeds=[0], log=lambda s: None)
    assert "PWNED" in str(e.value) and "\x1b" not in str(e.value), repr(str(e.value))


def test_planted_metric_names_and_config_never_reach_a_tracker(tmp_path, monkeypatch):
    """A row whose keys are escape sequences or markup, and a config.json with a field that would close TensorBoard's
    code fence: the tracker gets neither."""
    from sapo_nb.trackers import TRACKER_CLASSES, Tracker, export_run, flatten_row
    names = flatten_row(row("node-0", 0, peers={f"<img src=x>{ESC}": dict(taken=1), "alice.0123abcd": dict(taken=2)},
                            eval_by_task={"basic_arithmetic/0": 0.5}))
    assert {"peers/alice.0123abcd/taken", "eval_by_task/basic_arithmetic/0"} <= set(names), names  # plain: kept
    assert not any("<" in n or "\x1b" in n for n in names), names
    got = {}
    class Keep(Tracker):
        kind = "tensorboard"
        def __init__(self, directory, project, name, config, log):
            super().__init__(log); self.where = str(directory); got[name] = config
        def write(self, step, scalars, walltime): pass
    monkeypatch.setitem(TRACKER_CLASSES, "tensorboard", Keep)
    run = tmp_path / "exp"
    for node, config in (("node-0", {"node_id": "node-0", "rounds": 3}),
                         ("node-1", {"node_id": "node-1", "```\n[x](https://evil)": 1})):
        write_rows(run, node, [row(node, 0)])
        (run / "logs" / node / "config.json").write_text(json.dumps(config))
    export_run(run, "tensorboard", out=tmp_path / "tb", log=lambda s: None)
    assert got == {"node-0": {"node_id": "node-0", "rounds": 3}, "node-1": None}  # the unknown field: no config
