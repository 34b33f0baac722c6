"""Identity without squatting: a node's id on the wire is `<alias>.<fingerprint of its key>`, recomputed by every
receiver from the signed public key, so nobody can claim a name first and nobody can speak under another's id.

Each test fails on the first-come registry this replaced (keys/<alias>.pub on a folder, the first key seen on the
DHT): there a key published under an alias before its owner started locked the owner out. The DHT tests run real
hivemind nodes on loopback and are skipped, with the reason, where hivemind is not importable.
"""
import json, time
from collections import Counter

import pytest

from sapo_nb.identity import alias_of, sign_rollout
from sapo_nb.transport import FolderTransport, MemoryTransport, decode_rollout, encode_rollout

from conftest import HIVEMIND_MISSING as _NO_HIVEMIND, LOOPBACK

pytestmark = pytest.mark.usefixtures("module_keys")


def groups(tag, n=2, G=2):
    return [dict(task="basic_arithmetic", item=dict(component=0, seed=1, index=i), question=f"{tag} q{i}",
                 completions=[f"{tag} {k}" for k in range(G)], truncated=[False] * G) for i in range(n)]


def by_sender(got):
    "{node id: sorted questions} of collected groups."
    out = {}
    for g in got: out.setdefault(g.node_id, []).append(g.question)
    return {k: sorted(v) for k, v in out.items()}


def forged_as(victim_id, attacker, alias, round, tag="forged"):
    "A rollout under `victim_id`, validly signed by `attacker`'s key for `alias` (the signature checks; the id lies)."
    obj = json.loads(attacker.encode(round, alias, groups(tag)))
    obj.pop("signature"); obj.pop("public_key")
    return encode_rollout(sign_rollout(dict(obj, node_id=victim_id), attacker._signing_key(alias)))

# ------------------------------------------------------------------ the shared folder


def test_squatted_alias_does_not_lock_out_owner_on_folder(tmp_path):
    "mallory publishes as `alice` before Alice ever starts; a receiver reads her first. Alice still publishes and is read."
    root = tmp_path / "pool"
    mallory = FolderTransport(root, "exp", key_dir=tmp_path / "mallory-keys")
    assert mallory.publish(0, "alice", groups("squat")) > 0
    early = FolderTransport(root, "exp")  # a receiver running since before Alice started
    assert list(by_sender(early.collect(0, exclude="bob")).values()) == [["squat q0", "squat q1"]]
    alice = FolderTransport(root, "exp")
    assert alice.publish(0, "alice", groups("alice")) > 0  # the registry raised IdentityError here
    assert alice.publish(1, "alice", groups("alice1")) > 0
    me, her = alice.own_id("alice"), mallory.own_id("alice")
    assert me != her and alias_of(me) == alias_of(her) == "alice"
    for r in (early, FolderTransport(root, "exp")):  # the receiver that saw the squatter first, and a fresh one
        assert by_sender(r.collect(0, exclude="bob")) == {me: ["alice q0", "alice q1"], her: ["squat q0", "squat q1"]}
        assert by_sender(r.collect(1, exclude="bob")) == {me: ["alice1 q0", "alice1 q1"]}
        assert not r.rejects
    assert sorted(p.name for p in alice.round_dir(0).iterdir()) == sorted([f"{me}.json", f"{her}.json"])
    assert not (root / "exp" / "keys").exists()  # nothing to claim: no registry


def test_forged_full_id_is_fingerprint_mismatch(tmp_path):
    "An entry under Alice's full id, signed by mallory's key: a valid signature, a fingerprint that is not the signer's."
    root = tmp_path / "pool"
    alice = FolderTransport(root, "exp"); alice.publish(0, "alice", groups("alice"))
    mallory = FolderTransport(root, "exp", key_dir=tmp_path / "mallory-keys")
    me = alice.own_id("alice")
    alice.round_dir(1).mkdir()
    (alice.round_dir(1) / f"{me}.json").write_bytes(forged_as(me, mallory, "alice", 1))
    r = FolderTransport(root, "exp")
    assert r.collect(1) == [] and r.rejects == Counter(fingerprint_mismatch=1)
    assert by_sender(r.collect(0)) == {me: ["alice q0", "alice q1"]}  # the real one is unaffected
    # the same bytes through the validator alone, and the same on the memory pool
    data = (alice.round_dir(1) / f"{me}.json").read_bytes()
    assert decode_rollout(data, 1, expected_node=me, expected_experiment="exp") == ([], ["fingerprint_mismatch"])
    store = {}
    MemoryTransport(store).publish(0, "alice", groups("alice"))
    store[1] = {me: forged_as(me, MemoryTransport(store, key_dir=tmp_path / "mallory-keys"), "alice", 1)}
    m = MemoryTransport(store)
    assert m.collect(1) == [] and m.rejects == Counter(fingerprint_mismatch=1)
    # a fingerprint of the right form that matches no key in the rollout (Alice's alias, a made-up fingerprint)
    made_up = f"alice.{'0' * 20}"
    assert decode_rollout(forged_as(made_up, mallory, "alice", 1), 1) == ([], ["fingerprint_mismatch"])


