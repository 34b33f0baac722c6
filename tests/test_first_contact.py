"""A new user's first run: what it leaves on disk, how its processes share the cores, and what it says at the end.

Each test names one thing a first-time user relies on: a finished `sapo swarm` keeps each node's trained weights and
no more, a pool on Google Drive's mount (no hard links) opens, a stopped one still resumes, `sapo clean` frees what
a run holds, process mode does not oversubscribe the cores, `sapo status` calls a finished node `done`, the platform
limits are said in words, and the README's test command is the one CI runs. Every test runs the tiny random model in
seconds.
"""
import json, os, re
from pathlib import Path

import pytest

from conftest import learning_node, sapo_cli as sapo, tiny_config as tiny
import torch

from sapo_nb import node as node_module, panel
from sapo_nb.monitor import SwarmWatcher, swarm_status, format_status
from sapo_nb.core import checkpoint_dir, metrics_path, read_jsonl
from sapo_nb.node import SwarmNode, node_random_state
from sapo_nb.generation import choose_backend
from sapo_nb.durability import NodeLease, CheckpointError
from sapo_nb.swarm import ProcessSwarm, UnsupportedPlatform, node_configs, stop_swarm, thread_share, set_threads
from sapo_nb.transport import MemoryTransport

REPO = Path(__file__).resolve().parents[1]


pytestmark = pytest.mark.usefixtures("private_keys")


def run_node(cfg):
    n = SwarmNode(cfg, transport=MemoryTransport(), log=lambda *_: None)
    n.run()
    return n


TINY_SWARM = ["swarm", "--model", "tiny", "--nodes", "2", "--rounds", "3", "--checkpoint-every", "1", "-G", "3",
              "--max-new-tokens", "6", "--eval-questions", "4"]


# --- footprint ------------------------------------------------------------------------------------------------------

def test_node_keeps_one_checkpoint(tmp_path):
    "A node checkpointing every round keeps only its newest checkpoint (the embedded model's is 1.73 GB)."
    cfg = tiny(tmp_path)
    run_node(cfg)
    assert sorted(p.name for p in checkpoint_dir(cfg).iterdir()) == ["round_2"]


@pytest.mark.parametrize("adapter,compute_dtype", [("none", "float32"), ("none", "bfloat16"), ("lora", "bfloat16")])
def test_resume_after_keep_one_is_exact(tmp_path, adapter, compute_dtype):
    """With one checkpoint kept, a node stopped after round 2 and resumed goes on as one that never stopped: the same
    rows, rewards and losses, and the same weights bit for bit, under bfloat16 autocast as in float32 (the first step
    of a resumed model probes prompt sharing, and the probe must leave nothing in autocast's cast cache that would
    change the order in which the tied embedding's gradients are summed, nor draw dropout masks from the random state
    the checkpoint restored). The runs start from other random states of the process: a node draws from its own. A
    resumed LoRA node, whose adapter is no longer zero, still samples with the CPU decoding loop over its base narrowed
    to bfloat16."""
    def run_learning(cfg):
        torch.manual_seed(ord(str(cfg.root)[-1]))  # the two runs start from other process states: nodes draw their own
        process = torch.get_rng_state()
        n = learning_node(cfg, transport=MemoryTransport(), log=lambda *_: None)
        n.run()
        assert torch.equal(torch.get_rng_state(), process)  # ... and leave the process's alone
        assert adapter != "lora" or not torch.equal(n.random_state, node_random_state(cfg))  # masks were drawn
        return n
    lora = dict(lora_dropout=0.1) if adapter == "lora" else {}  # masks drawn from the random state the checkpoint keeps
    straight = tiny(tmp_path / "a", rounds=5, compute_dtype=compute_dtype, adapter=adapter, **lora)
    stopped = tiny(tmp_path / "b", rounds=3, compute_dtype=compute_dtype, adapter=adapter, **lora)
    a = run_learning(straight)
    run_learning(stopped)
    b = run_learning(stopped.replace(rounds=5))
    assert a.policy.compute_dtype == getattr(torch, compute_dtype)
    rows, straight_rows = read_jsonl(metrics_path(stopped)), read_jsonl(metrics_path(straight))
    assert [r["round"] for r in rows] == list(range(5)) and sum(r["tokens_trained"] for r in rows[3:]) > 0
    same = ("reward_local", "loss", "tokens_generated", "tokens_trained", "grad_norm")
    assert [[r.get(k) for k in same] for r in rows] == [[r.get(k) for k in same] for r in straight_rows]
    sa, sb = a.policy.state_dict(), b.policy.state_dict()  # a LoRA node's: its adapter
    assert sa and sa.keys() == sb.keys()
    assert [name for name, x in sa.items() if not torch.equal(x, sb[name])] == []
    assert choose_backend(b.policy.sampler()) == "loop"


