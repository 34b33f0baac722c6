"""The background runner (bench/plan_in_background.py) keeps a plan's pins where its run folder is new.

A plan spans sessions and machines: the run folder (`--root`) may be empty on the next machine, while the committed
`plan.json` beside the results says which library commit and machine type ran its first rounds. The runner must refuse
to add runs of another machine type there, as it would on the machine that started the plan."""
import json
from pathlib import Path

import pytest

from sapo_nb import experiments
from sapo_nb.core import machine_type, provenance
from sapo_nb.experiments import PlanMachineError, resolve_plan

ROOT = Path(__file__).resolve().parents[1]


def _committed_plan(data, machine):
    "A committed plan record of the `mini` plan whose first rounds ran on `machine`, with this library."
    here = provenance()
    path = Path(resolve_plan("mini", data)["dir"]) / "plan.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(dict(name="mini", library=dict(commit=here["commit"], dirty=here["dirty"]),
                                    machine=machine, started=True)))
    return path


def _runner(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import plan_in_background
    ran = []
    # nothing trains here: a run that gets past the pins is recorded instead
    monkeypatch.setattr(experiments, "_run_one", lambda run, *a, **k: (ran.append(run["dir"]), ("failed", "stub"))[1])
    return plan_in_background, ran


def test_fresh_run_folder_refuses_another_machine_type(tmp_path, monkeypatch):
    other = {**machine_type(), "cpu_features": ["a feature no CPU has"]}
    _committed_plan(tmp_path / "data", other)
    runner, ran = _runner(monkeypatch)
    with pytest.raises(PlanMachineError, match="pinned to machine type"):
        runner.main(["mini", "--root", str(tmp_path / "runs"), "--data", str(tmp_path / "data"), "--repo", str(tmp_path)])
    assert ran == []  # refused before any run started
    assert json.loads((tmp_path / "runs" / "mini" / "plan.json").read_text())["machine"] == other


def test_fresh_run_folder_adds_runs_when_told(tmp_path, monkeypatch):
    other = {**machine_type(), "cpu_features": ["a feature no CPU has"]}
    _committed_plan(tmp_path / "data", other)
    runner, ran = _runner(monkeypatch)
    runner.main(["mini", "--root", str(tmp_path / "runs"), "--data", str(tmp_path / "data"), "--repo", str(tmp_path),
                 "--seeds", "0", "--other-machine"])
    assert len(ran) == 4  # every configuration of seed 0 was tried
    assert json.loads((tmp_path / "runs" / "mini" / "plan.json").read_text())["machine"] == other  # the pin stays
