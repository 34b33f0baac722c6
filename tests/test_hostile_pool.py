"""The hostile-peer suite for the rollout pool: one named test per attack, each failing without its defence.

Attackers here can write anything into the shared folder (or the in-memory store): junk, links, FIFOs, device
files, folders where files go, copies of other nodes' rollouts, entries signed with their own keys under other
nodes' names, and floods of entries. Every test runs in a temp folder with a temp key folder, in seconds.
"""
import json, os, stat, threading, time
from collections import Counter

import pytest

from sapo_nb.identity import load_key, public_key_hex, sign_rollout, wire_id
from sapo_nb.transport import (DROP_REASONS, REJECT_REASONS, FolderTransport, MemoryTransport, PoolLimits,
                               decode_rollout, encode_rollout, make_rollout, make_transport)


pytestmark = pytest.mark.usefixtures("private_keys")


def groups(n=2, G=3, tag="q"):
    return [dict(task="basic_arithmetic", item=dict(component=0, seed=7, index=i), question=f"{tag}{i}: 2+{i}?",
                 completions=[f"{tag} {k}" for k in range(G)], truncated=[False] * G) for i in range(n)]


def wid(alias, key_dir=None):
    "The wire id of `alias` for its key in `key_dir` (the test's key folder by default): `<alias>.<fingerprint>`."
    return wire_id(alias, public_key_hex(load_key(alias, key_dir)))


def named(t, round, name):
    "A path in round `round` named like a wire id, so that only what the thing *is* can stop it (not its name)."
    return t.round_dir(round) / f"{name}.{'f' * 20}.json"


def pool(tmp_path, **limits):
    return FolderTransport(tmp_path / "pool", "exp", limits=PoolLimits(**limits) if limits else None)


def in_thread(fn, timeout=5.0):
    "Run fn in a thread; (finished, result). A defence against hangs must finish."
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", fn()), daemon=True)
    t.start(); t.join(timeout)
    return not t.is_alive(), out.get("r")

# ------------------------------------------------------------------ what the folder holds


def test_fifo_rollout_does_not_hang_the_reader(tmp_path):
    t = pool(tmp_path); t.publish(0, "honest", groups())
    os.mkfifo(named(t, 0, "evil"))  # a plain open() would wait for a writer forever
    done, got = in_thread(lambda: pool(tmp_path).collect(0))
    assert done, "collect blocked on a FIFO"
    assert {g.node_id for g in got} == {wid("honest")}


def test_fifo_counted_as_not_regular(tmp_path):
    t = pool(tmp_path); t.publish(0, "honest", groups())
    os.mkfifo(named(t, 0, "evil"))
    r = pool(tmp_path); r.collect(0); r.collect(0)
    assert r.rejects == Counter(not_regular=1)


def test_symlinked_rollout_is_never_followed(tmp_path):
    t = pool(tmp_path); t.publish(0, "honest", groups())
    outside = tmp_path / "outside"; outside.mkdir()
    # a valid signed rollout, kept outside the pool and linked in under its sender's name
    (outside / "leak.json").write_bytes(t.encode(0, "leak", groups(tag="SECRET")))
    os.symlink(outside / "leak.json", t.round_dir(0) / f"{wid('leak')}.json")
    os.symlink("/etc/passwd", named(t, 0, "passwd"))
    r = pool(tmp_path)
    got = r.collect(0)
    assert all("SECRET" not in g.question for g in got)
    assert r.rejects == Counter(symlink=2)


def changed_after_listing(tmp_path, alias, change, **kw):
    "A reader of the test pool that calls `change(path)` on `alias`'s rollout after listing a round, before reading it."
    class Reader(FolderTransport):
        def _entries(self, round):
            rows = super()._entries(round)  # the lstat has said "regular file" of a given size
            change(self.round_dir(round) / f"{wid(alias)}.json")
            return rows
    return Reader(tmp_path / "pool", "exp", **kw)


def test_file_swapped_for_fifo_after_listing_does_not_hang(tmp_path):
    t = pool(tmp_path); t.publish(0, "honest", groups()); t.publish(0, "swapped", groups())
    r = changed_after_listing(tmp_path, "swapped", lambda p: (p.unlink(), os.mkfifo(p)))
    done, got = in_thread(lambda: r.collect(0))
    assert done
    assert {g.node_id for g in got} == {wid("honest")} and r.rejects == Counter(not_regular=1)


