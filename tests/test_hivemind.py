"""Real hivemind DHT tests on loopback: three nodes exchange rollouts; one leaves; the other two still exchange.
And the DHT's own defences: a peer cannot overwrite another node's subkey, cannot squat a round with a long expiry,
and cannot squat a node's alias or speak under its full id (tests/test_identity_squatting.py).

Skipped, with the import error as the reason, where hivemind (the optional extra `sapo_nb[hivemind]`) is not
importable. All traffic stays on 127.0.0.1: NAT port mapping, AutoNAT and relays are switched off.
"""
import os, tempfile, time

import pytest

from conftest import HIVEMIND_MISSING, LOOPBACK  # noqa: E402

pytestmark = [pytest.mark.skipif(HIVEMIND_MISSING is not None, reason=HIVEMIND_MISSING or ""),
              pytest.mark.usefixtures("module_keys")]

from sapo_nb.identity import alias_of, load_key, public_key_hex, sign_rollout, wire_id  # noqa: E402
from sapo_nb.transport import HivemindTransport, PoolLimits, encode_rollout, make_rollout  # noqa: E402

def groups(tag, n=2, G=4):
    return [dict(task="basic_arithmetic", item=dict(component=0, seed=1, index=i), question=f"{tag} q{i}",
                 completions=[f"{tag} says {k}" for k in range(G)], truncated=[k == 0 for k in range(G)])
            for i in range(n)]


def poll(t, rnd, exclude, want, timeout=15.0):
    "Collect until the senders (aliases) in `want` are all there (DHT stores are acknowledged, but allow for propagation)."
    deadline = time.time() + timeout
    while True:
        got = t.collect(rnd, exclude=exclude)
        if {alias_of(g.node_id) for g in got} >= set(want) or time.time() > deadline: return got
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
        assert sorted({alias_of(g.node_id) for g in got}) == sorted(set(swarm) - {name})
        assert {g.node_id for g in got} == {t.own_id(o) for o in set(swarm) - {name}}  # full ids on the wire
        assert len(got) == 4
        assert all(g.round == 0 and g.model == "tiny" and len(g.completions) == 4 for g in got)
        assert all(g.truncated == [True, False, False, False] and g.task == "basic_arithmetic" for g in got)
        assert {g.question for g in got} == {f"{o} q{i}" for o in set(swarm) - {name} for i in range(2)}
    assert [alias_of(p) for p in a.peers()] == ["a", "b", "c"]
    assert all(t.rejected == 0 for t in swarm.values())

    a.close()  # the bootstrap node leaves
    b.publish(1, "b", groups("b1", n=1)); c.publish(1, "c", groups("c1", n=3))
    got_b, got_c = poll(b, 1, "b", {"c"}), poll(c, 1, "c", {"b"})
    assert [g.question for g in got_b] == ["c1 q0", "c1 q1", "c1 q2"]
    assert [g.question for g in got_c] == ["b1 q0"]
    # the round before is still readable from the survivors
    assert {alias_of(g.node_id) for g in poll(b, 0, "b", {"a", "c"})} == {"a", "c"}


def test_alone_node_runs_and_rejects_bad_values():
    t = HivemindTransport("hm-alone", limits=PoolLimits(max_completion_chars=50), **LOOPBACK)
    try:
        t.publish(3, "solo", groups("solo"))
        assert t.collect(3, exclude="solo") == []
        assert len(t.collect(3)) == 2
        # values written straight into the DHT under subkeys this transport owns, bypassing publish:
        # each must be rejected, none may raise
        exp = t._now() + 60
        W = lambda alias: wire_id(alias, public_key_hex(load_key(alias)))
        signed = lambda node, gs: encode_rollout(sign_rollout(make_rollout(3, W(node), gs, experiment="hm-alone", swarm=t.swarm), load_key(node)))
        bad = {W("spoof"): signed("someone-else", groups("x")),
               W("half"): signed("half", groups("h"))[:30],
               "../up": signed("solo", groups("u")),
               W("long"): signed("long", [dict(groups("l", 1)[0], completions=["y" * 60] * 4)]),
               W("notbytes"): 12345,
               "solo": signed("solo", groups("bare"))}  # filed under a bare alias, as before schema 4
        for sub, v in bad.items(): assert t._run(t._node.store(t._key(3), v, exp, subkey=t.subkey(sub)))
        # and an unowned subkey is refused by the DHT itself
        assert not t._run(t._node.store(t._key(3), signed("plain", groups("p")), exp, subkey="plain"))
        got = t.collect(3)
        assert {g.node_id for g in got} == {t.own_id("solo")}
        assert dict(t.rejects) == {"node_mismatch": 1, "bad_json": 2, "bad_node_id": 1, "completion_too_long": 1, "legacy_id": 1}
        t.collect(3); assert t.rejected == 6  # polling again does not count twice
    finally:
        t.close()


