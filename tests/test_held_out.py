"""Held out means held out: no training stream, and no peer, can reach an evaluation question.

One test per way an evaluation question could reach a training batch, each failing without its defence: a node's
own stream (small question spaces repeat texts; some tasks word one problem several ways), an item a peer names
(ReasoningGym's `Random(seed + index)` aliases across seeds), and a training item that happens to be an evaluation
problem, in the same words or in others.
"""
import pytest

from sapo_nb.core import Group
from sapo_nb.sampler import select_external
from sapo_nb.tasks import (EVAL_SET_SIZE, ITEM_CHUNK, MIXES, TRAIN_SEEDS, TRAIN_SEED_LIMIT, ItemError, TaskStream,
                           eval_items, is_eval_question, mix_components, problem_key, question_key, rebuild_item)


def exact(entry, completions): return [1.0 if c.strip() == str(entry["answer"]) else 0.0 for c in completions]


@pytest.mark.parametrize("mix", sorted(MIXES))
def test_no_training_stream_draws_an_evaluation_problem(mix):
    "20,000 training questions over four streams (two seeds, two node ids, one shared stream): no held-out problem, in any words."
    held = {problem_key(e) for e in eval_items(mix, EVAL_SET_SIZE)}
    streams = [TaskStream(mix, seed, node) for seed in (0, 1) for node in ("a", "b")]
    streams.append(TaskStream(mix, 2, "c", share_stream=True, chunk_size=7))
    drawn = [problem_key(q) for s in streams for q in s.next(4000)]
    assert len(drawn) == 20_000 and not held & set(drawn)


@pytest.mark.parametrize("mix", sorted(MIXES))
def test_no_nameable_item_aliases_an_evaluation_item(mix):
    "ReasoningGym seeds item (seed, index) with seed + index: every pair a peer can name stays below every evaluation seed."
    assert (TRAIN_SEED_LIMIT - 1) + (ITEM_CHUNK - 1) < TRAIN_SEEDS <= min(e["item"]["seed"] for e in eval_items(mix, EVAL_SET_SIZE))
    for k, (task, _, _) in enumerate(mix_components(mix)):
        for i in range(3):  # the alias that rebuilt every evaluation item before: seed 2**30 - 1, index 1 + component + i
            with pytest.raises(ItemError, match="bad_item"):
                rebuild_item(mix, task, dict(component=k, seed=TRAIN_SEEDS - 1, index=1 + k + i))
        with pytest.raises(ItemError, match="bad_item"):
            rebuild_item(mix, task, dict(component=k, seed=TRAIN_SEED_LIMIT, index=0))
        top = rebuild_item(mix, task, dict(component=k, seed=TRAIN_SEED_LIMIT - 1, index=ITEM_CHUNK - 1))  # the highest one
        assert top["item"]["seed"] + top["item"]["index"] < TRAIN_SEEDS


def test_a_peer_group_asking_an_evaluation_question_is_refused():
    "A training item that rebuilds to an evaluation text (one-digit sums repeat) is rejected by text, with its reason."
    clash = next(e for s in range(2000) for e in [rebuild_item("quick", "basic_arithmetic", dict(component=0, seed=s, index=0))]
                 if is_eval_question("quick", e))
    g = Group(task=clash["task"], item=clash["item"], question=clash["question"], completions=[clash["answer"], "0"],
              truncated=[False, False], node_id="mallory", round=0, index=0)
    picked, info = select_external([g], 1, "first", exact, mix="quick")
    assert picked == [] and info["rejected"] == {"eval_question": 1}


def test_a_peer_group_asking_an_evaluation_problem_in_other_words_is_refused():
    "A `paper` training item that words a held-out calendar problem differently is rejected: the problem is held out, not its text."
    held_texts = {question_key(e["question"]) for e in eval_items("paper", EVAL_SET_SIZE)}
    k = [c[0] for c in mix_components("paper")].index("calendar_arithmetic")
    items = (rebuild_item("paper", "calendar_arithmetic", dict(component=k, seed=s, index=i))
             for s in range(0, 50 * ITEM_CHUNK, ITEM_CHUNK) for i in range(40))
    clash = next(e for e in items if is_eval_question("paper", e) and question_key(e["question"]) not in held_texts)
    g = Group(task=clash["task"], item=clash["item"], question=clash["question"], completions=[clash["answer"], "0"],
              truncated=[False, False], node_id="mallory", round=0, index=0)
    picked, info = select_external([g], 1, "first", exact, mix="paper")
    assert picked == [] and info["rejected"] == {"eval_question": 1}


def test_evaluation_components_are_named_apart():
    "Per-component breakdowns of a mix that holds one task four times give four names."
    names = {e["component_name"] for e in eval_items("arith", 256)}
    assert names == {f"basic_arithmetic/{k}" for k in range(4)}
