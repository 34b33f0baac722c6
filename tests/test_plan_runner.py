"""The background runner (bench/plan_in_background.py): the pins of a plan hold where its run folder is new or stale, a
failed run stops it, and a pre-registered verdict stops it only where the plan says.

A plan spans sessions and machines: the run folder (`--root`) may be empty on the next machine, or hold a record of
an earlier call that never ran a round, while the committed `plan.json` beside the results says which library commit
and machine type ran the plan's first rounds. The runner must refuse runs of another commit or machine type there, as
it would on the machine that started the plan, and every run it lands must leave a record that says the plan started.
No model is trained here: the run step is replaced by one that records what got past the pins."""
import json, subprocess, types
from pathlib import Path

import pytest

from sapo_nb import experiments
from sapo_nb.core import machine_type, provenance
from sapo_nb.experiments import PlanCommitError, PlanMachineError, resolve_plan

ROOT = Path(__file__).resolve().parents[1]
OTHER_MACHINE = {**machine_type(), "cpu_features": ["a feature no CPU has"]}


def _this_library():
    here = provenance()
    return dict(commit=here["commit"], dirty=here["dirty"])


def _committed_plan(data, **record):
    "A committed record of the `mini` plan, as a runner lands it (or as an older runner did: no machine, no started)."
    path = Path(resolve_plan("mini", data)["dir"]) / "plan.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dict(name="mini", **record)))
    return path


def _landed_metrics(data):
    "One landed run's metrics under the committed results: the plan has started, whatever its record says."
    m = Path(resolve_plan("mini", data)["dir"]) / "4-0" / "seed_0" / "logs" / "node-0" / "metrics.jsonl"
    m.parent.mkdir(parents=True)
    m.write_text('{"round": 0}\n')