def test_bad_initial_peer_fails_clearly():
    with pytest.raises(ConnectionError, match="initial_peers"):
        HivemindTransport("hm-x", initial_peers=["/ip4/127.0.0.1/tcp/9/p2p/12D3KooWBwayPmob8pbKoriLzoq8TpWKiodchrSLKXJusEaMy8Gi"],
                          **dict(LOOPBACK, timeout=40))

# ------------------------------------------------------------------ attacks on the DHT


@pytest.fixture(scope="module")
def trio(module_keys):
    "alice and bob are honest; mallory has her own keys and, in each test, her own idea of the rules."
    alice = HivemindTransport("hm-attack", **LOOPBACK)
    bob = HivemindTransport("hm-attack", initial_peers=alice.maddrs, **LOOPBACK)
    mallory = HivemindTransport("hm-attack", initial_peers=alice.maddrs, key_dir=tempfile.mkdtemp(), **LOOPBACK)
    yield alice, bob, mallory
    for t in (mallory, bob, alice): t.close()


def test_overwrite_of_another_nodes_subkey_fails(trio):
    alice, bob, mallory = trio
    alice.publish(0, "alice", groups("alice"))
    assert [g.question for g in poll(bob, 0, "bob", {"alice"})] == ["alice q0", "alice q1"]
    honest_validator = mallory._node.protocol.record_validator
    try:
        mallory._node.protocol.record_validator = None  # a raw node: signs nothing, checks nothing
        forged = encode_rollout(sign_rollout(make_rollout(0, alice.own_id("alice"), [], experiment="hm-attack"),
                                             load_key("alice", mallory.key_dir)))
        later = mallory._now() + 600  # a later expiry would win a plain DHT subkey
        mallory._run(mallory._node.store(alice._key(0), forged, later, subkey=alice.subkey(alice.own_id("alice"))))
        mallory._run(mallory._node.store(alice._key(0), b"", later, subkey=alice.subkey(alice.own_id("alice"))))
    finally:
        mallory._node.protocol.record_validator = honest_validator
    for t in (bob, alice):
        t._cache.clear()
        assert [g.question for g in t.collect(0)] == ["alice q0", "alice q1"]
        assert t.rejected == 0  # the forged values never got past the DHT's validation


def test_squatting_with_long_expiry_fails(trio):
    alice, bob, mallory = trio
    honest_validator = mallory._node.protocol.record_validator
    try:
        mallory._node.protocol.record_validator = mallory._owner  # signs her subkey, but ignores the expiry cap
        year = mallory._now() + 365 * 24 * 3600
        squat = mallory.encode(7, "mallory", groups("squat"))
        mallory._run(mallory._node.store(mallory._key(7), squat, year, subkey=mallory.subkey(mallory.own_id("mallory"))))
    finally:
        mallory._node.protocol.record_validator = honest_validator
    assert mallory.publish(8, "mallory", groups("fair")) > 0  # the control: a normal expiry goes through
    assert [g.question for g in poll(bob, 8, "bob", {"mallory"})] == ["fair q0", "fair q1"]
    for t in (bob, alice):
        assert t.collect(7) == []
        assert t.rejected == 0


# --- networking options, and swarms across hosts -------------------------------------------------------------------

def test_identity_file_keeps_the_peer_id(tmp_path):
    "A node restarted with the same identity file comes back with the same peer id, so its multiaddr stays valid."
    path = tmp_path / "node.id"
    first = HivemindTransport("hm-id", identity_path=str(path), **LOOPBACK)
    peer = first.maddrs[0].split("/p2p/")[1]; first.close()
    assert path.is_file()
    again = HivemindTransport("hm-id", identity_path=str(path), **LOOPBACK)
    try: assert again.maddrs[0].split("/p2p/")[1] == peer
    finally: again.close()


def test_announced_address_is_what_peers_are_given():
    "Behind a port forward, the node tells peers the public address it was given, not the one it sees."
    a = HivemindTransport("hm-ann", announce_maddrs=["/ip4/203.0.113.7/tcp/31337"], **LOOPBACK)
    try: assert [m.split("/p2p/")[0] for m in a.maddrs] == ["/ip4/203.0.113.7/tcp/31337"]
    finally: a.close()


