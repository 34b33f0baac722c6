"""pytest configuration and the helpers the tests in tests/ share.

`private_keys` gives a test its own key folder, `module_keys` one for all the tests of a module (hivemind nodes that
live across tests); `tiny_config` is a node of the tiny random model that runs a round in milliseconds; `sapo_cli`
runs the `sapo` command in this process; `learning_node` is a node whose reward has spread, so that its rounds train;
`LOOPBACK` keeps a hivemind node on 127.0.0.1 and `HIVEMIND_MISSING` says why hivemind tests skip. Tests import the
helpers with `from conftest import tiny_config, sapo_cli` and ask for the fixtures by name
(`pytestmark = pytest.mark.usefixtures("private_keys")`).
"""
import contextlib, io, os, shutil, tempfile

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a long end-to-end test (real processes, a browser); it runs by default and in CI")
    config.addinivalue_line("markers", "cuda: needs a CUDA GPU; skipped with the reason where there is none")


@pytest.fixture
def private_keys(tmp_path_factory, monkeypatch):
    "This test's own key folder (never the user's real keys); the folder."
    d = tmp_path_factory.mktemp("keys")
    monkeypatch.setenv("SAPO_KEY_DIR", str(d))
    return d


@pytest.fixture(scope="module")
def module_keys():
    "One key folder for every test of a module (never the user's real keys), removed after them; the folder."
    old, d = os.environ.get("SAPO_KEY_DIR"), tempfile.mkdtemp()
    os.environ["SAPO_KEY_DIR"] = d
    yield d
    if old is None: os.environ.pop("SAPO_KEY_DIR", None)
    else: os.environ["SAPO_KEY_DIR"] = old
    shutil.rmtree(d, ignore_errors=True)


LOOPBACK = dict(host_maddrs=["/ip4/127.0.0.1/tcp/0"], nat_port_map=False, auto_nat=False, use_relay=False, timeout=30)

try:
    import hivemind.dht.node  # noqa: F401  (the part HivemindTransport uses)
    HIVEMIND_MISSING = None
except Exception as e:  # ImportError, or a broken install
    HIVEMIND_MISSING = f"hivemind is not importable ({type(e).__name__}: {e}); install it with pip install 'sapo_nb[hivemind]'"


def tiny_config(root, **kw):
    "A one-node config of the tiny random model on `quick`: 3 rounds, a checkpoint every round, memory transport."
    from sapo_nb.config import SAPOConfig
    return SAPOConfig(**{**dict(model="tiny", mix="quick", root=str(root), node_id="node-0", local_questions=2,
                                external_questions=0, completions_per_question=3, max_new_tokens=6, rounds=3,
                                checkpoint_every=1, learning_rate=1e-3, transport="memory", eval_every=0), **kw})


def learning_node(cfg, **kw):
    """A `SwarmNode` of `cfg` (`kw` as `SwarmNode` takes them, or as `swarm.run_inline` builds one) whose reward has
    spread on the tiny model, which never answers right: odd lengths earn 1, so that its rounds train and weights move."""
    from sapo_nb.node import SwarmNode
    n = SwarmNode(cfg, **kw)
    n.reward_fn = lambda entry, completions: [float(len(c) % 2) for c in completions]
    return n


def sapo_cli(*args) -> tuple:
    "`sapo ARGS` in this process: (exit code, stdout, stderr)."
    from sapo_nb.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err): code = main([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()
