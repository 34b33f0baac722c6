"""The hostile-peer suite for scoring: one named test per attack on the reward function, each failing without its defence.

The attacker writes completion text (and, before gold answers were rebuilt locally, could write the answer field
too). It aims at the checkers: text that a checker hands to `eval` or to SymPy, answers that make a checker's work or
memory explode, answers that copy the question back. The worker tests use the documented hook of
`ScoringWorker.score_batch`: any picklable `reward_fn(entry, completions)` stands in for a checker, here the
module-level functions below (a spawned worker imports this module to run them).
"""
import math, os, signal, time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from reasoning_gym.factory import DATASETS

from sapo_nb.rewards import (CHECKERS, RewardFn, ScoringWorker, check_answer, get_checker, gold_answer, is_answerable,
                             make_reward_fn, score_completions, shared_worker)
from sapo_nb.tasks import MIXES, TaskStream


# --- stand-ins for a checker gone wrong (run inside the worker) -------------------------------------------------------
def honest_or_hangs(entry, completions):
    "Pays 1 per completion, unless the entry says hang: then it never returns (`deaf`: the worker's own timer ignored)."
    if entry.get("hang"):
        if entry.get("deaf"): signal.signal(signal.SIGALRM, signal.SIG_IGN)
        time.sleep(600)
    return [1.0] * len(completions)

def honest_or_crashes(entry, completions):
    "Pays 1 per completion, unless the entry says crash: then the process dies on the spot."
    if entry.get("crash"): os._exit(3)
    return [1.0] * len(completions)

def honest_or_eats_memory(entry, completions):
    "Pays 1 per completion after allocating `entry['bytes']` (3 GiB: more than the worker's cap, less than the machine)."
    bytearray(entry.get("bytes", 0))
    return [1.0] * len(completions)


def returns_entry(entry, completions):
    "Returns whatever the entry holds, as a checker's verdict."
    return entry


@pytest.fixture(scope="module")
def worker():
    "One worker for the module's tests (each start imports ReasoningGym, ~1-2 s); counters are checked as deltas."
    w = ScoringWorker(group_timeout=3.0)
    yield w
    w.close()


def counts(w): return w.starts, w.timeouts, w.crashes


# --- checker code that ran the answer ---------------------------------------------------------------------------------
def payload(marker): return f"__import__('pathlib').Path({str(marker)!r}).touch()"

def attempt(tmp_path, task, make_entry, answer_is_payload=True):
    "Score a completion aimed at `task`'s checker; return the reward and whether the payload ran."
    marker = tmp_path / f"ran_{task}"
    entry = make_entry(payload(marker))
    entry["metadata"]["source_dataset"] = task
    answer = payload(marker) if answer_is_payload else "[1]"
    rewards = score_completions(entry, [f"Sure.<answer>{answer}</answer>"], partial_credit=True)
    return rewards, marker.exists()


def test_number_sorting_gold_eval_does_not_run(tmp_path):
    "number_sorting's checker evals the gold answer when it is not JSON: a peer-supplied answer field ran as code."
    rewards, ran = attempt(tmp_path, "number_sorting",
                           lambda p: {"question": "q", "answer": p, "metadata": {"direction": "ascending"}}, answer_is_payload=False)
    assert not ran and rewards == [0.0]


def test_string_insertion_eval_does_not_run(tmp_path):
    "string_insertion's checker evals the answer (to accept a list of characters)."
    rewards, ran = attempt(tmp_path, "string_insertion", lambda p: {"question": "q", "answer": "abc", "metadata": {}})
    assert not ran and rewards == [0.0]


def test_spiral_matrix_eval_does_not_run(tmp_path):
    "spiral_matrix's checker evals the answer (to accept a Python list)."
    rewards, ran = attempt(tmp_path, "spiral_matrix", lambda p: {"question": "q", "answer": "1 2", "metadata": {}})
    assert not ran and rewards == [0.0]


def test_n_queens_eval_does_not_run(tmp_path):
    "n_queens's checker evals the answer (to accept a board as a list)."
    rewards, ran = attempt(tmp_path, "n_queens", lambda p: {"question": "q", "answer": "x", "metadata": {"valid_answers": ["x"]}})
    assert not ran and rewards == [0.0]


