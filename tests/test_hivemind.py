"""Real hivemind DHT test: three nodes on loopback exchange rollouts; one leaves; the other two still exchange.

Skipped, with the import error as the reason, where hivemind (the optional extra `sapo_nb[hivemind]`) is not
importable. All traffic stays on 127.0.0.1: NAT port mapping, AutoNAT and relays are switched off.
"""
import time

import pytest

try:
    import hivemind.dht.node  # noqa: F401  (the part HivemindTransport uses)
    _SKIP = None
except Exception as e:  # ImportError, or a broken install
    _SKIP = f"hivemind is not importable ({type(e).__name__}: {e}); install it with pip install 'sapo_nb[hivemind]'"

pytestmark = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")

from sapo_nb.transport import HivemindTransport, PoolLimits, decode_rollout, encode_rollout, make_rollout  # noqa: E402

LOOPBACK = dict(host_maddrs=["/ip4/127.0.0.1/tcp/0"], nat_port_map=False, auto_nat=False, use_relay=False, timeout=30)


def groups(tag, n=2, G=4):
    return [dict(question=f"{tag} q{i}", answer=str(i), metadata={"source_dataset": "toy", "i": i},
                 completions=[f"{tag} says {k}" for k in range(G)], rewards=[float(k == i) for k in range(G)])
            for i in range(n)]


def poll(t, rnd, exclude, want, timeout=15.0):
    "Collect until the senders in `want` are all there (DHT stores are acknowledged, but allow for propagation)."
    deadline = time.time() + timeout
    while True:
        got = t.collect(rnd, exclude=exclude)
        if {g["node_id"] for g in got} >= set(want) or time.time() > deadline: return got
        time.sleep(0.2)


@pytest.fixture
def swarm():
    a = HivemindTransport("hm-test", **LOOPBACK)
    b = HivemindTransport("hm-test", initial_peers=a.maddrs, **LOOPBACK)
    c = HivemindTransport("hm-test", initial_peers=a.maddrs, **LOOPBACK)
    nodes = {"a": a, "b": b, "c": c}
    yield nodes
    for t in nodes.values(): t.close()


def test_three_nodes_exchange_and_survive_one_leaving(swarm):
    a, b, c = swarm["a"], swarm["b"], swarm["c"]
    for name, t in swarm.items(): assert t.publish(0, name, groups(name), model="tiny") > 0
    for name, t in swarm.items():
        got = poll(t, 0, name, set(swarm) - {name})
        assert sorted({g["node_id"] for g in got}) == sorted(set(swarm) - {name})
        assert len(got) == 4
        assert all(g["round"] == 0 and g["model"] == "tiny" and len(g["completions"]) == 4 for g in got)
        assert {g["question"] for g in got} == {f"{o} q{i}" for o in set(swarm) - {name} for i in range(2)}
    assert a.peers() == ["a", "b", "c"]
    assert all(t.rejected == 0 for t in swarm.values())

    a.close()  # the bootstrap node leaves
    b.publish(1, "b", groups("b1", n=1)); c.publish(1, "c", groups("c1", n=3))
    got_b, got_c = poll(b, 1, "b", {"c"}), poll(c, 1, "c", {"b"})
    assert [g["question"] for g in got_b] == ["c1 q0", "c1 q1", "c1 q2"]
    assert [g["question"] for g in got_c] == ["b1 q0"]
    # the round before is still readable from the survivors
    assert {g["node_id"] for g in poll(b, 0, "b", {"a", "c"})} == {"a", "c"}


def test_alone_node_runs_and_rejects_bad_values():
    t = HivemindTransport("hm-alone", limits=PoolLimits(max_completion_chars=50), **LOOPBACK)
    try:
        t.publish(3, "solo", groups("solo"))
        assert t.collect(3, exclude="solo") == []
        assert len(t.collect(3)) == 2
        # values written straight into the DHT, bypassing publish: each must be rejected, none may raise
        exp = t._now() + 60
        bad = {"spoof": encode_rollout(make_rollout(3, "someone-else", groups("x"))),
               "half": encode_rollout(make_rollout(3, "half", groups("h")))[:30],
               "../up": encode_rollout(make_rollout(3, "../up", groups("u"))),
               "long": encode_rollout(make_rollout(3, "long", [dict(groups("l", 1)[0], completions=["y" * 60] * 4)])),
               "notbytes": 12345}
        for sub, v in bad.items(): t._run(t._node.store(t._key(3), v, exp, subkey=sub))
        got = t.collect(3)
        assert {g["node_id"] for g in got} == {"solo"}
        assert dict(t.rejects) == {"node_mismatch": 1, "bad_json": 2, "bad_node_id": 1, "completion_too_long": 1}
        t.collect(3); assert t.rejected == 5  # polling again does not count twice
    finally:
        t.close()


def test_bad_initial_peer_fails_clearly():
    with pytest.raises(ConnectionError, match="initial_peers"):
        HivemindTransport("hm-x", initial_peers=["/ip4/127.0.0.1/tcp/9/p2p/12D3KooWBwayPmob8pbKoriLzoq8TpWKiodchrSLKXJusEaMy8Gi"],
                          **dict(LOOPBACK, timeout=40))