def test_client_mode_node_shares_both_ways(swarm):
    "A node that only dials out (as on Colab) still publishes to the swarm and reads from it."
    c = HivemindTransport("hm-test", initial_peers=swarm["a"].maddrs, client_mode=True, **LOOPBACK)
    try:
        c.publish(0, "colab", groups("colab")); swarm["b"].publish(0, "b", groups("b"))
        assert {g.question for g in poll(swarm["a"], 0, "a", {"colab"}) if g.node_id == c.own_id("colab")} == {"colab q0", "colab q1"}
        assert {alias_of(g.node_id) for g in poll(c, 0, "colab", {"b"})} >= {"b"}
    finally: c.close()


def test_client_node_whose_peers_all_timed_out_rejoins(swarm):
    """hivemind deletes a peer from the routing table after one request to it goes unanswered (under load, 3 s is
    enough), and a node in client mode receives no requests that would add it back. With its last peer gone such a
    node stored and looked up only in itself, for good: it neither read the swarm nor published to it. The transport
    now asks the peers it last knew again when the table is empty."""
    a, b = swarm["a"], swarm["b"]
    c = HivemindTransport("hm-test", initial_peers=a.maddrs, client_mode=True, **LOOPBACK)
    try:
        a.publish(0, "a", groups("a0")); assert {alias_of(g.node_id) for g in poll(c, 0, "colab", {"a"})} >= {"a"}
        table = c._node.protocol.routing_table
        assert table.peer_id_to_uid  # it knows the swarm ...
        for _ in range(3):  # ... until each of its peers has timed out once (and lookups still in flight are answered)
            for uid in list(table.uid_to_peer_id): del table[uid]
            time.sleep(0.5)
        assert not table.peer_id_to_uid
        a.publish(1, "a", groups("a1")); c.publish(1, "colab", groups("colab1"))
        assert "a" in {alias_of(g.node_id) for g in poll(c, 1, "colab", {"a"})}
        assert "colab" in {alias_of(g.node_id) for g in poll(b, 1, "b", {"colab"})}
        assert table.peer_id_to_uid
    finally: c.close()


def _netns_available() -> str|None:
    "None if network namespaces can be made here (root, iproute2), else why not."
    import shutil, subprocess
    if os.geteuid() != 0 or shutil.which("ip") is None: return "needs root and iproute2 for network namespaces"
    r = subprocess.run(["ip", "netns", "add", "sapo-probe"], capture_output=True, text=True)
    if r.returncode: return f"ip netns add failed: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", "sapo-probe"], capture_output=True)
    return None


def _node_cmd(name, root, listen, peers=(), client=False, rounds=12):
    "`sapo node` for one tiny node of the cross-host swarm (its own folder: each host has its own disk)."
    import sys
    return [sys.executable, "-c", "from sapo_nb.cli import main; raise SystemExit(main())", "node", "--node-id", name,
            "--root", str(root), "--experiment", "hosts", "--transport", "hivemind", "--model", "tiny", "--mix", "quick",
            "--rounds", str(rounds), "-I", "2", "-J", "2", "-G", "3", "--max-new-tokens", "6", "--eval-every", "0",
            "--checkpoint-every", "0", "--wait-policy", "wait", "--wait-peers", "2", "--wait-seconds", "4",
            "--host-maddrs", listen, *(["--initial-peers", *peers] if peers else []), *(["--client-mode"] if client else [])]