def _runner(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import plan_in_background
    ran = []
    monkeypatch.setattr(experiments, "_run_one", lambda run, *a, **k: (ran.append(run["dir"]), ("failed", "stub"))[1])
    return plan_in_background, ran


def _main(runner, tmp_path, *extra, seeds=("0",)):
    return runner.main(["mini", "--root", str(tmp_path / "runs"), "--data", str(tmp_path / "data"), "--repo",
                        str(tmp_path), "--seeds", *seeds, *extra])


def test_fresh_run_folder_refuses_another_machine_type(tmp_path, monkeypatch):
    _committed_plan(tmp_path / "data", library=_this_library(), machine=OTHER_MACHINE, started=True)
    runner, ran = _runner(monkeypatch)
    with pytest.raises(PlanMachineError, match="pinned to machine type"):
        _main(runner, tmp_path)
    assert ran == []  # refused before any run started
    assert json.loads((tmp_path / "runs" / "mini" / "plan.json").read_text())["machine"] == OTHER_MACHINE


def test_fresh_run_folder_adds_runs_when_told(tmp_path, monkeypatch):
    _committed_plan(tmp_path / "data", library=_this_library(), machine=OTHER_MACHINE, started=True)
    runner, ran = _runner(monkeypatch)
    _main(runner, tmp_path, "--other-machine")
    assert len(ran) == 1  # got past the pins (the stub run fails, which stops the runner)
    assert json.loads((tmp_path / "runs" / "mini" / "plan.json").read_text())["machine"] == OTHER_MACHINE  # kept


def test_an_older_record_with_landed_runs_keeps_its_commit(tmp_path, monkeypatch):
    "A record written before `started` existed: the landed metrics say the plan started."
    _committed_plan(tmp_path / "data", library=dict(commit="b" * 40, dirty=False))
    _landed_metrics(tmp_path / "data")
    runner, ran = _runner(monkeypatch)
    with pytest.raises(PlanCommitError, match="pinned to library commit"):
        _main(runner, tmp_path)
    assert ran == []
    _main(runner, tmp_path, "--other-commit")
    assert len(ran) == 1


def test_a_stale_record_in_the_run_folder_does_not_override_the_committed_pins(tmp_path, monkeypatch):
    "An earlier call here wrote a record that never ran a round, pinned to this machine: the committed pins win."
    _committed_plan(tmp_path / "data", library=_this_library(), machine=OTHER_MACHINE, started=True)
    stale = tmp_path / "runs" / "mini" / "plan.json"
    stale.parent.mkdir(parents=True)
    stale.write_text(json.dumps(dict(name="mini", library=_this_library(), machine=machine_type(), started=False)))
    runner, ran = _runner(monkeypatch)
    with pytest.raises(PlanMachineError):
        _main(runner, tmp_path)
    assert ran == []


def test_a_stale_record_in_the_run_folder_does_not_drop_the_committed_runs(tmp_path, monkeypatch):
    "Runs landed from another machine since this folder's record was written stay in the plan's record."
    landed = dict(config="4-0", seed=1, nodes=2, dir="/elsewhere/mini/4-0/seed_1")
    _committed_plan(tmp_path / "data", library=_this_library(), machine=machine_type(), started=True, seeds=[1],
                    only=[], runs=[landed])
    stale = tmp_path / "runs" / "mini" / "plan.json"
    stale.parent.mkdir(parents=True)
    stale.write_text(json.dumps(dict(name="mini", library=_this_library(), machine=machine_type(), started=True,
                                     seeds=[5], only=[], runs=[])))
    runner, ran = _runner(monkeypatch)
    _main(runner, tmp_path)
    record = json.loads(stale.read_text())
    assert record["seeds"] == [0, 1] and landed in record["runs"], record


def test_a_plan_that_has_not_started_takes_this_machine(tmp_path, monkeypatch):
    "A committed record of a plan that never ran a round (nothing landed) pins nothing: this machine runs it."
    _committed_plan(tmp_path / "data", library=_this_library(), machine=OTHER_MACHINE, started=False)
    runner, ran = _runner(monkeypatch)
    _main(runner, tmp_path)
    assert len(ran) == 1
    assert json.loads((tmp_path / "runs" / "mini" / "plan.json").read_text())["machine"]["cpu_features"] == \
        machine_type()["cpu_features"]


def test_landing_a_run_records_that_the_plan_started(tmp_path, monkeypatch):
    for k in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{k}_NAME", "sapo"); monkeypatch.setenv(f"GIT_{k}_EMAIL", "sapo@localhost")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    runner, _ = _runner(monkeypatch)
    a = types.SimpleNamespace(plan="mini", root=str(tmp_path / "runs"), data=str(tmp_path / "data"))
    resolved, committed = resolve_plan("mini", a.root, seeds=[0]), resolve_plan("mini", a.data, seeds=[0])
    run, saved = resolved["runs"][0], committed["runs"][0]
    src = Path(run["dir"])
    (src / "logs" / "node-0").mkdir(parents=True)
    (src / "config.json").write_text("{}")
    (src / "logs" / "node-0" / "metrics.jsonl").write_text('{"round": 0}\n')
    (Path(resolved["dir"]) / "plan.json").write_text(json.dumps(dict(name="mini", library=_this_library(),
                                                                      machine=machine_type(), started=False)))
    assert runner.land(run, saved, a, committed, tmp_path, "a test run")
    landed = json.loads((Path(committed["dir"]) / "plan.json").read_text())
    assert landed["started"] is True and landed["machine"] == machine_type()
    assert "plan.json" in subprocess.run(["git", "-C", str(tmp_path), "show", "--name-only"], capture_output=True,
                                         text=True).stdout


def test_a_failed_run_stops_the_runner_before_the_next_seed(tmp_path, monkeypatch):
    "A run that fails would leave a hole in the pairs if the next seed went on: the runner stops, exit status 1."
    runner, ran = _runner(monkeypatch)
    assert _main(runner, tmp_path, seeds=("0", "1")) == 1
    assert len(ran) == 1


def _verdict(monkeypatch, tmp_path, look, verdict):
    "Runs have landed (a results folder) and the pre-registered rule reads them as `verdict` at `look`."
    from sapo_nb import analysis
    (tmp_path / "data" / "mini").mkdir(parents=True)
    monkeypatch.setattr(analysis, "load_runs", lambda *a, **k: None)
    monkeypatch.setattr(analysis, "plan_verdict", lambda *a, **k: dict(look=look, verdict=verdict, sentence=verdict))


def test_a_crossing_at_the_interim_look_stops_the_plan_even_on_a_restart(tmp_path, monkeypatch):
    "The boundary was crossed by a run that landed before a restart: no further run starts."
    runner, ran = _runner(monkeypatch)
    _verdict(monkeypatch, tmp_path, "interim", "helps")
    assert not _main(runner, tmp_path, "--stop-on-verdict")
    assert ran == []


def test_a_crossing_at_the_final_look_lets_the_last_seed_finish(tmp_path, monkeypatch):
    "The final look is reached before the seed's last arm runs: the control arm of that seed still runs."
    runner, ran = _runner(monkeypatch)
    _verdict(monkeypatch, tmp_path, "final", "hurts")
    _main(runner, tmp_path, "--stop-on-verdict")
    assert len(ran) == 1


def test_a_plan_with_nothing_landed_starts_under_stop_on_verdict(tmp_path, monkeypatch):
    "Before the first run lands there is no results folder to read a verdict from: the first run starts all the same."
    runner, ran = _runner(monkeypatch)
    assert _main(runner, tmp_path, "--stop-on-verdict") == 1  # the stub run fails
    assert len(ran) == 1
