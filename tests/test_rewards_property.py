"""Property tests for sapo_nb.rewards: any text, any entry -> no exception, rewards finite and in [0, 1]."""
import math, time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from sapo_nb.rewards import (MAX_ANSWER_CHARS, check_answer, extract_answer, gold_answer, make_reward_fn,
                             score_completions)
from sapo_nb.tasks import TASK_NAMES, TaskStream

# One real entry per task of the paper mix, plus the quick mix's arithmetic, built once.
ENTRIES = [TaskStream("paper", seed=7, node_id="prop", tasks=[t]).next(1)[0] for t in TASK_NAMES]
ENTRIES += TaskStream("quick", seed=7, node_id="prop").next(3)

SETTINGS = dict(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

TAG_PIECES = ["<answer>", "</answer>", "<ANSWER>", "< / answer >", "<answer", "answer>", "</", "<", ">", "\n", " ",
              "42", "-7", "3.5", "P", "¬", "∧", "(", ")", "[", "]", ",", "1/2", "\\frac{1}{2}", "Saturday", "\x00", "🙂"]
tagged_text = st.lists(st.sampled_from(TAG_PIECES) | st.text(max_size=8), max_size=60).map("".join)
any_text = st.text() | tagged_text
# any JSON-like value, to stand in for a peer's metadata
json_like = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                         lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=10), kids, max_size=4),
                         max_leaves=20)
malformed_entries = st.one_of(
    json_like,
    st.builds(lambda a, md: {"question": "q", "answer": a, "metadata": md}, json_like, json_like),
    st.builds(lambda task, md: {"question": "q", "answer": "1", "metadata": {**md, "source_dataset": task}},
              st.sampled_from(list(TASK_NAMES) + ["no_such_task", ""]), st.dictionaries(st.text(max_size=10), json_like, max_size=4)),
)


def _ok(rewards, n):
    assert isinstance(rewards, list) and len(rewards) == n
    assert all(type(r) is float and math.isfinite(r) and 0.0 <= r <= 1.0 for r in rewards)


@settings(**SETTINGS)
@given(text=any_text, fallback=st.sampled_from([False, True, "number", "line"]))
def test_extract_answer_never_raises(text, fallback):
    a = extract_answer(text, fallback=fallback)
    assert a is None or isinstance(a, str)
    if "<" not in text and not fallback: assert a is None          # no tags, no fallback: no answer
    if a is not None and not fallback: assert len(a) <= len(text)


@settings(**SETTINGS)
@given(entry=st.sampled_from(ENTRIES), comps=st.lists(any_text, max_size=8),
       fallback=st.booleans(), partial=st.booleans())
def test_real_entries_any_completions(entry, comps, fallback, partial):
    _ok(score_completions(entry, comps, answer_fallback=fallback, partial_credit=partial), len(comps))


@settings(**SETTINGS)
@given(entry=malformed_entries, comps=st.lists(any_text, max_size=4), partial=st.booleans())
def test_malformed_entries_never_raise(entry, comps, partial):
    "Any entry: G rewards in [0, 1]; nothing but zeros without a task we know (no dict, no metadata, another name)."
    r = score_completions(entry, comps, answer_fallback=True, partial_credit=partial)
    _ok(r, len(comps))
    md = entry.get("metadata") if isinstance(entry, dict) else None
    if not (isinstance(md, dict) and md.get("source_dataset") in TASK_NAMES): assert r == [0.0] * len(comps), (entry, r)


@settings(**SETTINGS)
@given(entry=st.sampled_from(ENTRIES), inner=any_text, depth=st.integers(0, 50))
def test_nested_tags(entry, inner, depth):
    text = "<answer>" * depth + inner + "</answer>" * depth
    a = extract_answer(text)
    assert a is None or isinstance(a, str)
    _ok(score_completions(entry, [text]), 1)


@settings(**SETTINGS)
@given(entry=st.sampled_from(ENTRIES), prefix=any_text, suffix=any_text)
def test_gold_in_tags_pays_wherever_it_sits(entry, prefix, suffix):
    "The gold answer inside the last tag pair pays 1, whatever surrounds it (outside the tags)."
    gold = gold_answer(entry)
    prefix, suffix = prefix.replace("<", "«"), suffix.replace("<", "«")   # keep the surrounding text tag-free
    assert score_completions(entry, [f"{prefix}<answer>{gold}</answer>{suffix}"]) == [1.0]


@settings(**SETTINGS)
@given(entry=st.sampled_from(ENTRIES), pad=st.text(alphabet="abc xyz.", min_size=3, max_size=40))
def test_padded_gold_never_pays(entry, pad):
    "The gold string inside a longer, padded answer pays 0 (binary rewards), though partial credit may pay."
    gold = gold_answer(entry)
    pad = pad if pad.strip() else "abc"
    r = score_completions(entry, [f"<answer>{pad} {gold} {pad}</answer>"])
    _ok(r, 1)
    assert r == [0.0]


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e["metadata"]["source_dataset"])
def test_huge_completions_are_fast_and_zero(entry):
    gold = gold_answer(entry)
    mb = 1_000_000
    huge = [
        "x" * mb,
        "<answer>" + "(" * mb + "</answer>",
        "<answer>" * (mb // 8),
        "</answer>" * (mb // 9),
        "<" + " " * mb + "answer>",                      # would be quadratic with unbounded \s* around the tag
        "1" * mb,
        "<answer>" + "[" * (mb // 2) + "]" * (mb // 2) + "</answer>",
        "<answer>" + gold + " " * mb + "0</answer>",
        ("<answer>" + gold + "</answer>") * 5 + "🙂" * mb,
    ]
    t0 = time.time()
    r = score_completions(entry, huge, answer_fallback=True)
    assert time.time() - t0 < 20
    _ok(r, len(huge))
    assert r[:-1] == [0.0] * (len(huge) - 1)
    assert r[-1] == 1.0                                  # tags before a megabyte of noise still count
    assert extract_answer("5" * mb, fallback=True) == "5" * mb
    assert check_answer(entry, "1" * (MAX_ANSWER_CHARS + 1)) == 0.0


def test_reward_fn_matches_score_completions():
    fn = make_reward_fn(answer_fallback=True, partial_credit=True)
    for e in ENTRIES:
        comps = [f"<answer>{gold_answer(e)}</answer>", "nothing", "12"]
        assert fn(e, comps) == score_completions(e, comps, answer_fallback=True, partial_credit=True)