def test_killed_save_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    "A save killed half-way (the process dies while writing): the previous checkpoint is still there and resumes."
    cfg = tiny(tmp_path, rounds=2)
    run_node(cfg)
    real = torch.save
    def killed(obj, f, *a, **kw):
        real(obj, f, *a, **kw); raise KeyboardInterrupt  # dies after the optimizer file, before the marker
    monkeypatch.setattr(torch, "save", killed)
    with pytest.raises(KeyboardInterrupt): run_node(cfg.replace(rounds=3))
    monkeypatch.setattr(torch, "save", real)
    assert sorted(p.name for p in checkpoint_dir(cfg).glob("round_*")) == ["round_1"]
    n = SwarmNode(cfg.replace(rounds=3), transport=MemoryTransport(), log=lambda *_: None)
    assert n.resume() == 2
    n.close()


def test_save_that_does_not_verify_keeps_the_older(tmp_path, monkeypatch):
    "A new checkpoint whose files do not match their marker once in place: the save fails, the older checkpoint stays."
    cfg = tiny(tmp_path, rounds=2)
    run_node(cfg)
    real = os.replace
    def cut_short(src, dst, **dir_fds):  # renames go through folder descriptors: `dst` is a name in the checkpoint folder
        real(src, dst, **dir_fds)
        if dst == "round_2": (checkpoint_dir(cfg) / dst / "model.safetensors").write_bytes(b"")
    monkeypatch.setattr(node_module.os, "replace", cut_short)
    with pytest.raises(CheckpointError, match="model.safetensors does not match its checksum"): run_node(cfg.replace(rounds=3))
    assert sorted(p.name for p in checkpoint_dir(cfg).glob("round_*")) == ["round_1"]


def test_finished_swarm_keeps_only_each_nodes_newest_checkpoint(tmp_path):
    """`sapo swarm` that finishes keeps each node's newest checkpoint (its trained weights, which save-model writes
    out) and removes the older ones, and prints the disk it used and freed."""
    code, out, err = sapo(*TINY_SWARM, "--root", str(tmp_path))
    assert code == 0, err
    exp = tmp_path / "sapo"
    ck = exp / "checkpoints"
    assert sorted(str(p.relative_to(ck)) for p in ck.glob("*/*")) == ["node-0/round_2", "node-1/round_2"]
    assert [len(read_jsonl(exp / "logs" / n / "metrics.jsonl")) for n in ("node-0", "node-1")] == [3, 3]
    assert re.search(rf"disk: [\d.]+ [kMG]?B under {re.escape(str(exp))} at the end of the run; older checkpoints removed \([\d.]+ [kM]B\)", out), out
    assert "each node's newest checkpoint is kept" in out
    code, out, err = sapo("save-model", str(exp), "--node", "node-0", "--to", str(tmp_path / "mine"))
    assert code == 0 and (tmp_path / "mine" / "config.json").exists(), err


def test_keep_checkpoints_flag(tmp_path):
    "`--keep-checkpoints` keeps a finished run's checkpoints (the bare command's LoRA nodes: two each) and says how to remove them."
    code, out, err = sapo(*TINY_SWARM, "--root", str(tmp_path), "--keep-checkpoints")
    assert code == 0, err
    ck = tmp_path / "sapo" / "checkpoints"
    assert sorted(str(p.relative_to(ck)) for p in ck.glob("*/round_*")) == [f"node-{i}/round_{r}" for i in (0, 1) for r in (1, 2)]
    assert "checkpoints kept (sapo clean" in out


