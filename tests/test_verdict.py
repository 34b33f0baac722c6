"""The pre-registered verdict at its edges: boundaries met closely, seeds one arm lacks, seeds past a look, the margin,
and how a run's value is summarised. Each case is built so that scipy's paired t (or TOST) gives a stated p exactly,
and its expected verdict follows from the pre-registration, not from the code under test.
"""
import math

import numpy as np
import pandas as pd
from scipy import stats
from scipy.optimize import brentq

from sapo_nb.analysis import plan_verdict
from sapo_nb.statistics import compare_by_seed, per_seed

BASE = 0.30  # 4/0's pass@1 in every synthetic seed: a margin of ±5% is ±0.015


def plan_table(diffs, drop=()):
    "One node, one final evaluation per run; 2-2 is 4-0 + diffs[s] on seed s; `drop`: (config, seed) left out."
    rows = [dict(run=f"{c}/seed_{s}", config=c, seed=s, node_id="node-0", round=99, eval_pass1=v)
            for s, d in enumerate(diffs) for c, v in (("4-0", BASE), ("2-2", BASE + d)) if (c, s) not in drop]
    return pd.DataFrame(rows)


def with_p(n, p, sd=0.02, seed=1):
    "n differences whose two-sided paired t p-value is exactly p."
    z = np.random.default_rng(seed).normal(size=n)
    z = (z - z.mean()) / z.std(ddof=1)
    return stats.t.isf(p / 2, n - 1) * sd / math.sqrt(n) + sd * z


def extended_to(first, p, sd, seed):
    "`first` followed by 12 more differences, shifted so that all 24 have a paired t p of exactly `p`."
    rest = np.random.default_rng(seed).normal(0, sd, 12)
    shift = brentq(lambda c: stats.ttest_1samp(np.r_[first, rest + c], 0).pvalue - p, 0.0, 10 * sd)
    return np.r_[first, rest + shift]


def p_of(d): return stats.ttest_1samp(d, 0).pvalue


def test_per_seed_final_is_the_last_round_whatever_the_row_order():
    t = pd.DataFrame(dict(run="a/seed_0", config="a", seed=0, node_id="n0", round=[9, 4], eval_pass1=[0.6, 0.2]))
    assert per_seed(t, "eval_pass1", "final").value[0] == 0.6


def test_per_seed_averages_two_runs_of_one_seed():
    t = pd.DataFrame(dict(run=["a/x", "a/y"], config="a", seed=0, node_id="n0", round=0, reward_train=[1.0, 3.0]))
    got = per_seed(t, "reward_train", "sum")
    assert (got.value[0], got.runs[0]) == (2.0, 2)


def test_interim_look_between_its_boundary_and_the_final_one_continues():
    d = with_p(12, 0.0075)  # above 0.005, below 0.048
    assert abs(p_of(d) - 0.0075) < 1e-9
    v = plan_verdict(plan_table(d))
    assert (v["look"], v["boundary"], v["verdict"]) == ("interim", 0.005, "continue")


def test_final_look_just_under_its_boundary_helps():
    d = extended_to(with_p(12, 0.2, seed=2), 0.044, 0.02, seed=3)
    assert abs(p_of(d[:12]) - 0.2) < 1e-9 and abs(p_of(d) - 0.044) < 1e-9
    v = plan_verdict(plan_table(d))
    assert (v["look"], v["boundary"], v["verdict"]) == ("final", 0.048, "helps")


def test_a_crossing_wins_over_equivalence():
    "Significant and inside the margin at once: the pre-registration reads the crossing first."
    d = extended_to(with_p(12, 0.3, sd=0.004, seed=4), 0.02, 0.004, seed=5)
    m = 0.05 * BASE
    tost = max(stats.ttest_1samp(d, -m, alternative="greater").pvalue, stats.ttest_1samp(d, m, alternative="less").pvalue)
    assert tost < 0.05 and p_of(d) < 0.048 and p_of(d[:12]) > 0.005
    v = plan_verdict(plan_table(d))
    assert (v["look"], v["verdict"]) == ("final", "helps")