def test_swarm_across_hosts_in_network_namespaces(tmp_path):
    """Three hosts with their own network stacks (Linux network namespaces on a virtual switch) train together through
    the DHT: a server, a second server that joins it by its address, and a node behind "NAT" that listens only on its
    own loopback and dials out in client mode. Mid-run the second server's link goes down; the other two go on to the
    end. Nothing leaves the namespaces the test makes. Skipped where namespaces cannot be made (not root)."""
    import json, re, subprocess, threading
    from sapo_nb.core import read_jsonl
    why = _netns_available()
    if why: pytest.skip(why)
    tag = f"sapo{os.getpid() % 10000}"
    hosts = {"srv": "10.77.0.1", "peer": "10.77.0.2", "natted": "10.77.0.3"}
    sh = lambda *cmd: subprocess.run(cmd, check=True, capture_output=True)
    made, procs, lines = [], {}, {}
    def start(name, *args, **kw):
        env = {**os.environ, "SAPO_KEY_DIR": str(tmp_path / name / "keys")}
        p = subprocess.Popen(["ip", "netns", "exec", f"{tag}{name}", *_node_cmd(name, tmp_path / name, *args, **kw)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        procs[name], lines[name] = p, []
        threading.Thread(target=lambda: [lines[name].append(l) for l in p.stdout], daemon=True).start()
    def wait_for(name, pattern, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            for l in list(lines[name]):
                m = re.search(pattern, l)
                if m: return m
            if procs[name].poll() is not None and not any(re.search(pattern, l) for l in lines[name]): break
            time.sleep(0.2)
        raise AssertionError(f"{name}: no {pattern!r} in its output:\n" + "".join(lines[name][-30:]))
    try:
        sh("ip", "link", "add", f"{tag}br", "type", "bridge"); made.append(("link", f"{tag}br"))
        sh("ip", "link", "set", f"{tag}br", "up")
        for i, (name, addr) in enumerate(hosts.items()):
            ns = f"{tag}{name}"
            sh("ip", "netns", "add", ns); made.append(("netns", ns))
            sh("ip", "link", "add", f"{tag}v{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
            made.append(("link", f"{tag}v{i}"))
            sh("ip", "link", "set", f"{tag}v{i}", "master", f"{tag}br", "up")
            sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up"); sh("ip", "-n", ns, "link", "set", "lo", "up")
        start("srv", "/ip4/10.77.0.1/tcp/0")
        srv_addr = wait_for("srv", r"--initial-peers (/ip4/10\.77\.0\.1/\S+)").group(1)
        start("peer", "/ip4/10.77.0.2/tcp/0", [srv_addr])
        start("natted", "/ip4/127.0.0.1/tcp/0", [srv_addr], client=True)  # unreachable from the other hosts
        wait_for("peer", r"round 4/12")
        sh("ip", "link", "set", f"{tag}v1", "down")  # the second server drops off the network mid-run
        for name in ("srv", "natted"): assert procs[name].wait(timeout=240) == 0, "".join(lines[name][-30:])
        rows = {n: read_jsonl(tmp_path / n / "hosts" / "logs" / n / "metrics.jsonl") for n in ("srv", "natted")}
        for n, rs in rows.items():
            seen = [(r["pool_peers"], r["pool_available"]) for r in rs]
            assert [r["round"] for r in rs] == list(range(12)), n
            assert max(r["pool_peers"] for r in rs) == 2, (n, seen)  # all three trained together
            assert all(r["pool_peers"] <= 1 for r in rs[-3:]), (n, seen)  # the cut host is gone
        # ... and the two left go on sharing. After the cut the server's DHT calls to the host that vanished make its next
        # rounds slow (10 to 15 s each here), so the node behind NAT gets more than wait_seconds ahead and, reading only
        # its own round (max_staleness 0), reads none of the server's groups until the server has caught up. The server,
        # behind, reads the NAT node's groups throughout. Catching up is what `wait_target` made possible (before it, both
        # waited out the deadline for the third host in every round and the gap never closed: none of the server's groups
        # in 13 rounds after the cut, measured at 18 rounds); it took about ten rounds in two of three runs of 18 and 20
        # rounds here and did not happen within 20 in the third, longer than this test runs. So the NAT side must read
        # the server's groups in at least one round from the cut on.
        srv, natted = rows["srv"], rows["natted"]
        assert all(r["pool_available"] >= 1 for r in srv[-3:]), [(r["pool_peers"], r["pool_available"]) for r in srv]
        cut = next(k for k, r in enumerate(natted) if k and r["pool_peers"] < natted[k - 1]["pool_peers"])
        assert any(r["pool_available"] >= 1 for r in natted[cut:]), [(r["pool_peers"], r["pool_available"]) for r in natted]
    finally:
        for p in procs.values():
            if p.poll() is None: p.kill()
            p.wait()
        for kind, name in reversed(made):
            subprocess.run(["ip", kind, "del", name], capture_output=True)


def test_a_restarted_node_keeps_its_first_publication_of_a_round(swarm):
    """A node publishes round 0, its process ends, and a new transport of the same key (a fresh DHT owner marker)
    runs round 0 again after a resume: the first publication stays, as on the other pools, instead of a second version
    of the round beside it (receivers kept one of the two at random)."""
    a, b, _ = swarm["a"], swarm["b"], swarm["c"]
    assert a.publish(0, "alice", groups("first")) > 0
    assert {g.question for g in poll(b, 0, "bob", {"alice"})} == {"first q0", "first q1"}
    again = HivemindTransport("hm-test", initial_peers=a.maddrs, **LOOPBACK)  # the resumed process
    try:
        assert again.subkey(again.own_id("alice")) != a.subkey(a.own_id("alice"))  # another owner marker
        assert again.publish(0, "alice", groups("second")) == 0 and again.unpublished["published_before"] == 1
        b._cache.clear()
        assert {g.question for g in b.collect(0, exclude="bob")} == {"first q0", "first q1"}
    finally: again.close()