def test_owner_excludes_only_its_own_groups(tmp_path):
    "collect(exclude=alias) leaves out our own full id, not another key calling itself by our alias; a restart too."
    root = tmp_path / "pool"
    alice = FolderTransport(root, "exp")
    mallory = FolderTransport(root, "exp", key_dir=tmp_path / "mallory-keys")
    alice.publish(0, "alice", groups("alice")); mallory.publish(0, "alice", groups("squat"))
    her = mallory.own_id("alice")
    assert by_sender(alice.collect(0, exclude="alice")) == {her: ["squat q0", "squat q1"]}
    assert by_sender(alice.collect_recent(0, exclude="alice")) == {her: ["squat q0", "squat q1"]}
    assert by_sender(alice.collect(0, exclude=alice.own_id("alice"))) == {her: ["squat q0", "squat q1"]}  # a full id too
    restarted = FolderTransport(root, "exp")  # same key folder, has not published yet
    assert by_sender(restarted.collect(0, exclude="alice")) == {her: ["squat q0", "squat q1"]}
    assert sorted(restarted.peers()) == [her]  # ours is not a peer we read; it is ours once we publish
    assert sorted(alice.peers()) == sorted([alice.own_id("alice"), her])
    store = {}
    a, m = MemoryTransport(store), MemoryTransport(store, key_dir=tmp_path / "mallory-keys")
    a.publish(0, "alice", groups("alice")); m.publish(0, "alice", groups("squat"))
    assert by_sender(a.collect(0, exclude="alice")) == {her: ["squat q0", "squat q1"]}

# ------------------------------------------------------------------ the hivemind DHT


def poll(t, rnd, until, exclude="bob", timeout=15.0):
    "Collect round `rnd` until `until(groups)` holds (DHT stores are acknowledged, but allow for propagation)."
    deadline = time.time() + timeout
    while True:
        got = t.collect(rnd, exclude=exclude)
        if until(got) or time.time() > deadline: return got
        time.sleep(0.2)


@pytest.fixture(scope="module")
def dht(tmp_path_factory):
    if _NO_HIVEMIND: pytest.skip(_NO_HIVEMIND)
    from sapo_nb.transport import HivemindTransport
    bob = HivemindTransport("hm-squat", **LOOPBACK)  # an honest receiver, up from the start
    mallory = HivemindTransport("hm-squat", initial_peers=bob.maddrs, key_dir=tmp_path_factory.mktemp("mallory"), **LOOPBACK)
    yield dict(bob=bob, mallory=mallory, make=lambda: HivemindTransport("hm-squat", initial_peers=bob.maddrs, **LOOPBACK))
    for t in (mallory, bob): t.close()


def test_squatted_alias_does_not_lock_out_owner_on_dht(dht):
    "On the DHT the first key seen for an unseen id used to win: bob, having read mallory's `alice`, refused Alice."
    bob, mallory = dht["bob"], dht["mallory"]
    mallory.publish(0, "alice", groups("squat"))
    assert {g.question for g in poll(bob, 0, lambda got: len(got) >= 2)} == {"squat q0", "squat q1"}  # seen first
    alice = dht["make"]()  # Alice starts only now
    try:
        assert alice.publish(0, "alice", groups("alice")) > 0
        me, her = alice.own_id("alice"), mallory.own_id("alice")
        got = poll(bob, 0, lambda got: me in {g.node_id for g in got})
        assert by_sender(got) == {me: ["alice q0", "alice q1"], her: ["squat q0", "squat q1"]}
        assert not bob.rejects
        mine = poll(alice, 0, lambda got: her in {g.node_id for g in got}, exclude="alice")
        assert by_sender(mine) == {her: ["squat q0", "squat q1"]}  # her own groups left out, the squatter's not
    finally: alice.close()


def test_forged_full_id_on_dht_is_fingerprint_mismatch(dht):
    "mallory's own (owned) subkey, named with Alice's full id, her own signature: refused with the named reason."
    bob, mallory = dht["bob"], dht["mallory"]
    alice = dht["make"]()
    try:
        me = alice.own_id("alice")
        alice.publish(5, "alice", groups("alice5"))
        forged = forged_as(me, mallory, "alice", 5)
        assert mallory._run(mallory._node.store(mallory._key(5), forged, mallory._now() + 60, subkey=mallory.subkey(me)))
        got = poll(bob, 5, lambda got: me in {g.node_id for g in got} and bob.rejects["fingerprint_mismatch"])
        assert by_sender(got) == {me: ["alice5 q0", "alice5 q1"]}
        assert bob.rejects["fingerprint_mismatch"] == 1
    finally: alice.close()


