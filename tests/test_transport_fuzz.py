"""Property tests: random JSON (and random bytes) thrown at the rollout reader.

Two properties, checked on `decode_rollout` directly and through the folder and memory transports:
  * no exception escapes, whatever arrives;
  * nothing invalid gets through: every group returned satisfies the wire schema (schema 4), checked here by an
    independent re-statement of the rules (not by calling the code under test), and comes from a rollout whose
    signature is valid for the key whose fingerprint its sender's id carries.
Plus the converse on well-formed input: a valid signed rollout loses nothing.

Near-valid rollouts are signed *after* they are mutated (when they can be encoded at all), so the fuzz reaches
the group checks instead of stopping at the signature.
"""
import hashlib, json, math, os, re, tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

from sapo_nb.core import Group
from sapo_nb.identity import canonical_json, load_key, public_key_hex, sign_rollout, wire_id
from sapo_nb.transport import (SCHEMA_VERSION, FolderTransport, MemoryTransport, PoolLimits, REJECT_REASONS, decode_rollout,
                               encode_rollout, make_rollout)

LIMITS = PoolLimits(max_completion_chars=40, max_question_chars=30, max_groups_per_file=5, max_file_bytes=6000)
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NODE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
WIRE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\.[0-9a-f]{20}")  # alias . fingerprint
KEYS = tempfile.mkdtemp()
KEY = load_key("node-1", KEYS)
PUB = public_key_hex(KEY)
NODE1 = "node-1." + hashlib.sha256(bytes.fromhex(PUB)).hexdigest()[:20]  # stated independently of identity.wire_id
assert NODE1 == wire_id("node-1", PUB)
SWARM = "5" * 32  # the pools below are given this swarm id, so a valid rollout signed for it can get through

# ---------------------------------------------------------------- independent statement of what is valid


def assert_valid(groups, expected_round, limits=LIMITS, expected_node=None, declared_G=None):
    assert isinstance(groups, list) and len(groups) <= limits.max_groups_per_file
    Gs = set()
    for g in groups:
        assert isinstance(g, Group) and set(g.to_dict()) == {"task", "item", "question", "completions", "truncated", "node_id", "round", "model", "index"}
        assert type(g.task) is str and NODE_RE.fullmatch(g.task) and ".." not in g.task
        it = g.item
        assert type(it) is dict and set(it) == {"component", "seed", "index"}
        assert all(type(v) is int and 0 <= v < 2**31 for v in it.values())
        assert type(g.question) is str and 0 < len(g.question) <= limits.max_question_chars
        cs, tr = g.completions, g.truncated
        assert type(cs) is list and type(tr) is list and len(cs) == len(tr) >= 1
        assert all(type(c) is str and 0 < len(c) <= limits.max_completion_chars for c in cs)
        assert all(type(t) is bool for t in tr)
        assert type(g.node_id) is str and WIRE_RE.fullmatch(g.node_id) and ".." not in g.node_id
        if expected_node is not None: assert g.node_id == expected_node
        if expected_round is not None: assert g.round == expected_round
        assert type(g.model) is str and type(g.index) is int
        Gs.add(len(cs))
    assert len(Gs) <= 1  # one declared G per file
    if declared_G is not None and groups: assert Gs == {declared_G}


def check_decode(data, expected_round=3, expected_node=None):
    groups, reasons = decode_rollout(data, expected_round, LIMITS, expected_node, "fz")  # must not raise
    assert all(r in REJECT_REASONS for r in reasons)
    if groups:
        assert len(data) <= LIMITS.max_file_bytes
        obj = json.loads(data)
        assert obj["schema"] == SCHEMA_VERSION and obj["experiment"] == "fz" and obj["public_key"] == PUB
        assert obj["node_id"].endswith("." + NODE1[-20:])  # the only key that signs here: only ids with its fingerprint
        KEY.public_key().verify(bytes.fromhex(obj["signature"]), canonical_json({k: v for k, v in obj.items() if k != "signature"}))
        assert_valid(groups, expected_round, expected_node=expected_node, declared_G=obj["G"])
    return groups, reasons

# ---------------------------------------------------------------- strategies

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=True, allow_infinity=True),
                         st.text(max_size=20))
any_json = st.recursive(json_scalars, lambda kids: st.one_of(st.lists(kids, max_size=5),
                                                               st.dictionaries(st.text(max_size=10), kids, max_size=5)),
                        max_leaves=25)
node_ids = st.one_of(st.sampled_from(["a", "node-1", "x.y", "../etc", "a/b", ".h", "a..b", "", "é", NODE1, NODE1.upper(),
                                     "node-1." + "0" * 20, "other." + NODE1[-20:], NODE1 + "\n"]), st.text(max_size=12))
texts = st.one_of(st.text(min_size=1, max_size=50), st.just(""), any_json)


