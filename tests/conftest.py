"""pytest configuration and the helpers the tests in tests/ share.

`private_keys` gives a test its own key folder; `tiny_config` is a node of the tiny random model that runs a round in
milliseconds; `sapo_cli` runs the `sapo` command in this process. Tests import the helpers with
`from conftest import tiny_config, sapo_cli` and ask for the fixture by name.
"""
import contextlib, io

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a long end-to-end test (real processes, a browser); it runs by default and in CI")


@pytest.fixture
def private_keys(tmp_path_factory, monkeypatch):
    "This test's own key folder (never the user's real keys)."
    monkeypatch.setenv("SAPO_KEY_DIR", str(tmp_path_factory.mktemp("keys")))


def tiny_config(root, **kw):
    "A one-node config of the tiny random model on `quick`: 3 rounds, a checkpoint every round, memory transport."
    from sapo_nb.config import SAPOConfig
    return SAPOConfig(**{**dict(model="tiny", mix="quick", root=str(root), node_id="node-0", local_questions=2,
                                external_questions=0, completions_per_question=3, max_new_tokens=6, rounds=3,
                                checkpoint_every=1, learning_rate=1e-3, transport="memory", eval_every=0), **kw})


def sapo_cli(*args) -> tuple:
    "`sapo ARGS` in this process: (exit code, stdout, stderr)."
    from sapo_nb.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err): code = main([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()