def test_planted_regular_file_at_our_name_is_replaced(tmp_path):
    """mallory, who can write the folder, puts files at Alice's rollout names for the coming rounds (an empty one, and
    a copy of her round 0 file): Alice's publication replaces what is not her signed rollout of the round, so
    receivers read her groups and refuse nothing under her name. Her own first publication of a round still stays."""
    root = tmp_path / "pool"
    alice = FolderTransport(root, "exp")
    me = alice.own_id("alice")
    assert alice.publish(0, "alice", groups("first")) > 0
    first = (alice.round_dir(0) / f"{me}.json").read_bytes()
    for r, planted in ((1, b""), (2, first)):  # nothing, and a replay of round 0 under round 2's name
        alice.round_dir(r).mkdir(parents=True)
        (alice.round_dir(r) / f"{me}.json").write_bytes(planted)
    assert alice.publish(1, "alice", groups("one")) > 0 and alice.publish(2, "alice", groups("two")) > 0
    assert alice.rejects["planted_own_name"] == 2
    bob = FolderTransport(root, "exp", key_dir=tmp_path / "bob-keys")
    assert by_sender(bob.collect(1, exclude="bob")) == {me: ["one q0", "one q1"]}
    assert by_sender(bob.collect(2, exclude="bob")) == {me: ["two q0", "two q1"]}
    assert not bob.rejects and not bob.take_refusals()
    assert alice.publish(0, "alice", groups("again")) == 0 and alice.unpublished["published_before"] == 1  # ours: stays
    assert (alice.round_dir(0) / f"{me}.json").read_bytes() == first


def test_forged_copies_under_a_peers_id_do_not_flag_it(tmp_path):
    """Rollouts filed under Alice's id but signed by mallory, round after round: refused as `fingerprint_mismatch` and
    counted under the name they came with, but Alice is never flagged: a peer is flagged only for what it signed."""
    from sapo_nb.monitor import peer_table
    from sapo_nb.sampler import add_refusals
    root = tmp_path / "pool"
    alice = FolderTransport(root, "exp")
    mallory = FolderTransport(root, "exp", key_dir=tmp_path / "mallory-keys")
    bob = FolderTransport(root, "exp", key_dir=tmp_path / "bob-keys")
    me, rows = alice.own_id("alice"), []
    for r in range(6):
        alice.round_dir(r).mkdir(parents=True)
        (alice.round_dir(r) / f"{me}.json").write_bytes(forged_as(me, mallory, "alice", r))
        assert bob.collect(r, exclude="bob") == []
        rows.append(dict(I=2, pool_selected=0, peers=add_refusals({}, bob.take_refusals())))
    assert [(t["peer"], t["refused"], t["flagged"]) for t in peer_table(rows)] == [(me, {"fingerprint_mismatch": 6}, False)]


def test_unreadable_file_at_our_name_does_not_stop_publishing(tmp_path, monkeypatch):
    """A file at Alice's name that she cannot read (another user's, mode 000): her publication replaces it, or is
    counted as blocked where the folder will not let her; it never raises out of `publish` and stops her round."""
    from sapo_nb import transport
    root = tmp_path / "pool"
    alice = FolderTransport(root, "exp")
    me = alice.own_id("alice")
    alice.round_dir(0).mkdir(parents=True)
    (alice.round_dir(0) / f"{me}.json").write_bytes(b"theirs")
    def unreadable(*a, **kw): raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(transport, "read_regular", unreadable)
    assert alice.publish(0, "alice", groups("mine")) > 0
    monkeypatch.undo()
    assert json.loads((alice.round_dir(0) / f"{me}.json").read_bytes())["node_id"] == me


def test_oversized_swarm_file_is_never_replaced(tmp_path):
    """A `swarm_id` file far larger than an id, planted before any node: the pool refuses it with what to do, and never
    draws a new id over it (which would split the pool: nodes that read the old file and the new one would refuse each
    other as `swarm_mismatch`)."""
    (tmp_path / "pool" / "exp").mkdir(parents=True)
    planted = tmp_path / "pool" / "exp" / "swarm_id"
    planted.write_bytes(b"0" * 5_000_000)
    with pytest.raises(ValueError, match="swarm id"): FolderTransport(tmp_path / "pool", "exp")
    assert planted.stat().st_size == 5_000_000