def maybe(valid, junk=any_json, p_junk=0.06):
    "Mostly a valid value, sometimes anything."
    return st.sampled_from(range(100)).flatmap(lambda u: junk if u < 100 * p_junk else valid)


def sign_if_possible(obj):
    "Sign what can be encoded (the fuzz then reaches the group checks); leave the rest unsigned."
    try: return sign_rollout(obj, KEY)
    except (ValueError, TypeError, AttributeError): return obj


items = st.fixed_dictionaries({"component": st.integers(0, 3), "seed": st.integers(0, 2**31 - 1), "index": st.integers(0, 499)})
bad_items = st.one_of(any_json, st.fixed_dictionaries({"component": st.integers(-2, 2**32), "seed": json_scalars,
                                                       "index": st.integers(-1, 2**31)}))


@st.composite
def near_valid_rollouts(draw):
    G = draw(maybe(st.integers(1, 4), st.one_of(st.integers(-2, 6), any_json)))
    n_real = G if isinstance(G, int) and not isinstance(G, bool) and 0 < G < 10 else 2

    def group():
        g = st.fixed_dictionaries({
            "task": maybe(st.sampled_from(["basic_arithmetic", "arc_1d"]), st.one_of(node_ids, any_json)),
            "item": maybe(items, bad_items),
            "question": maybe(st.text(min_size=1, max_size=35), texts),
            "completions": maybe(st.lists(maybe(st.text(min_size=1, max_size=45), texts), min_size=n_real, max_size=n_real),
                                 st.lists(texts, max_size=6)),
            "truncated": maybe(st.lists(maybe(st.booleans(), json_scalars), min_size=n_real, max_size=n_real),
                               st.lists(json_scalars, max_size=6)),
        })
        extra = st.dictionaries(st.sampled_from(["answer", "metadata", "rewards"]), json_scalars, max_size=1)
        return st.tuples(g, maybe(st.just({}), extra, 0.1)).map(lambda t: {**t[0], **t[1]})

    obj = {
        "schema": draw(maybe(st.just(SCHEMA_VERSION), st.sampled_from([0, 1, 2, 3, "4", True, 4.0, None]))),
        "swarm": draw(maybe(st.just(SWARM), st.sampled_from(["", "0" * 32]), 0.1)),
        "experiment": draw(maybe(st.just("fz"), st.one_of(node_ids, any_json))),
        "round": draw(maybe(st.just(3), st.one_of(st.integers(-1, 5), any_json))),
        "node_id": draw(maybe(st.just(NODE1), st.one_of(node_ids, st.just(f"node-1.{'0' * 20}")), 0.1)),  # a wrong fingerprint
        "model": draw(maybe(st.text(max_size=10))),
        "created_at": draw(maybe(st.floats(0, 2e9), json_scalars)),
        "G": G,
        "groups": draw(maybe(st.lists(maybe(group(), any_json), max_size=7), any_json)),
    }
    if draw(st.integers(0, 15)) == 0: obj.pop(draw(st.sampled_from(sorted(obj))))  # drop a field sometimes
    obj = sign_if_possible(obj) if draw(st.integers(0, 19)) else obj
    if draw(st.integers(0, 19)) == 0 and "signature" in obj:  # tamper after signing, sometimes
        obj = dict(obj, round=4) if draw(st.booleans()) else dict(obj, signature="0" * 128)
    return obj


@st.composite
def valid_rollouts(draw):
    G = draw(st.integers(1, 4))
    groups = draw(st.lists(st.fixed_dictionaries({
        "task": st.sampled_from(["basic_arithmetic", "bf", "arc_1d"]), "item": items,
        "question": st.text(min_size=1, max_size=30),
        "completions": st.lists(st.text(min_size=1, max_size=40), min_size=G, max_size=G),
        "truncated": st.lists(st.booleans(), min_size=G, max_size=G)}), max_size=5))
    return sign_rollout(make_rollout(3, NODE1, groups, G=G, model=draw(st.text(max_size=8)), created_at=1.5, experiment="fz", swarm=SWARM), KEY)


def dumps(obj):
    "Bytes as an arbitrary sender might write them (NaN and lone surrogates allowed: the reader must cope)."
    return json.dumps(obj).encode()

# ---------------------------------------------------------------- properties of decode_rollout


@SETTINGS
@given(any_json)
def test_random_json_never_raises_never_leaks(obj):
    check_decode(dumps(obj))


@SETTINGS
@given(near_valid_rollouts(), st.sampled_from([None, NODE1, "node-1", "other"]))
def test_near_valid_rollouts(obj, expected_node):
    check_decode(dumps(obj), expected_node=expected_node)


@SETTINGS
@given(st.binary(max_size=300))
def test_random_bytes(data):
    groups, reasons = check_decode(data)
    assert groups == [] and len(reasons) == 1


@SETTINGS
@given(valid_rollouts(), st.integers(0, 10_000))
def test_truncated_files(obj, cut):
    data = encode_rollout(obj)
    check_decode(data[:cut % (len(data) + 1)])


