"""Property tests: random JSON (and random bytes) thrown at the rollout reader.

Two properties, checked on `decode_rollout` directly and through the folder and memory transports:
  * no exception escapes, whatever arrives;
  * nothing invalid gets through: every group returned satisfies the wire schema, checked here by an independent
    re-statement of the rules (not by calling the code under test).
Plus the converse on well-formed input: a valid rollout loses nothing.
"""
import json, math, os, re, tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

from sapo_nb.transport import (FolderTransport, MemoryTransport, PoolLimits, REJECT_REASONS, decode_rollout,
                               encode_rollout, make_rollout)

LIMITS = PoolLimits(max_completion_chars=40, max_groups_per_file=5, max_file_bytes=6000)
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NODE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")

# ---------------------------------------------------------------- independent statement of what is valid

def assert_valid(groups, expected_round, limits=LIMITS, expected_node=None, declared_G=None):
    assert isinstance(groups, list) and len(groups) <= limits.max_groups_per_file
    Gs = set()
    for g in groups:
        assert set(g) == {"question", "answer", "metadata", "completions", "rewards", "node_id", "round", "model", "index"}
        assert type(g["question"]) is str and g["question"] != ""
        assert g["answer"] is None or type(g["answer"]) is str
        assert type(g["metadata"]) is dict
        cs, rs = g["completions"], g["rewards"]
        assert type(cs) is list and type(rs) is list and len(cs) == len(rs) >= 1
        assert all(type(c) is str and 0 < len(c) <= limits.max_completion_chars for c in cs)
        assert all(type(r) is float and math.isfinite(r) for r in rs)
        assert type(g["node_id"]) is str and NODE_RE.fullmatch(g["node_id"]) and ".." not in g["node_id"]
        if expected_node is not None: assert g["node_id"] == expected_node
        if expected_round is not None: assert g["round"] == expected_round
        assert type(g["model"]) is str and type(g["index"]) is int
        Gs.add(len(cs))
    assert len(Gs) <= 1  # one declared G per file
    if declared_G is not None and groups: assert Gs == {declared_G}


def check_decode(data, expected_round=3, expected_node=None):
    groups, reasons = decode_rollout(data, expected_round, LIMITS, expected_node)  # must not raise
    assert all(r in REJECT_REASONS for r in reasons)
    if groups:
        assert len(data) <= LIMITS.max_file_bytes
        obj = json.loads(data)
        assert obj["schema"] == 1
        assert_valid(groups, expected_round, expected_node=expected_node, declared_G=obj["G"])
    return groups, reasons

# ---------------------------------------------------------------- strategies

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=True, allow_infinity=True),
                         st.text(max_size=20))
any_json = st.recursive(json_scalars, lambda kids: st.one_of(st.lists(kids, max_size=5),
                                                               st.dictionaries(st.text(max_size=10), kids, max_size=5)),
                        max_leaves=25)
node_ids = st.one_of(st.sampled_from(["a", "node-1", "x.y", "../etc", "a/b", ".h", "a..b", "", "é"]), st.text(max_size=12))
texts = st.one_of(st.text(min_size=1, max_size=50), st.just(""), any_json)


def maybe(valid, junk=any_json, p_junk=0.06):
    "Mostly a valid value, sometimes anything."
    return st.sampled_from(range(100)).flatmap(lambda u: junk if u < 100 * p_junk else valid)


@st.composite
def near_valid_rollouts(draw):
    G = draw(maybe(st.integers(1, 4), st.one_of(st.integers(-2, 6), any_json)))
    n_real = G if isinstance(G, int) and not isinstance(G, bool) and 0 < G < 10 else 2

    def group():
        return st.fixed_dictionaries({
            "question": maybe(st.text(min_size=1, max_size=30), texts),
            "answer": maybe(st.one_of(st.none(), st.text(max_size=10))),
            "metadata": maybe(st.dictionaries(st.text(max_size=5), json_scalars, max_size=3)),
            "completions": maybe(st.lists(maybe(st.text(min_size=1, max_size=45), texts), min_size=n_real, max_size=n_real),
                                 st.lists(texts, max_size=6)),
            "rewards": maybe(st.lists(maybe(st.floats(-2, 2), json_scalars), min_size=n_real, max_size=n_real),
                             st.lists(json_scalars, max_size=6)),
        })

    obj = {
        "schema": draw(maybe(st.just(1), st.sampled_from([0, 2, "1", True, 1.0, None]))),
        "round": draw(maybe(st.just(3), st.one_of(st.integers(-1, 5), any_json))),
        "node_id": draw(maybe(st.just("node-1"), node_ids)),
        "model": draw(maybe(st.text(max_size=10))),
        "created_at": draw(maybe(st.floats(0, 2e9), json_scalars)),
        "G": G,
        "groups": draw(maybe(st.lists(maybe(group(), any_json), max_size=7), any_json)),
    }
    if draw(st.integers(0, 15)) == 0: obj.pop(draw(st.sampled_from(sorted(obj))))  # drop a field sometimes
    return obj