def test_stopped_swarm_keeps_checkpoints_to_resume(tmp_path):
    "A swarm whose node failed part-way keeps the checkpoints and says that the same command resumes it."
    (tmp_path / "sapo" / "logs" / "node-1" / "metrics.jsonl").mkdir(parents=True)  # node-1 stops at its first row
    code, out, err = sapo(*TINY_SWARM, "--root", str(tmp_path), "--mode", "process")
    assert code == 1 and "node-1" in err
    assert (tmp_path / "sapo" / "checkpoints" / "node-0" / "round_2" / "complete").exists()
    assert ("checkpoints kept: the run stopped before its last round, and the same command resumes it once what "
            "stopped it is mended") in out, out
    assert re.search(r"node-1 stopped: exit code \d+; its output is in \S+node-1/node\.log", out), out


def test_a_swarm_whose_nodes_fail_at_once_says_why_and_offers_nothing_to_read(tmp_path, monkeypatch):
    "Nodes that fail before their first row: the ending gives each one's error, and no report or comparison to run."
    def broken(self, *a, **k): raise RuntimeError("The size of tensor a (8) must match the size of tensor b (2)")
    monkeypatch.setattr(SwarmNode, "step", broken)
    code, out, err = sapo(*TINY_SWARM, "--root", str(tmp_path))
    assert code == 1 and "nodes failed: node-0, node-1" in err, err
    for node in ("node-0", "node-1"):
        assert f"{node} stopped: RuntimeError: The size of tensor a (8) must match the size of tensor b (2)" in out, out
    assert "sapo report" not in out and "sapo compare" not in out, out


def test_clean_frees_checkpoints_and_keeps_metrics(tmp_path):
    "`sapo clean` removes a run's checkpoints, keeps its metrics, and prints what it freed."
    sapo(*TINY_SWARM, "--root", str(tmp_path), "--keep-checkpoints")
    code, out, _ = sapo("clean", "--root", str(tmp_path), "--experiment", "sapo")
    assert code == 0
    assert not (tmp_path / "sapo" / "checkpoints").exists()
    assert len(read_jsonl(tmp_path / "sapo" / "logs" / "node-0" / "metrics.jsonl")) == 3
    assert re.search(r"node-0: [\d.]+ [kM]B of checkpoints removed", out) and re.search(r"freed [\d.]+ [kM]B; [\d.]+ [kM]?B left under", out), out
    # what a user can no longer do, said by clean and by the same command run again (which offered a larger --rounds)
    assert "note: node-0, node-1 can no longer go on with a larger --rounds" in out, out
    code, out, _ = sapo(*TINY_SWARM, "--root", str(tmp_path))
    assert code == 0 and out.count("its checkpoints were removed: a larger --rounds starts over from round 0") == 2, out
    assert sapo("clean", "--root", str(tmp_path), "--experiment", "nothing")[0] == 2


def test_clean_leaves_a_running_node_alone(tmp_path):
    "`sapo clean` on a folder whose node still runs keeps that node's checkpoint and exits 1."
    cfg = tiny(tmp_path, transport="folder")
    run_node(cfg)
    held = NodeLease(cfg).acquire()
    try:
        code, out, _ = sapo("clean", "--root", str(tmp_path))
    finally: held.release()
    assert code == 1 and "node-0: checkpoints kept, the node runs" in out, out
    assert (checkpoint_dir(cfg) / "round_2").is_dir()


# --- cores ----------------------------------------------------------------------------------------------------------

def test_process_nodes_get_their_share_of_cores(tmp_path):
    "Process mode gives each node max(1, cores // nodes) threads: the node says so, and its environment caps OpenMP/MKL."
    assert [thread_share(n, cores=2) for n in (1, 2, 3)] == [2, 1, 1] and thread_share(4, cores=16) == 4
    cfgs = node_configs(tiny(tmp_path, transport="folder", checkpoint_every=0, rounds=1), 2)
    sw = ProcessSwarm(cfgs, threads=1).start()
    assert sw.wait(log=lambda *_: None, poll=0.2) == {"node-0": 0, "node-1": 0}
    for n in ("node-0", "node-1"):
        assert "1 CPU thread" in (tmp_path / "sapo" / "logs" / n / "node.log").read_text()
    assert all(p.args[-4:-2] == ["--threads", "1"] for p in sw.procs.values())