@SETTINGS
@given(valid_rollouts())
def test_valid_rollouts_lose_nothing(obj):
    data = encode_rollout(obj)
    groups, reasons = check_decode(data, expected_node=NODE1)
    if len(data) > LIMITS.max_file_bytes:
        assert reasons == ["too_large"]; return
    assert reasons == []
    assert [g.wire() for g in groups] == obj["groups"]


def test_near_valid_strategy_reaches_both_outcomes():
    "Guard against a vacuous fuzz: the near-valid generator must produce accepted groups and many reject reasons."
    seen_ok, reasons = 0, set()

    @settings(max_examples=2000, deadline=None, database=None, derandomize=True)  # deterministic, and wide enough not to hang on luck
    @given(near_valid_rollouts())
    def probe(obj):
        nonlocal seen_ok
        gs, why = decode_rollout(dumps(obj), 3, LIMITS, None, "fz")  # no expected name: a wrong fingerprint gets to its check
        seen_ok += len(gs); reasons.update(why)

    probe()
    assert seen_ok > 0
    assert len(reasons) >= 12, reasons
    assert {"bad_signature", "bad_item", "bad_task", "bad_truncated", "fingerprint_mismatch"} <= reasons, reasons

# ---------------------------------------------------------------- through the transports

file_names = st.one_of(st.sampled_from(["a.json", "node-1.json", f"{NODE1}.json", f"node-1.{'0' * 20}.json", ".tmp1.tmp", "x.json.tmp", "..evil.json", "b c.json",
                                        "z.json"]), st.from_regex(r"[A-Za-z0-9_.\- ]{1,12}(\.json)?", fullmatch=True))
payloads = st.one_of(st.binary(max_size=200), any_json.map(dumps), near_valid_rollouts().map(dumps),
                     valid_rollouts().map(encode_rollout))


def folder_pool(root):
    "A folder pool whose swarm id is SWARM."
    (Path(root) / "fz").mkdir(parents=True, exist_ok=True); (Path(root) / "fz" / "swarm_id").write_text(SWARM + "\n")
    t = FolderTransport(root, "fz", limits=LIMITS, key_dir=KEYS)
    assert t.swarm == SWARM
    return t


def a_valid_rollout(n_groups=3):
    "A signed rollout of NODE1 for round 3 of SWARM's pool, as the strategies would draw one."
    groups = [dict(task="basic_arithmetic", item=dict(component=0, seed=7, index=i), question=f"q{i}",
                   completions=["a", "b"], truncated=[False, True]) for i in range(n_groups)]
    return sign_rollout(make_rollout(3, NODE1, groups, G=2, created_at=1.5, experiment="fz", swarm=SWARM), KEY)


def test_transports_accept_a_valid_rollout_whole_and_exclude_its_sender():
    "Guard against a vacuous reader fuzz: through each transport a valid rollout gets in whole, and `exclude` works."
    obj = a_valid_rollout()
    with tempfile.TemporaryDirectory() as root:
        t = folder_pool(root)
        d = t.round_dir(3); d.mkdir()
        (d / f"{NODE1}.json").write_bytes(encode_rollout(obj))
        assert [g.wire() for g in t.collect(3)] == obj["groups"] and t.collect(3, exclude=NODE1) == []
    m = MemoryTransport({3: {NODE1: encode_rollout(obj)}, "swarm": SWARM}, limits=LIMITS, experiment="fz", key_dir=KEYS)
    assert [g.wire() for g in m.collect(3)] == obj["groups"] and m.collect(3, exclude=NODE1) == []


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(file_names, payloads, max_size=6))
def test_folder_reader(files):
    with tempfile.TemporaryDirectory() as root:
        t = folder_pool(root)
        d = t.round_dir(3); d.mkdir()
        for name, data in files.items():
            try: (d / name).write_bytes(data)
            except OSError: pass  # e.g. a name the file system refuses
        for _ in range(2):  # the second poll is served from the cache
            got = t.collect(3, exclude="a")
            for node in {g.node_id for g in got}:
                assert node == NODE1 and (d / f"{node}.json").exists()  # the only key that signs
                assert_valid([g for g in got if g.node_id == node], 3, expected_node=node)
            assert all(g.node_id != "a" for g in got)
        assert set(t.rejects) <= set(REJECT_REASONS)
        assert set(t.peers()) <= {NODE1}


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(node_ids, st.one_of(payloads, any_json), max_size=6))
def test_memory_reader(entries):
    t = MemoryTransport({3: dict(entries), "swarm": SWARM}, limits=LIMITS, experiment="fz", key_dir=KEYS)
    got = t.collect(3)
    for node in {g.node_id for g in got}:
        assert node == NODE1 and isinstance(entries[node], bytes)
        assert_valid([g for g in got if g.node_id == node], 3, expected_node=node)