def test_polynomial_multiplication_sympy_does_not_run(tmp_path):
    "polynomial_multiplication's checker hands the answer to SymPy's parse_expr, which evaluates it."
    rewards, ran = attempt(tmp_path, "polynomial_multiplication", lambda p: {"question": "q", "answer": "x**2", "metadata": {}})
    assert not ran and rewards == [0.0]


def test_payloads_do_not_run_in_the_worker_either(tmp_path):
    "The same five payloads through the bounded reward function a node uses: nothing runs, everything scores 0."
    marker = tmp_path / "ran"
    groups = [({"question": "q", "answer": "x", "metadata": {"source_dataset": t, "valid_answers": ["x"]}},
               [f"<answer>{payload(marker)}</answer>"])
              for t in ("string_insertion", "spiral_matrix", "n_queens", "polynomial_multiplication", "binary_matrix")]
    assert make_reward_fn(partial_credit=True, bounded=True).score_batch(groups) == [[0.0]] * len(groups)
    assert not marker.exists()


# --- only audited checkers ----------------------------------------------------------------------------------------------
def test_unaudited_checker_is_refused():
    "Every ReasoningGym task outside the allow-list is refused by name; the allow-list is exactly our mixes' tasks."
    assert set(CHECKERS) == {t for m in MIXES.values() for t, *_ in m["tasks"]}
    for task in sorted(set(DATASETS) - set(CHECKERS)):
        with pytest.raises(ValueError, match="allowed"):
            get_checker(task)
        assert check_answer({"question": "q", "answer": "1", "metadata": {"source_dataset": task}}, "1", partial_credit=True) == 0.0


@settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(task=st.sampled_from(sorted(DATASETS)), text=st.text(max_size=40) | st.sampled_from(["1", "[1, 2]", "x**2", "P", "1/2"]),
       partial=st.booleans())
def test_fuzz_any_reasoning_gym_task(task, text, partial):
    "Any task name ReasoningGym knows, any answer (here also its own gold): never raises, and pays 0 unless audited."
    entry = {"question": "q", "answer": text, "metadata": {"source_dataset": task}}
    r = check_answer(entry, text, partial_credit=partial)
    assert type(r) is float and math.isfinite(r) and 0.0 <= r <= 1.0
    if task not in CHECKERS: assert r == 0.0


# --- propositional logic --------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def logic_items():
    return TaskStream("paper", seed=3, node_id="hostile", tasks=["propositional_logic"]).next(30)


def test_propositional_lowercase_variable_blowup(logic_items):
    "20 lower-case names in the answer made the library build a 2**22-row truth table (18 s, 3.6 GB); now refused in milliseconds."
    blowup = " ∨ ".join("abcdefghijklmnopqrst")
    t0 = time.perf_counter()
    rewards = [score_completions(e, [f"<answer>{blowup}</answer>"], partial_credit=True) for e in logic_items[:3]]
    assert time.perf_counter() - t0 < 0.5
    assert rewards == [[0.0]] * 3


def test_propositional_answer_over_names_of_its_own_scores_zero(logic_items):
    """An answer over names the item never uses, inside the size limits (15 fresh names, 14 connectives), pays nothing,
    in milliseconds: ReasoningGym's checker pays some such answers and builds its truth table over every name."""
    fresh = " ∨ ".join("abcdefghijklmno")
    assert len(fresh.replace(" ", "")) <= 48 and fresh.count("∨") <= 16  # so only the name rule can stop it
    assert not any(set("abcdefghijklmno") & set(" ".join(e["metadata"]["premises"])) for e in logic_items[:3])
    t0 = time.perf_counter()
    rewards = [score_completions(e, [f"<answer>{fresh}</answer>"], partial_credit=True) for e in logic_items[:3]]
    assert time.perf_counter() - t0 < 0.5
    assert rewards == [[0.0]] * 3


def test_propositional_premise_repetition_scores_zero(logic_items):
    "Every premise follows from the premises: copying one back (or several, respaced, rebracketed) pays nothing."
    for e in logic_items:
        premises = e["metadata"]["premises"]
        copies = [*premises, *(f"  (({p.replace(' ', '')}))  " for p in premises), " ∧ ".join(f"({p})" for p in reversed(premises))]
        assert score_completions(e, [f"<answer>{c}</answer>" for c in copies], partial_credit=True) == [0.0] * len(copies)
        gold = gold_answer(e)
        assert is_answerable(e) and gold not in premises
        assert score_completions(e, [f"<answer>{gold}</answer>"]) == [1.0]