def test_node_threads_flag_sets_torch_threads(tmp_path, monkeypatch):
    "`set_threads(n)` (what `sapo node --threads n` calls) sets torch's threads and the OpenMP/MKL variables."
    monkeypatch.setenv("OMP_NUM_THREADS", "7"); monkeypatch.setenv("MKL_NUM_THREADS", "7")
    before = torch.get_num_threads()
    try:
        set_threads(1)
        assert (torch.get_num_threads(), os.environ["OMP_NUM_THREADS"], os.environ["MKL_NUM_THREADS"]) == (1, "1", "1")
    finally: torch.set_num_threads(before)
    with pytest.raises(SystemExit): sapo("node", "--threads", "0", "--model", "tiny", "--root", str(tmp_path))


# --- the ending -----------------------------------------------------------------------------------------------------

def test_ending_says_what_happened(tmp_path):
    "The end of `sapo swarm`: both nodes done, rewards first -> last, held-out accuracy before -> after, the report command."
    code, out, err = sapo(*TINY_SWARM, "--root", str(tmp_path))
    assert code == 0, err
    ending = out[out.index("finished in"):]
    assert len(re.findall(r"node-\d +3/3 .* done", ending)) == 2, ending
    lines = [l for l in ending.splitlines() if re.match(r" +node-\d +1 -> 3 ", l)]
    assert len(lines) == 2 and all(l.count("->") == 4 and "(after round 3)" in l for l in lines), ending
    assert f"report:  sapo report {tmp_path / 'sapo'}" in ending


def test_status_shows_a_finished_node_as_done(tmp_path):
    "A node that logged its last round reads `done` in `sapo status` and the panel, however long ago; an unfinished one `stopped` (no process holds its lease)."
    exp = tmp_path / "exp"
    row = lambda r, node: {"round": r, "node_id": node, "I": 2, "J": 0, "reward_train": 0.5, "pool_selected": 0,
                           "pool_available": 0, "seconds": {"total": 2.0}, "time": 1000.0 + r}
    for node, rounds in (("node-0", 3), ("node-1", 2)):
        p = exp / "logs" / node / "metrics.jsonl"; p.parent.mkdir(parents=True)
        p.write_text("".join(json.dumps(row(r, node)) + "\n" for r in range(rounds)))
    (exp / "config.json").write_text(json.dumps({"nodes": [dict(node_id="node-0", rounds=3), dict(node_id="node-1", rounds=3)]}))
    st = swarm_status(tmp_path, "exp", now=10**6)
    assert [(s["node"], s["state"]) for s in st] == [("node-0", "done"), ("node-1", "stopped")]
    assert re.search(r"node-0 +3/3 .* done", format_status(st))
    w = SwarmWatcher(tmp_path, "exp"); w.refresh()
    assert [r["state"] for r in w.status(now=10**6)] == ["done", "stopped"]
    for junk in ("[" * 100_000, json.dumps({"nodes": [dict(node_id="node-0", rounds="3")]}), "{torn"):  # untrusted: never a crash
        (exp / "config.json").write_text(junk)
        assert [s["state"] for s in swarm_status(tmp_path, "exp", now=10**6)] == ["stopped", "stopped"]


# --- platforms ------------------------------------------------------------------------------------------------------

def test_process_mode_without_killpg_says_so(tmp_path, monkeypatch):
    "Where `os.killpg` does not exist, process mode and the panel's stop fail with a message, not an AttributeError."
    monkeypatch.delattr(os, "killpg")
    with pytest.raises(UnsupportedPlatform, match="supported: Linux, macOS, WSL"):
        ProcessSwarm(node_configs(tiny(tmp_path, transport="folder"), 2))
    code, _, err = sapo(*TINY_SWARM, "--root", str(tmp_path), "--mode", "process")
    assert code == 2 and "process mode needs POSIX process groups" in err and "--mode inline" in err, err
    assert not (tmp_path / "sapo" / "logs").exists()  # nothing started
    with pytest.raises(UnsupportedPlatform): stop_swarm(tmp_path / "sapo")
    p = panel.SwarmPanel(root=str(tmp_path), experiment="win", interval=None, model="tiny", nodes=2, rounds=3)
    assert p.launch() is None and "supported: Linux, macOS, WSL" in p.message.value