def test_the_margin_is_five_percent():
    "A null whose 90% interval is ±0.02: inside ±10% of 0.30 (0.03), not inside ±5% (0.015): inconclusive."
    z = np.random.default_rng(6).normal(size=24)
    z = (z - z.mean()) / z.std(ddof=1)
    d = z * 0.02 * math.sqrt(24) / stats.t.ppf(0.95, 23)
    p5 = stats.ttest_1samp(d, -0.015, alternative="greater").pvalue
    assert p5 > 0.05 and stats.ttest_1samp(d, -0.03, alternative="greater").pvalue < 0.05
    v = plan_verdict(plan_table(d))
    assert v["verdict"] == "inconclusive" and abs(v["margin"] - 0.015) < 1e-12 and abs(v["p_equivalence"] - p5) < 1e-9


def test_a_seed_one_arm_lacks_is_not_a_pair():
    v = plan_verdict(plan_table(np.full(12, 0.1) + np.linspace(-0.01, 0.01, 12), drop={("2-2", 11)}))
    assert (v["verdict"], v["pairs"]) == ("not yet", 11)


def test_the_interim_look_reads_its_own_seeds_only():
    "Seeds past the look (here a wild seed 12) do not enter it."
    d = with_p(12, 0.0075)
    v = plan_verdict(plan_table(np.r_[d, 5.0]))
    assert v["seeds"] == 12 and abs(v["diff"] - d.mean()) < 1e-12 and abs(v["p_value"] - 0.0075) < 1e-9


def test_equivalence_is_tested_at_five_percent():
    "TOST's larger one-sided p of 0.07: not equivalent at the 5% level."
    z = np.random.default_rng(7).normal(size=12)
    z = (z - z.mean()) / z.std(ddof=1)
    m = 0.01
    d = z * m / stats.t.isf(0.07, 11) * math.sqrt(12)
    r = compare_by_seed(plan_table(d).assign(reward_local=lambda t: t.eval_pass1), "reward_local", "2-2", "4-0", margin=m)
    assert abs(r["p_equivalence"] - 0.07) < 1e-9 and r["equivalent"] is False


def test_a_run_without_its_final_evaluation_is_not_a_pair():
    """Seed 3's 2-2 run has no final evaluation (round 99), only a curve point at round 74: with the plan's rounds,
    that seed is not a pair (its curve point on 64 questions never stands in for the final one on 512), so the
    first look has not landed."""
    t = plan_table(with_p(12, 0.5))
    lost = (t.config == "2-2") & (t.seed == 3)
    run = pd.concat([t[lost].assign(round=r, eval_pass1=t[lost].eval_pass1.iloc[0] if r == 74 else np.nan)
                     for r in range(100)])  # every round logged; a value at round 74 only
    t = pd.concat([t[~lost], run])
    v = plan_verdict(t, rounds=100)
    assert (v["look"], v["verdict"]) == (None, "not yet") and v["sentence"].startswith("11 of the 12 pairs"), v
    assert plan_verdict(t)["look"] == "interim"  # without the plan's rounds, its newest value stands in (as before)


def test_seeds_past_the_last_look_are_not_the_plans():
    """A 25th seed, far from the others, landed after the final look's 24: the final verdict is the 24 seeds'."""
    d = with_p(24, 0.3)
    assert plan_verdict(plan_table(list(d) + [0.5]))["p_value"] == plan_verdict(plan_table(d))["p_value"]


def test_the_sentence_never_rounds_a_p_value_onto_its_boundary():
    """p = 0.04796 at the final look: printed to four significant figures, so it never reads as the boundary 0.048."""
    first = with_p(12, 0.3)
    v = plan_verdict(plan_table(extended_to(first, 0.04796, 0.02, 5)))
    assert v["verdict"] == "helps" and "p = 0.04796 against the boundary 0.048" in v["sentence"], v["sentence"]
