"""The hostile-peer suite for the cost of scoring a round: one named test per attack, each failing without its defence.

A receiver re-scores every group it collects, so the time it spends scoring is a cost any peer can impose: answers
that are allowed but as costly as a checker permits, a flood of groups from one sender, and (not a peer's doing, but
a node must survive it) a scoring worker that stops reading. `select_external` scores within a per-round budget
shared max-min fairly among senders (`scoring_budget`), in a round-robin order over senders, and `ScoringWorker`
sends with a timeout, restarting a stuck worker and sending the batch once more.
"""
import os, signal, threading, time

import pytest

from sapo_nb.core import Group
from sapo_nb.rewards import RewardFn, ScoringWorker, make_reward_fn
from sapo_nb.sampler import select_external
from sapo_nb.tasks import TaskStream


def groups_of(entries, sender, answers, round=5):
    "One group per entry from `sender`, its completions ending in `answers(entry)`."
    return [Group(task=e["task"], item=e["item"], question=e["question"], node_id=sender, round=round, index=i, model="m",
                  completions=[f"Let me think.\n<answer>{a}</answer>" for a in answers(e)], truncated=[False] * len(answers(e)))
            for i, e in enumerate(entries)]


def costly_logic_answers(entry):
    "8 distinct answers as costly as the bounded propositional_logic checker allows: 16 symbols over the item's names."
    names = list(entry["metadata"]["variables"])
    formula = " ∨ ".join((names * 16)[:16])                      # 15 connectives, names of the item only: allowed
    return [formula[:1] + " " * k + formula[1:] for k in range(8)]


def sleepy_exact(entry, completions):
    "A local reward function that takes 5 ms a group (a stand-in for a checker at its bound): 1 for the gold answer."
    time.sleep(0.005)
    return [1.0 if c.endswith(f"<answer>{entry['answer']}</answer>") else 0.0 for c in completions]


@pytest.fixture(scope="module")
def worker():
    w = ScoringWorker(group_timeout=2.0)
    w.score_batch(RewardFn(), [({}, ["warm up"])])       # started and ready: a node starts its worker before round 0
    yield w
    w.close()


def test_expensive_allowed_answers_stay_within_the_round_budget(worker):
    "A round of costly-but-allowed answers (seconds of checker work) is cut at the budget; another peer's groups are still scored."
    evil = groups_of(TaskStream("paper", seed=21, node_id="evil", tasks=["propositional_logic"]).next(240), "evil", costly_logic_answers)
    honest_items = TaskStream("paper", seed=22, node_id="honest", tasks=["basic_arithmetic", "base_conversion"]).next(8)
    honest = groups_of(honest_items, "honest", lambda e: [e["answer"], "0"] * 4)
    reward_fn, budget = make_reward_fn(worker=worker), 0.5
    t0 = time.perf_counter()
    picked, info = select_external(evil + honest, 500, "uniform", reward_fn, rng=3, mix="paper", scoring_budget=budget)
    wall = time.perf_counter() - t0
    assert info["over_budget"] > 100                                # far more work was sent than the budget allows
    assert info["scoring_seconds"] <= budget + 0.1
    assert wall < budget + 3.0                                      # the rest: rebuilding 248 items, pickling the batch
    assert sum(g.node_id == "honest" for g in picked) == 8          # the fair share: every honest group was scored
    assert all(g.rewards == [1.0, 0.0] * 4 for g in picked if g.node_id == "honest")
    assert worker.timeouts == 0 and worker.crashes == 0             # cut by the budget, not by a dead worker