def test_panel_launch_warns_when_J_cannot_be_filled(tmp_path, monkeypatch):
    "J larger than the other nodes publish is a smaller batch, not more sharing: the panel says so as `sapo swarm` does."
    from types import SimpleNamespace
    started = []
    def launch(cfgs):
        started.append(cfgs)
        return SimpleNamespace(procs={c.node_id: SimpleNamespace(pid=100 + i) for i, c in enumerate(cfgs)})
    monkeypatch.setattr(panel, "launch_swarm", launch)
    p = panel.SwarmPanel(root=str(tmp_path), experiment="short", interval=None, model="tiny", nodes=2, rounds=3)
    p.set_values(I=1, J=4)
    assert p.launch() is not None and len(started) == 1
    assert "launched 2 nodes" in p.message.value and "node-0 wants J=4, the others publish 1" in p.message.value
    assert "#9a6700" in p.message.value  # a warning's colour, not the green of all's well
    p.set_values(I=2, J=2)
    p.launch()
    assert "warning" not in p.message.value and "#1a7f37" in p.message.value


def test_a_typo_in_adapter_or_model_is_one_line_not_a_traceback(tmp_path, monkeypatch):
    "`--adapter LoRA` (a preset's rate per adapter was looked up first: a KeyError) and an unknown model in demo/node."
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, _, err = sapo("swarm", "--adapter", "LoRA", "--root", str(tmp_path), "--rounds", "1")
    assert code == 2 and err.strip() == "sapo: SAPOConfig.adapter: got 'LoRA'; allowed: none, lora", err
    for command in (["demo"], ["node", "--root", str(tmp_path)]):
        code, _, err = sapo(*command, "--model", "no-such-model")
        assert code == 2 and err.startswith("sapo: model 'no-such-model' not found") and "Traceback" not in err, err


# --- the README -----------------------------------------------------------------------------------------------------

def test_readme_test_command_installs_what_ci_installs():
    "The README's test command installs the packages CI installs, in the same order, and runs the same script."
    ci = (REPO / ".ci" / "run").read_text()
    installs = [re.sub(r"^python -m pip install -q ", "pip install ", l.strip()) for l in ci.splitlines()
                if l.strip().startswith("python -m pip install -q ") and "--upgrade pip" not in l]
    assert installs and "bash scripts/test.sh" in ci
    readme = (REPO / "README.md").read_text()
    assert " && ".join(installs + ["bash scripts/test.sh"]) in readme, installs
    assert "Soft Adaptive Policy Optimization" in readme and all(p in readme for p in ("Linux", "macOS", "WSL"))


def test_a_pool_on_a_file_system_without_hard_links_works(tmp_path, monkeypatch):
    """Google Drive's mount in Colab has no hard links (link() says EPERM): a node still gets its key, the pool its
    swarm id, and two nodes exchange rollouts."""
    import errno
    from sapo_nb.core import Group
    from sapo_nb.transport import FolderTransport
    def no_links(*a, **k): raise OSError(errno.EPERM, "Operation not permitted")
    monkeypatch.setattr(os, "link", no_links)
    monkeypatch.setenv("SAPO_KEY_DIR", str(tmp_path / "keys"))  # a fresh folder: the keys are created here
    a, b = (FolderTransport(tmp_path / "drive", "exp") for _ in range(2))
    assert a.swarm == b.swarm and len(a.swarm) == 32
    g = Group(task="basic_arithmetic", item=dict(component=0, seed=1, index=0), question="q",
              completions=["1", "2"], truncated=[False, False])
    a.publish(0, "node-0", [g])
    assert [x.completions for x in b.collect(0, exclude="node-1")] == [["1", "2"]]
    assert any(p.name.startswith("node-0") for p in (tmp_path / "keys").iterdir())  # its key, created once


def test_windows_itself_is_refused_at_import_with_a_pointer_to_wsl():
    "Where the OS has no folder descriptors (Windows), importing the library says to use WSL, not an AttributeError."
    import subprocess, sys
    code = "import os; del os.O_DIRECTORY; import sapo_nb.cli"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert r.returncode != 0 and "ImportError: sapo_nb runs on Linux and macOS, and on Windows under WSL" in r.stderr, r.stderr
