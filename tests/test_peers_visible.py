"""Peers you can see: per node and per peer, what was offered, taken and refused (by reason), in the metrics,
`sapo status`, the panel and the report. A three-node swarm runs beside a peer that signs junk every round and a name
that files unreadable junk every round; their refusals and the honest peers' contributions must show in each view,
and only the peer that signed its junk is flagged (anyone can file unreadable bytes under any name). Tiny model, a
few seconds.
"""
import json

import pytest

from conftest import learning_node, sapo_cli
from sapo_nb.config import SAPOConfig
from sapo_nb.core import metrics_path, read_jsonl
from sapo_nb.swarm import node_configs, run_inline

pytestmark = pytest.mark.usefixtures("private_keys")

JUNK = "junk." + "0123456789abcdef0123"  # a well-formed wire id; its files are not JSON


def signed_junk(root, key_dir, rounds:int, G:int) -> str:
    "Rollouts of `spam` for every round, signed with its own key, whose one group has an empty question; its wire id."
    from sapo_nb.core import Group
    from sapo_nb.identity import sign_rollout
    from sapo_nb.transport import FolderTransport, encode_rollout
    spam = FolderTransport(root, "exp", key_dir=key_dir)
    g = Group(task="basic_arithmetic", item=dict(component=0, seed=1, index=0), question="q",
              completions=[str(k) for k in range(G)], truncated=[False] * G)
    for r in range(rounds):
        obj = json.loads(spam.encode(r, "spam", [g]))
        obj.pop("signature"); obj.pop("public_key")
        obj["groups"][0]["question"] = ""
        (spam.round_dir(r) / f"{spam.own_id('spam')}.json").write_bytes(
            encode_rollout(sign_rollout(obj, spam._signing_key("spam"))))
    return spam.own_id("spam")


@pytest.fixture(scope="module")
def swarm(tmp_path_factory):
    mp = pytest.MonkeyPatch(); mp.setenv("SAPO_KEY_DIR", str(tmp_path_factory.mktemp("keys")))
    root = tmp_path_factory.mktemp("peers")
    cfg = SAPOConfig(model="tiny", mix="quick", root=str(root), experiment="exp", local_questions=2, external_questions=2,
                     completions_per_question=3, max_new_tokens=6, rounds=6, eval_every=0, checkpoint_every=0,
                     learning_rate=1e-3, temperature=1.5)
    for r in range(cfg.rounds):  # the junk peer's file of every round, there before anyone collects
        d = root / "exp" / "rollouts" / f"round_{r}"; d.mkdir(parents=True); (d / f"{JUNK}.json").write_bytes(b"not json")
    spam = signed_junk(root, tmp_path_factory.mktemp("spam-keys"), cfg.rounds, cfg.completions_per_question)
    # a reward with spread: honest groups get taken
    assert set(run_inline(node_configs(cfg, 3), log=lambda *_: None, build=learning_node).values()) == {"done"}
    yield root, cfg, spam
    mp.undo()


def test_metrics_rows_account_for_every_peer(swarm):
    "Each row names every sender: the junk peer's file refused as bad_json, the honest peers' groups offered and taken."
    root, cfg, spam = swarm
    rows = read_jsonl(metrics_path(cfg.replace(node_id="node-0")))
    assert all(r["peers"][JUNK] == dict(offered=0, taken=0, refused={"bad_json": 1}) for r in rows)
    assert all(r["peers"][spam] == dict(offered=0, taken=0, refused={"bad_question": 1}) for r in rows)
    honest = [p for p in rows[-1]["peers"] if p.startswith(("node-1.", "node-2."))]
    assert len(honest) == 2 and sum(r["peers"][p]["offered"] for r in rows for p in honest) > 0
    assert sum(a["taken"] for r in rows for a in r["peers"].values()) == sum(r["pool_selected"] for r in rows)


def test_status_shows_refusals_by_reason_and_flags_the_junk_peer(swarm):
    """`sapo status`: a block per node, the signed junk flagged, the unreadable files under `junk` counted
    (`bad_json 6`) but not flagged, the honest peers with their share."""
    root, _, spam = swarm
    code, out, err = sapo_cli("status", "--root", root, "--experiment", "exp")
    assert code == 0 and out.count("peers of node-") == 3
    junk = [l for l in out.splitlines() if l.strip().startswith("junk.012345")]
    assert len(junk) == 3 and all("bad_json 6" in l and "everything refused" not in l for l in junk)
    signed = [l for l in out.splitlines() if l.strip().startswith(f"spam.{spam.rsplit('.', 1)[1][:6]}")]
    assert len(signed) == 3 and all("bad_question 6" in l and "everything refused in its last 6 rounds" in l
                                    for l in signed), out
    honest = [l for l in out.splitlines() if l.strip().startswith(("node-1.", "node-2.")) and "%" in l]
    assert honest and any(not l.split()[3].startswith("0%") for l in honest)


def test_panel_shows_a_peers_table_with_the_junk_peer_flagged(swarm):
    "The panel's peers table: a row per node and peer, the signed junk's rows marked flagged, every value escaped."
    from sapo_nb.panel import SwarmPanel
    root, _, _ = swarm
    p = SwarmPanel(root=str(root), experiment="exp", interval=None)
    p.refresh()
    html = p.peers.value
    assert html.count("class='sapo-flagged'") == 3 and html.count("junk.012345") == 3 and "bad_json 6" in html
    assert "node-1." in html and "node-2." in html
    p.close()


def test_report_has_a_peers_section(swarm):
    "`sapo report`: a Peers section with the junk peers and their refusals."
    root, _, _ = swarm
    code, out, err = sapo_cli("report", root / "exp", "--out", root / "report.html")
    page = (root / "report.html").read_text()
    assert code == 0 and "<h2>Peers</h2>" in page and "junk.012345" in page and "bad_json 6" in page


def test_nodes_of_one_process_on_the_memory_pool_each_count_their_refusals(tmp_path):
    """An inline swarm on the memory pool, beside the junk peer: each node reads the pool through a view of its own,
    so every node's rows show the junk it refused (with one view for the process, the first node to read a file kept
    its refusal, the others found it in the view's cache and showed none)."""
    cfg = SAPOConfig(model="tiny", mix="quick", root=str(tmp_path), experiment="exp", local_questions=2,
                     external_questions=2, completions_per_question=3, max_new_tokens=6, rounds=2, eval_every=0,
                     checkpoint_every=0, learning_rate=1e-3, transport="memory")
    def build(c, transport, **kw):
        for r in range(cfg.rounds): transport.store.setdefault(r, {})[JUNK] = b"not json"  # there before anyone reads
        return learning_node(c, transport=transport, **kw)
    assert set(run_inline(node_configs(cfg, 2), log=lambda *_: None, build=build).values()) == {"done"}
    for node in ("node-0", "node-1"):
        rows = read_jsonl(metrics_path(cfg.replace(node_id=node)))
        assert [r["peers"][JUNK]["refused"] for r in rows] == [{"bad_json": 1}] * 2
        assert [r["pool_rejected"] for r in rows] == [1, 2]  # its own count, not the process's