def test_flood_from_one_sender_does_not_starve_others():
    "400 groups from one sender, sent first, cannot crowd three other senders' groups out of the round's scoring."
    items = TaskStream("quick", seed=31, node_id="x").next(412)
    # each group its own (quick repeats a question now and then: the same question with the same completions from one
    # sender would be one group, `duplicate`)
    own = lambda e: [e["answer"], f"x{e['item']['component']}-{e['item']['index']}"]
    flood = groups_of(items[:400], "flood", own)
    others = [g for k, s in enumerate("abc") for g in groups_of(items[400 + 4 * k:404 + 4 * k], s, own)]
    # warm: one call that cannot be preempted (a first import, a worker starting) may take a whole 0.3 s budget,
    # which says nothing about fairness; a node's later rounds run warm
    select_external(others[:1], 1, "uniform", sleepy_exact, rng=7, mix="quick")
    t0 = time.perf_counter()
    picked, info = select_external(flood + others, 1000, "uniform", sleepy_exact, rng=7, mix="quick", scoring_budget=0.3)
    assert time.perf_counter() - t0 < 0.3 + 1.5                   # 400 groups at 5 ms would be 2 s
    assert sorted(g.node_id for g in picked if g.node_id != "flood") == sorted("abc" * 4)
    assert info["over_budget"] > 300 and info["rejected"] == {"over_budget": info["over_budget"]}
    again = select_external(flood + others, 1000, "uniform", sleepy_exact, rng=7, mix="quick", scoring_budget=0.3)[0]
    assert {g.node_id for g in again} == {g.node_id for g in picked}   # every sender scored again, round after round


def test_costly_rebuilds_are_charged_to_the_round_budget(monkeypatch):
    "Rebuilding items costs time before any scoring: a sender whose 200 items take 10 ms each to rebuild spends its share of the round's budget, not 2 s, and another sender's groups are still rebuilt and scored."
    import sapo_nb.sampler as sampler
    rebuild = sampler.rebuild_entry
    def slow_for_flood(g, mix):
        if g.node_id == "flood": time.sleep(0.01)   # a stand-in for the costliest item a mix can rebuild
        return rebuild(g, mix)
    monkeypatch.setattr(sampler, "rebuild_entry", slow_for_flood)
    items = TaskStream("quick", seed=41, node_id="x").next(204)
    flood, honest = groups_of(items[:200], "flood", lambda e: [e["answer"], "x"]), groups_of(items[200:], "honest", lambda e: [e["answer"], "x"])
    t0 = time.perf_counter()
    picked, info = select_external(flood + honest, 1000, "uniform", make_reward_fn(), rng=5, mix="quick", scoring_budget=0.2)
    assert time.perf_counter() - t0 < 0.2 + 0.5                    # 200 rebuilds at 10 ms would be 2 s
    assert info["over_budget"] > 150
    assert sorted(g.node_id for g in picked if g.node_id == "honest") == ["honest"] * 4


def test_stopped_worker_with_a_batch_larger_than_the_pipe_does_not_block():
    "A worker that stopped reading: the send times out, a fresh worker scores the batch, and the next call works."
    w = ScoringWorker(group_timeout=1.0)
    fn = RewardFn(answer_fallback=True)
    items = TaskStream("quick", seed=41, node_id="x").next(24)
    batch = [(e, [f"{'thinking ' * 1800}{e['answer']}", "no"] * 4) for e in items]   # ~1.6 MB pickled: more than any pipe holds
    w.score_batch(fn, batch[:1])
    stopped = w._process.pid
    os.kill(stopped, signal.SIGSTOP)
    result = []
    call = threading.Thread(target=lambda: result.append(w.score_batch(fn, batch)), daemon=True)
    try:
        t0 = time.perf_counter()
        call.start(); call.join(30)
        assert not call.is_alive(), "score_batch blocked on a worker that stopped reading"
        assert time.perf_counter() - t0 < 1.0 + 1.0 + 15            # the send's timeout, its size, a fresh start
        assert result[0] == fn.score_batch(batch)                   # sent once more, to a fresh worker: nothing lost
        assert w.send_timeouts == 1 and w._process.pid != stopped
        assert w.score_batch(fn, batch[:2]) == fn.score_batch(batch[:2])
    finally:
        try: os.kill(stopped, signal.SIGKILL)                       # the old child, if it is still there (code before)
        except ProcessLookupError: pass
        call.join(5)
        w.close()