@st.composite
def valid_rollouts(draw):
    G = draw(st.integers(1, 4))
    groups = draw(st.lists(st.fixed_dictionaries({
        "question": st.text(min_size=1, max_size=30), "answer": st.one_of(st.none(), st.text(max_size=10)),
        "metadata": st.dictionaries(st.text(max_size=5), st.one_of(st.integers(), st.text(max_size=5)), max_size=3),
        "completions": st.lists(st.text(min_size=1, max_size=40), min_size=G, max_size=G),
        "rewards": st.lists(st.floats(-5, 5), min_size=G, max_size=G)}), max_size=5))
    return make_rollout(3, "node-1", groups, G=G, model=draw(st.text(max_size=8)), created_at=1.5)

# ---------------------------------------------------------------- properties of decode_rollout

@SETTINGS
@given(any_json)
def test_random_json_never_raises_never_leaks(obj):
    check_decode(json.dumps(obj).encode())


@SETTINGS
@given(near_valid_rollouts(), st.sampled_from([None, "node-1", "other"]))
def test_near_valid_rollouts(obj, expected_node):
    check_decode(json.dumps(obj).encode(), expected_node=expected_node)


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
    groups, reasons = check_decode(data, expected_node="node-1")
    if len(data) > LIMITS.max_file_bytes:
        assert reasons == ["too_large"]; return
    assert reasons == []
    assert [{k: g[k] for k in ("question", "answer", "metadata", "completions", "rewards")} for g in groups] == obj["groups"]


def test_near_valid_strategy_reaches_both_outcomes():
    "Guard against a vacuous fuzz: the near-valid generator must produce accepted groups and many reject reasons."
    seen_ok, reasons = 0, set()

    @settings(max_examples=400, deadline=None, database=None)
    @given(near_valid_rollouts())
    def probe(obj):
        nonlocal seen_ok
        gs, why = decode_rollout(json.dumps(obj).encode(), 3, LIMITS, "node-1")
        seen_ok += len(gs); reasons.update(why)

    probe()
    assert seen_ok > 0
    assert len(reasons) >= 8, reasons

# ---------------------------------------------------------------- through the transports

file_names = st.one_of(st.sampled_from(["a.json", "node-1.json", ".tmp1.tmp", "x.json.tmp", "..evil.json", "b c.json",
                                        "z.json"]), st.from_regex(r"[A-Za-z0-9_.\- ]{1,12}(\.json)?", fullmatch=True))
payloads = st.one_of(st.binary(max_size=200), any_json.map(lambda o: json.dumps(o).encode()),
                     near_valid_rollouts().map(lambda o: json.dumps(o).encode()))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(file_names, payloads, max_size=6))
def test_folder_reader(files):
    with tempfile.TemporaryDirectory() as root:
        t = FolderTransport(root, "fz", limits=LIMITS)
        d = t.round_dir(3); d.mkdir()
        for name, data in files.items():
            try: (d / name).write_bytes(data)
            except OSError: pass  # e.g. a name the file system refuses
        for _ in range(2):  # the second poll is served from the cache
            got = t.collect(3, exclude="a")
            for node in {g["node_id"] for g in got}:
                assert (d / f"{node}.json").exists()  # the file name is the sender
                assert_valid([g for g in got if g["node_id"] == node], 3, expected_node=node)
            assert all(g["node_id"] != "a" for g in got)
        assert set(t.rejects) <= set(REJECT_REASONS)
        assert all(n.endswith(".json") and not n.startswith(".") for n in (f"{p}.json" for p in t.peers()))


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(node_ids, st.one_of(payloads, any_json), max_size=6))
def test_memory_reader(entries):
    t = MemoryTransport({3: dict(entries)}, limits=LIMITS)
    got = t.collect(3)
    for node in {g["node_id"] for g in got}:
        assert isinstance(entries[node], bytes)
        assert_valid([g for g in got if g["node_id"] == node], 3, expected_node=node)