# --- the worker's bounds ------------------------------------------------------------------------------------------------------
def test_hanging_checker_is_cut_off(worker):
    "A checker that never returns costs its own group one timeout; the groups around it keep their scores."
    assert worker.score_batch(honest_or_hangs, [({}, ["x"])]) == [[1.0]]  # the worker is up
    before = counts(worker)
    t0 = time.perf_counter()
    out = worker.score_batch(honest_or_hangs, [({}, ["a", "b"]), ({"hang": True}, ["c"]), ({}, ["d"])])
    assert out == [[1.0, 1.0], [0.0], [1.0]]
    assert time.perf_counter() - t0 < 30
    assert counts(worker)[1] == before[1] + 1                     # one timeout
    assert counts(worker)[0] == before[0]                         # cut by the worker's own timer: no restart
    assert worker.score_batch(honest_or_hangs, [({}, ["e"])]) == [[1.0]]


def test_checker_deaf_to_the_workers_timer_is_killed(worker):
    "A checker that switches the worker's timer off and hangs: the node's deadline kills the worker; the rest is scored."
    before = counts(worker)
    t0 = time.perf_counter()
    out = worker.score_batch(honest_or_hangs, [({}, ["a"]), ({"hang": True, "deaf": True}, ["b"]), ({}, ["c"])])
    assert out == [[1.0], [0.0], [1.0]] and time.perf_counter() - t0 < 30
    after = counts(worker)
    assert after[1] == before[1] + 1 and after[0] >= before[0] + 1  # one timeout, and a fresh worker for the rest


def test_memory_eating_checker_is_cut_off(worker):
    "A checker that asks for 3 GiB (more than the worker's cap, less than the machine) gets MemoryError: its group scores 0."
    before = counts(worker)
    out = worker.score_batch(honest_or_eats_memory, [({}, ["a"]), ({"bytes": 3 * 2**30}, ["b", "c"]), ({"bytes": 2**20}, ["d"])])
    assert out == [[1.0], [0.0, 0.0], [1.0]]
    assert counts(worker) == before                               # caught in the worker: no restart needed


def test_worker_restarts_after_crash_and_keeps_scoring(worker):
    "A checker that kills the worker costs its own group; a fresh worker scores the rest and the next batches."
    before = counts(worker)
    out = worker.score_batch(honest_or_crashes, [({}, ["a"]), ({"crash": True}, ["b"]), ({}, ["c", "d"]), ({"crash": True}, ["e"])])
    assert out == [[1.0], [0.0], [1.0, 1.0], [0.0]]
    after = counts(worker)
    assert after[2] == before[2] + 2 and after[0] >= before[0] + 1
    assert worker.score_batch(honest_or_crashes, [({}, ["f"])]) == [[1.0]]


def test_checker_junk_is_zero(worker):
    "Whatever a checker returns (NaN, 2.0, a 400-digit integer, text, the wrong count), the node gets G floats in [0, 1]."
    out = worker.score_batch(returns_entry, [([float("nan")], ["a"]), ([2.0], ["b"]), ([10**400], ["c"]), (["x"], ["d"]),
                                             ([0.5, 0.5], ["e"]), ("1", ["f"]), ([True], ["g"]), ([0.5], ["h"])])
    assert out == [[0.0]] * 7 + [[0.5]]


def test_bounded_scores_equal_in_process():
    "The bounded reward function a node uses gives exactly the in-process rewards on real items of every task."
    items = TaskStream("paper", seed=5, node_id="hostile").next(18)
    groups = [(e, [f"<answer>{gold_answer(e)}</answer>", "<answer>0</answer>", f"it is {gold_answer(e)} maybe", "none"]) for e in items]
    assert not ScoringWorker().alive                              # nothing starts until it scores
    bounded = make_reward_fn(answer_fallback=True, partial_credit=True, bounded=True)
    assert bounded.worker is shared_worker() is make_reward_fn(bounded=True).worker   # one worker per process
    assert bounded.score_batch(groups) == RewardFn(answer_fallback=True, partial_credit=True).score_batch(groups)
    assert bounded(*groups[0]) == RewardFn(answer_fallback=True, partial_credit=True)(*groups[0])