def test_folder_named_like_a_rollout(tmp_path):
    t = pool(tmp_path); t.publish(0, "honest", groups())
    named(t, 0, "dir").mkdir()
    r = pool(tmp_path); r.collect(0)
    assert r.rejects == Counter(not_regular=1)


def test_device_file_is_not_opened(tmp_path):
    t = pool(tmp_path); t.publish(0, "honest", groups())
    try: os.mknod(named(t, 0, "dev"), 0o644 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers
    except (PermissionError, OSError) as e: pytest.skip(f"cannot create a device node here ({e})")
    r = pool(tmp_path); r.collect(0)
    assert r.rejects == Counter(not_regular=1)


def test_non_regular_entries_are_never_opened(tmp_path, monkeypatch):
    "FIFOs, folders and links are refused from the listing: only regular files ever reach the open (`read_regular`)."
    import sapo_nb.transport as transport
    t = pool(tmp_path); t.publish(0, "honest", groups())
    os.mkfifo(named(t, 0, "fifo")); named(t, 0, "dir").mkdir(); os.symlink("/etc/passwd", named(t, 0, "link"))
    r, opened, real = pool(tmp_path), [], transport.read_regular
    monkeypatch.setattr(transport, "read_regular", lambda name, *a, **kw: (opened.append(name), real(name, *a, **kw))[1])
    got = r.collect(0)
    assert opened == [f"{wid('honest')}.json"] and {g.node_id for g in got} == {wid("honest")}
    assert r.rejects == Counter(not_regular=2, symlink=1)


def test_file_swapped_for_link_after_listing_is_not_followed(tmp_path):
    "A rollout replaced by a link after the listing said 'regular file': the open refuses the link (O_NOFOLLOW)."
    t = pool(tmp_path); t.publish(0, "honest", groups()); t.publish(0, "swapped", groups())
    outside = tmp_path / "outside"; outside.mkdir()
    (outside / "leak.json").write_bytes(t.encode(0, "swapped", groups(tag="SECRET")))
    r = changed_after_listing(tmp_path, "swapped", lambda p: (p.unlink(), os.symlink(outside / "leak.json", p)))
    got = r.collect(0)
    assert {g.node_id for g in got} == {wid("honest")} and all("SECRET" not in g.question for g in got)
    assert r.rejects == Counter(symlink=1)


def test_file_grown_after_listing_is_held_to_its_share(tmp_path):
    "A rollout rewritten larger after the listing: the bytes actually read are held to the sender's share of the cap."
    t = pool(tmp_path); t.publish(0, "honest", groups()); t.publish(0, "grower", groups())
    size = (t.round_dir(0) / f"{wid('grower')}.json").stat().st_size
    big = t.encode(0, "grower", groups(n=12, tag="BIG"))
    assert len(big) > 3 * size  # over any share of the cap below, while its listed size is under
    r = changed_after_listing(tmp_path, "grower", lambda p: p.write_bytes(big),
                              limits=PoolLimits(max_bytes_per_round=2 * size + 100))
    got = r.collect(0)
    assert {g.node_id for g in got} == {wid("honest")} and all("BIG" not in g.question for g in got)
    assert r.dropped["over_bytes"] == 1


def test_symlinked_round_folder_is_skipped(tmp_path):
    t = pool(tmp_path); t.publish(0, "honest", groups())
    elsewhere = tmp_path / "elsewhere"; elsewhere.mkdir()
    (elsewhere / f"{wid('honest')}.json").write_bytes((t.round_dir(0) / f"{wid('honest')}.json").read_bytes())
    os.symlink(elsewhere, t.round_dir(5))
    r = pool(tmp_path)
    assert r.collect(5) == []
    assert r.rejects == Counter(symlink=1)
    assert r._rounds() == [0]  # not listed as a round


def test_cleanup_never_deletes_through_symlinked_round(tmp_path):
    t = pool(tmp_path)
    for r in range(2, 6): t.publish(r, "honest", groups())
    victim = tmp_path / "victim"; victim.mkdir(); (victim / f"{wid('honest')}.json").write_text("precious")
    os.symlink(victim, t.round_dir(1))
    t.cleanup(2, node_id="honest", current_round=5)
    assert (victim / f"{wid('honest')}.json").read_text() == "precious"

    class Lister(FolderTransport):  # a listing that named the link as a round: the folder is still not entered
        def _rounds(self): return sorted({*super()._rounds(), 1})

    Lister(tmp_path / "pool", "exp").cleanup(2, node_id="honest", current_round=5)
    assert (victim / f"{wid('honest')}.json").read_text() == "precious"


def test_cleanup_without_node_id_deletes_nothing(tmp_path):
    t = pool(tmp_path)
    for r in range(4):
        for n in ("a", "b"): t.publish(r, n, groups())
    assert t.cleanup(2) == 0
    assert all((t.round_dir(r) / f"{wid(n)}.json").exists() for r in range(4) for n in ("a", "b"))


def test_cleanup_removes_only_own_regular_files(tmp_path):
    t = pool(tmp_path)
    for r in range(4):
        for n in ("a", "b"): t.publish(r, n, groups())
    outside = tmp_path / "target.txt"; outside.write_text("keep me")
    a, b = f"{wid('a')}.json", f"{wid('b')}.json"
    (t.round_dir(1) / a).unlink(); os.symlink(outside, t.round_dir(1) / a)  # our name, but a link
    (t.round_dir(0) / "a.json").write_text("a bare alias: an older version's file, or anyone's")
    assert t.cleanup(2, node_id="a", current_round=3) == 1  # round 0's own file only
    assert outside.read_text() == "keep me" and os.path.islink(t.round_dir(1) / a)
    assert all((t.round_dir(r) / b).exists() for r in range(4)) and (t.round_dir(0) / "a.json").exists()


def test_cleanup_spares_temp_files_of_a_node_whose_id_extends_ours(tmp_path):
    t = pool(tmp_path); t.publish(0, "a", groups())
    theirs = t.round_dir(0) / f".{wid('a')}.b~123-ffff.tmp"; theirs.write_text("half-written by an id extending ours")
    mine = t.round_dir(0) / f".{wid('a')}~123-ffff.tmp"; mine.write_text("ours, left by a crash")
    t.cleanup(1, node_id="a", current_round=5)
    assert theirs.exists() and not mine.exists()


def test_publish_blocked_by_file_at_round_folder(tmp_path, caplog):
    t = pool(tmp_path)
    (t.dir / "round_3").write_text("planted")
    assert t.publish(3, "a", groups()) == 0
    assert t.unpublished == Counter(blocked_path=1)
    assert "not published" in caplog.text
    assert (t.dir / "round_3").read_text() == "planted"
    assert pool(tmp_path).publish(4, "a", groups()) > 0  # a restart goes on


@pytest.mark.parametrize("plant", ["folder", "fifo", "symlink"])
def test_publish_blocked_by_thing_at_our_file(tmp_path, plant):
    t = pool(tmp_path); t.round_dir(2).mkdir()
    target = t.round_dir(2) / f"{wid('a')}.json"
    outside = tmp_path / "outside.txt"; outside.write_text("not yours")
    {"folder": lambda: target.mkdir(), "fifo": lambda: os.mkfifo(target),
     "symlink": lambda: os.symlink(outside, target)}[plant]()
    done, sent = in_thread(lambda: t.publish(2, "a", groups()))
    assert done and sent == 0 and t.unpublished == Counter(blocked_path=1)
    assert outside.read_text() == "not yours"
    assert t.publish(3, "a", groups()) > 0


def test_publish_never_writes_through_symlinked_round_folder(tmp_path):
    t = pool(tmp_path)
    elsewhere = tmp_path / "elsewhere"; elsewhere.mkdir()
    os.symlink(elsewhere, t.round_dir(2))
    assert t.publish(2, "a", groups()) == 0 and t.unpublished["blocked_path"] == 1
    assert list(elsewhere.iterdir()) == []


def test_planted_keys_folder_does_not_matter(tmp_path):
    "There is no key registry in the pool any more: something planted where one was is never read or written."
    t = pool(tmp_path)
    (tmp_path / "pool/exp/keys").write_text("planted")
    assert t.publish(0, "a", groups()) > 0 and not t.unpublished
    assert (tmp_path / "pool/exp/keys").read_text() == "planted"


def test_key_folder_inside_pool_refused(tmp_path):
    with pytest.raises(ValueError, match="inside the shared pool"):
        FolderTransport(tmp_path / "pool", "exp", key_dir=tmp_path / "pool" / "my-keys")


def test_symlinked_rollouts_folder_refused_at_start(tmp_path):
    (tmp_path / "pool/exp").mkdir(parents=True); (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "pool/exp/rollouts")
    with pytest.raises(OSError, match="rollout folder"):
        pool(tmp_path)

# ------------------------------------------------------------------ identity


def test_unsigned_rollout_rejected(tmp_path):
    t = pool(tmp_path); t.publish(0, "a", groups())
    (t.round_dir(0) / f"{wid('b')}.json").write_bytes(encode_rollout(make_rollout(0, wid("b"), groups(), experiment="exp")))
    r = pool(tmp_path); r.collect(0)
    assert r.rejects == Counter(bad_key=1)


def test_tampered_rollout_bad_signature(tmp_path):
    t = pool(tmp_path); t.publish(0, "a", groups())
    p = t.round_dir(0) / f"{wid('a')}.json"
    p.write_bytes(p.read_bytes().replace(b"q0: 2+0?", b"q0: 9+9?"))
    r = pool(tmp_path)
    assert r.collect(0) == [] and r.rejects == Counter(bad_signature=1)


def test_new_sender_needs_no_registration(tmp_path):
    "A signed rollout of an id never seen before is read at once: its fingerprint is all it needs (no registry to sync)."
    t = pool(tmp_path); t.publish(0, "ghost", groups())
    r = pool(tmp_path)
    assert {g.node_id for g in r.collect(0)} == {wid("ghost")} and not r.rejects


def test_impersonation_with_own_key_is_fingerprint_mismatch(tmp_path):
    alice = pool(tmp_path); alice.publish(0, "alice", groups(tag="alice"))
    mallory = FolderTransport(tmp_path / "pool", "exp", key_dir=tmp_path / "mallory-keys")
    obj = json.loads(mallory.encode(1, "alice", groups(tag="forged")))  # signed by her key ...
    obj.pop("signature"); obj.pop("public_key"); obj["node_id"] = wid("alice")  # ... under alice's own full id
    alice.round_dir(1).mkdir()
    (alice.round_dir(1) / f"{wid('alice')}.json").write_bytes(encode_rollout(sign_rollout(obj, mallory._signing_key("alice"))))
    r = pool(tmp_path)
    assert r.collect(1) == [] and r.rejects == Counter(fingerprint_mismatch=1)


def test_replay_into_another_round_is_round_mismatch(tmp_path):
    t = pool(tmp_path); t.publish(3, "a", groups())
    t.round_dir(5).mkdir()
    (t.round_dir(5) / f"{wid('a')}.json").write_bytes((t.round_dir(3) / f"{wid('a')}.json").read_bytes())
    r = pool(tmp_path)
    assert r.collect(5) == [] and r.rejects == Counter(round_mismatch=1)


def test_replay_into_another_experiment_is_experiment_mismatch(tmp_path):
    t = pool(tmp_path); t.publish(0, "a", groups())
    other = FolderTransport(tmp_path / "pool", "other")
    other.round_dir(0).mkdir()
    (other.round_dir(0) / f"{wid('a')}.json").write_bytes((t.round_dir(0) / f"{wid('a')}.json").read_bytes())
    r = FolderTransport(tmp_path / "pool", "other")
    assert r.collect(0) == [] and r.rejects == Counter(experiment_mismatch=1)


def test_copy_under_another_name_is_node_mismatch(tmp_path):
    t = pool(tmp_path); t.publish(0, "a", groups())
    (t.round_dir(0) / f"{wid('b')}.json").write_bytes((t.round_dir(0) / f"{wid('a')}.json").read_bytes())
    r = pool(tmp_path); r.collect(0)
    assert r.rejects == Counter(node_mismatch=1)


def test_bare_alias_file_and_old_registry_are_not_read(tmp_path):
    "A pool written before schema 4: `ghost.json` and `keys/ghost.pub` bind nothing; the file is `legacy_id`, unread."
    t = pool(tmp_path)
    (tmp_path / "pool/exp/keys").mkdir(); (tmp_path / "pool/exp/keys/ghost.pub").write_text(public_key_hex(load_key("ghost")) + "\n")
    t.round_dir(0).mkdir()
    old = json.loads(t.encode(0, "ghost", groups())); old.pop("signature"); old.pop("public_key")
    (t.round_dir(0) / "ghost.json").write_bytes(encode_rollout(sign_rollout(dict(old, schema=3, node_id="ghost"), load_key("ghost"))))
    r = pool(tmp_path)
    assert r.collect(0) == [] and r.rejects == Counter(legacy_id=1)


def test_key_file_created_private_in_key_dir(tmp_path, private_keys):
    pool(tmp_path).publish(0, "alice", groups())
    kf = private_keys / "alice.key"
    assert stat.S_IMODE(kf.stat().st_mode) == 0o600
    assert not list((tmp_path / "pool").rglob("*.key"))  # nothing private in the pool


def test_memory_transport_signs_and_checks_too():
    store = {}
    a = MemoryTransport(store); a.publish(0, "a", groups())
    obj = json.loads(store[0][wid("a")])
    assert len(obj["signature"]) == 128 and obj["public_key"] == public_key_hex(load_key("a")) and "keys" not in store
    store[0][wid("b")] = encode_rollout(make_rollout(0, wid("b"), groups()))  # unsigned
    r = MemoryTransport(store)
    assert {g.node_id for g in r.collect(0)} == {wid("a")} and r.rejects == Counter(bad_key=1)

# ------------------------------------------------------------------ the wire carries no answer


def test_answer_metadata_rewards_never_sent(tmp_path):
    t = pool(tmp_path)
    t.publish(0, "a", [dict(g, answer="42", metadata={"x": 1}, rewards=[1.0, 0.0, 0.0]) for g in groups()])
    wire = json.loads((t.round_dir(0) / f"{wid('a')}.json").read_bytes())
    assert all(set(g) == {"task", "item", "question", "completions", "truncated"} for g in wire["groups"])


def test_answer_on_the_wire_is_rejected(tmp_path):
    t = pool(tmp_path); t.publish(0, "a", groups())
    obj = make_rollout(0, wid("b"), groups(), experiment="exp", swarm=t.swarm)
    obj["groups"][0]["answer"] = "42"
    (t.round_dir(0) / f"{wid('b')}.json").write_bytes(encode_rollout(sign_rollout(obj, load_key("b"))))
    r = pool(tmp_path)
    got = r.collect(0)
    assert all(not hasattr(g, "answer") for g in got) and r.rejects == Counter(unexpected_field=1)
    assert [g.index for g in got if g.node_id == wid("b")] == [1]


def signed_with(change, **limits):
    obj = make_rollout(0, wid("a"), groups(2), experiment="exp", created_at=1.0)
    change(obj)
    return decode_rollout(encode_rollout(sign_rollout(obj, load_key("a"))), 0, PoolLimits(**limits), wid("a"), "exp")


@pytest.mark.parametrize("reason,change,limits", [
    ("bad_task", lambda o: o["groups"][0].update(task="../x"), {}),
    ("bad_item", lambda o: o["groups"][0].update(item=dict(component=0, seed=-1, index=0)), {}),
    ("bad_item", lambda o: o["groups"][0].update(item=dict(component=0, seed=0, index=2**31)), {}),
    ("bad_question", lambda o: o["groups"][0].update(question=""), {}),
    ("question_too_long", lambda o: o["groups"][0].update(question="x" * 101), dict(max_question_chars=100)),
    ("bad_truncated", lambda o: o["groups"][0].update(truncated=[0, 1, 0]), {}),
    ("G_mismatch", lambda o: o["groups"][0].update(truncated=[False]), {}),
    ("unexpected_field", lambda o: o["groups"][0].update(rewards=[1, 0, 0]), {}),
    ("bad_group", lambda o: o["groups"][0].pop("item"), {}),
])
def test_group_reject_reasons(reason, change, limits):
    got, why = signed_with(change, **limits)
    assert why == [reason] and len(got) == 1 and reason in REJECT_REASONS

# ------------------------------------------------------------------ floods and the per-round caps


def flood(t, n, prefix="sybil", tag="s", G=3, ngroups=2):
    for i in range(n): t.publish(0, f"{prefix}{i:04d}", groups(ngroups, G=G, tag=tag))


def test_flood_cannot_crowd_out_by_name_or_time(tmp_path):
    "90 attacker ids, named to sort first and written first; 10 honest ones; receivers read 10. Not all-attacker."
    t = pool(tmp_path)
    flood(t, 90, prefix="0000-sybil")  # oldest mtimes, lowest names
    time.sleep(0.01)
    flood(t, 10, prefix="zz-honest", tag="h")
    honest = 0
    for _ in range(40):
        r = pool(tmp_path, max_files_per_round=10)
        got = r.collect(0)
        assert len({g.node_id for g in got}) == 10 and r.dropped == Counter(over_files=90)
        honest += len({g.node_id for g in got if g.node_id.startswith("zz-honest")})
    assert 15 <= honest <= 100, honest  # expected 40 (a tenth of 400 picks); first-by-name or -time would give 0


def test_round_caps_bound_files_bytes_groups(tmp_path):
    t = pool(tmp_path); flood(t, 30, ngroups=4)
    size = (t.round_dir(0) / f"{wid('sybil0000')}.json").stat().st_size
    r = pool(tmp_path, max_bytes_per_round=5 * size + 50)
    got = r.collect(0)
    assert len({g.node_id for g in got}) == 5 and r.dropped["over_bytes"] == 25
    r = pool(tmp_path, max_groups_per_round=10)
    assert len(r.collect(0)) == 10 and r.dropped["over_groups"] == 28  # 1 cut short, 27 not read
    assert set(DROP_REASONS) >= set(r.dropped)


def test_worst_case_collect_is_bounded(tmp_path):
    "300 max-size files, FIFOs and links in one round: one collect reads at most the byte cap, quickly."
    limits = dict(max_file_bytes=20_000, max_files_per_round=300, max_bytes_per_round=200_000)
    t = pool(tmp_path, **limits)
    G, n_groups = 4, 4
    for i in range(300):
        big = [dict(g, completions=["y" * 1100] * G, truncated=[True] * G) for g in groups(n_groups, G=G)]
        t.publish(0, f"big{i:03d}", big)
    assert max(p.stat().st_size for p in t.round_dir(0).iterdir()) <= 20_000
    for i in range(50): os.mkfifo(named(t, 0, f"fifo{i}")); os.symlink("/etc/passwd", named(t, 0, f"ln{i}"))
    r = pool(tmp_path, **limits)
    read, calls = [], []
    real = r._read_entry
    def counting(round, e, budget):
        calls.append(e.key)
        got = real(round, e, budget)
        if got: read.append(got[0])
        return got
    r._read_entry = counting
    t0 = time.perf_counter(); done, got = in_thread(lambda: r.collect(0), timeout=20); dt = time.perf_counter() - t0
    assert done and dt < 10
    assert sum(read) <= limits["max_bytes_per_round"] and len(calls) <= limits["max_files_per_round"]
    assert r.dropped["over_files"] == 100 and r.dropped["over_bytes"] > 0
    # named like rollouts, the FIFOs and links reach the reader and are refused for what they are, never opened
    assert r.rejects["not_regular"] > 0 and r.rejects["symlink"] > 0 and not r.rejects["legacy_id"]

# ------------------------------------------------------------------ cache


def test_cache_keeps_only_the_staleness_window():
    m = MemoryTransport()
    for r in range(12): m.publish(r, "x", groups(1))
    for r in range(12):
        for back in range(2): m.collect(r - back) if r - back >= 0 else None
    assert sorted({k[0] for k in m._cache}) == [10, 11]


def test_make_transport_passes_round_caps(tmp_path):
    t = make_transport("folder", root=tmp_path, experiment="e", max_files_per_round=3, max_question_chars=9)
    assert t.limits.max_files_per_round == 3 and t.limits.max_question_chars == 9


def test_symlinked_experiment_folder_refused_at_start(tmp_path):
    (tmp_path / "pool").mkdir(); (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "pool/exp")
    with pytest.raises(OSError, match="rollout folder"):
        pool(tmp_path)
