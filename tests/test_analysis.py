"""Property tests of the metrics loader, and a check that importing the analysis module stays light.

Whatever a metrics file holds (torn lines, wrong types, nested junk, duplicated rounds), `load_runs`:
  * never raises;
  * keeps exactly one row per round among the rows `core.valid_metrics_row` accepts, the first one written (as
    `sapo status` and the panel read the file, and as a node's own rewrite on resume leaves it);
  * gives only floats (or NaN) in the metric columns, never a string or an infinity;
and `cumulative_reward` equals a sum computed here independently of the code under test.
"""
import json, math, subprocess, sys, tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings, strategies as st

from sapo_nb.analysis import METRIC_COLUMNS, cumulative_reward, load_runs
from sapo_nb.core import valid_metrics_row

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=True, allow_infinity=True),
                    st.text(max_size=5))
# mostly small valid rounds, so duplicates (a restarted node) are common; then every kind of invalid one
rounds = st.one_of(st.integers(0, 3), st.integers(0, 3), st.integers(0, 3),
                   st.sampled_from([-1, 2.0, 2.5, True, False, None, "1", math.inf, math.nan]), st.floats(-1, 6))
values = st.one_of(scalars, st.lists(scalars, max_size=2), st.dictionaries(st.text(max_size=3), scalars, max_size=2))
rewards = st.one_of(st.floats(0, 1), st.floats(0, 1), values)
# a node's row, every required field there, with the round, the reward and a few others drawn from good and bad values
REQUIRED = dict(node_id="n0", I=2, J=2, pool_available=0, pool_selected=0, seconds={"total": 1.0}, time=1.0)
rows = st.fixed_dictionaries({"round": rounds, "reward_train": rewards},
                             optional={k: values for k in ("reward_local", "J", "loss", "seconds")}
                             ).map(lambda r: {**REQUIRED, **r})
lines = st.lists(st.one_of(rows.map(lambda r: json.dumps(r)), st.text(max_size=20), st.just("[1, 2]"), st.just('{"round": 3, "rew')),
                 max_size=25)


def valid_round(r):
    return (not isinstance(r, bool) and isinstance(r, (int, float)) and math.isfinite(r) and r >= 0 and r == int(r))


def number(v):
    return float(v) if not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) else None


@SETTINGS
@given(st.lists(lines, min_size=1, max_size=3))
@example([[json.dumps({**REQUIRED, "round": 0, "reward_train": 0.25}), json.dumps({**REQUIRED, "round": 0, "reward_train": 0.75}),
           json.dumps({**REQUIRED, "round": 1, "reward_train": "x"})],
          ['{"round": 2, "reward_train": Infinity, "loss": -Infinity, "J": NaN}', '{"round": true}',
           json.dumps({**REQUIRED, "round": -1, "reward_train": 0.5}), json.dumps({**REQUIRED, "round": 1.5})]])
def test_loader_never_raises_and_keeps_valid_rows(files):
    with tempfile.TemporaryDirectory() as d:
        expected, total = 0, 0.0
        for k, ls in enumerate(files):
            f = Path(d) / "logs" / f"n{k}" / "metrics.jsonl"
            f.parent.mkdir(parents=True)
            f.write_text("\n".join(ls))
            last = {}  # round -> the first valid row written for it (what the loader must keep)
            for line in ls:
                try: r = json.loads(line)
                except ValueError: continue
                if valid_metrics_row(r) and valid_round(r["round"]): last.setdefault(int(r["round"]), r)
            expected += len(last)
            total += sum(number(r.get("reward_train")) or 0.0 for r in last.values())
        df = load_runs(d)
        assert len(df) == expected
        if expected:
            for c in METRIC_COLUMNS:
                if c != "model": assert df[c].dtype.kind == "f" and not df[c].abs().eq(math.inf).any(), c
            assert df.groupby(["run", "node_id", "round"]).size().max() == 1
            assert math.isclose(cumulative_reward(df, by="run").cumulative_reward.sum(), total, rel_tol=1e-9, abs_tol=1e-9)


def test_import_is_light():
    code = "import sys, sapo_nb.analysis; print(sorted(m for m in ('plotly', 'scipy', 'torch', 'transformers') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]", out


# --- seed-level statistics, checked against scipy (an independent implementation) -----------------------------

import numpy as np
import pytest
from scipy import stats

from sapo_nb.statistics import (compare_by_seed, expected_artefact, holm, paired_by_seed, paired_t, seed_power,
                                seeds_needed, sign_flip_test, simulate_no_learning, t_power, tost)


def _scipy_sign_flip(d, alternative, n_resamples=10_000):
    "scipy's paired permutation test: swap each pair's two values, statistic = mean difference."
    d = np.asarray(d, float)
    res = stats.permutation_test((d, np.zeros_like(d)), lambda x, y, axis: np.mean(x - y, axis=axis), vectorized=True,
                                 permutation_type="samples", alternative=alternative, n_resamples=n_resamples, rng=1)
    return res.pvalue


@pytest.mark.parametrize("n", [2, 3, 5, 6, 8, 11, 13])
@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_sign_flip_exact_equals_scipy(n, alternative):
    d = np.random.default_rng(n).normal(0.3, 1.0, n)
    ours = sign_flip_test(d, alternative)
    assert ours["exact"]
    assert math.isclose(ours["p_value"], _scipy_sign_flip(d, alternative), rel_tol=1e-12, abs_tol=1e-12)


def test_sign_flip_floor_equals_scipy():
    # every difference positive: the smallest p-value scipy can give is ours, and ours says when it is too large
    for n in range(2, 9):  # scipy needs two pairs
        d = np.arange(1.0, n + 1)
        ours = sign_flip_test(d)
        assert math.isclose(ours["p_value"], _scipy_sign_flip(d, "two-sided"))
        assert math.isclose(ours["min_p"], ours["p_value"]) and ours["can_reject"] == (n >= 6)


def _every_pattern(d, alternative):
    "The sign-flip p-value from every pattern, listed 2**16 at a time: what the search over two halves must give."
    n, low = len(d), min(len(d), 16)
    bits = lambda k, m: 1 - 2 * ((np.asarray(k)[..., None] >> np.arange(m)) & 1)
    sums_low, total, hits = bits(np.arange(2 ** low), low) @ d[:low], d.sum(), 0
    for k in range(2 ** (n - low)):
        s = sums_low + bits(k, n - low) @ d[low:]
        hits += int({"two-sided": np.abs(s) >= abs(total) - 1e-9, "greater": s >= total - 1e-9,
                     "less": s <= total + 1e-9}[alternative].sum())
    return hits / 2 ** n


@pytest.mark.parametrize("n", [14, 22])
@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_sign_flip_counts_every_pattern_of_many_seeds(n, alternative):
    "Past 2**n = n_perm (a plan's 24 seeds are 16.8 million patterns) the test still counts every one."
    d = np.random.default_rng(n).normal(0.2, 1.0, n)
    ours = sign_flip_test(d, alternative)
    assert ours["exact"] and math.isclose(ours["p_value"], _every_pattern(d, alternative), rel_tol=1e-12)


@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_sign_flip_counts_ties_at_the_threshold(alternative):
    "Many patterns sum exactly to the observed total (repeated differences): each of them counts, as when listed."
    d = np.tile([1.0, 2.0, -1.0], 6) / 512
    assert math.isclose(sign_flip_test(d, alternative)["p_value"], _every_pattern(d, alternative), rel_tol=1e-12)


def test_sign_flip_monte_carlo_close_to_scipy():
    d = np.random.default_rng(7).normal(0.25, 1.0, 48)  # past SIGN_FLIP_EXACT_MAX: both sides sample
    ours = sign_flip_test(d, n_perm=20_000)
    assert not ours["exact"]
    assert abs(ours["p_value"] - _scipy_sign_flip(d, "two-sided", 20_000)) < 0.015


def test_paired_t_equals_scipy():
    rng = np.random.default_rng(3)
    b = rng.normal(100, 10, 10); a = b * 1.08 + rng.normal(0, 4, 10)
    ours, ref = paired_t(a, b), stats.ttest_rel(a, b)
    ci = ref.confidence_interval(0.95)
    assert math.isclose(ours["p_value"], ref.pvalue, rel_tol=1e-10) and math.isclose(ours["t"], ref.statistic, rel_tol=1e-10)
    assert math.isclose(ours["diff_low"], ci.low, rel_tol=1e-10) and math.isclose(ours["diff_high"], ci.high, rel_tol=1e-10)
    for bound in (ours["rel_low_pct"], ours["rel_high_pct"]):  # Fieller: the ratios where the paired t test sits at 0.05
        assert math.isclose(stats.ttest_1samp(a - (1 + bound / 100) * b, 0).pvalue, 0.05, rel_tol=1e-6)


def test_power_from_noncentral_t_reaches_its_power():
    # seeds_needed's n, simulated with the t test itself (sd estimated): power at n >= 0.8, at n - 1 below
    sd, delta = 12.0, 10.0
    n = seed_power(np.array([-1.0, 1.0] * 4) * sd / np.std([-1, 1] * 4, ddof=1), 100.0)["seeds_needed"]
    assert n == seeds_needed(delta / sd) == 14
    for m, ok in ((n, lambda r: r > 0.79), (n - 1, lambda r: r < 0.8)):
        x = np.random.default_rng(m).normal(delta, sd, (40_000, m))
        t = x.mean(1) / (x.std(1, ddof=1) / np.sqrt(m))
        rate = np.mean(np.abs(t) > stats.t.ppf(0.975, m - 1))
        assert ok(rate) and abs(rate - t_power(m, delta / sd)) < 0.01, (m, rate)


def test_holm_by_hand_and_tost_against_scipy():
    p = np.array([0.04, 0.001, 0.03, 0.2])  # sorted 0.001, 0.03, 0.04, 0.2 -> x4, x3, x2, x1, kept monotone
    assert np.allclose(holm(p), [0.09, 0.004, 0.09, 0.2])
    d = np.random.default_rng(2).normal(0.05, 0.2, 9)
    res = tost(d, 0.3)
    lo = stats.ttest_1samp(d, -0.3, alternative="greater").pvalue; hi = stats.ttest_1samp(d, 0.3, alternative="less").pvalue
    assert math.isclose(res["p_value"], max(lo, hi), rel_tol=1e-12) and res["equivalent"] == (max(lo, hi) < 0.05)


def test_artefact_closed_form_matches_simulation_small_swarm():
    # a CPU-sized swarm (3 nodes, G=4): the sampler's rule against the derivation, at a low and a middling base rate
    for p in (0.1, 0.3):
        for k in (None, 2.0):  # questions alike, and spread in difficulty
            sim = simulate_no_learning(p, 2, 2, G=4, nodes=3, rounds=3000, concentration=k)["artefact_pct"]
            assert abs(sim - expected_artefact(p, 2, 2, G=4, nodes=3, concentration=k)) < 2.0


def test_compare_by_seed_is_paired():
    # a large per-seed level shared by both configurations and a small constant shift: only a paired test sees it
    import pandas as pd
    rows = []
    for s, level in enumerate(np.random.default_rng(1).normal(0, 10, 8)):
        for config, shift in (("base", 0.0), ("shared", 0.5)):
            rows += [dict(run=f"{config}/{s}", config=config, seed=s, node_id="n0", round=0, reward_local=level + shift)]
    df = pd.DataFrame(rows)
    res = compare_by_seed(df, "reward_local", "shared", "base")
    assert res["p_sign_flip"] == 2 / 2 ** 8 and res["seeds"] == 8 and res["p_value"] < 1e-6
    unpaired = stats.permutation_test((df[df.config == "shared"].reward_local, df[df.config == "base"].reward_local),
                                      lambda x, y: np.mean(x) - np.mean(y), n_resamples=5000, rng=0).pvalue
    assert unpaired > 0.5
    assert list(paired_by_seed(df, "reward_local", "shared", "base")["diff"].round(9)) == [0.5] * 8


def test_pairing_refuses_mixed_commits_unless_told():
    import pandas as pd
    rows = [dict(run=f"{c}/{s}", config=c, seed=s, node_id="n0", round=0, reward_local=float(s) + (c == "a"),
                 commits=("1" if c == "a" else "2") * 40) for s in range(3) for c in ("a", "b")]
    df = pd.DataFrame(rows)
    with pytest.raises(ValueError, match="come from 2 commits.*mixed_commits=True"):
        paired_by_seed(df, "reward_local", "a", "b")
    with pytest.raises(ValueError, match="mixed_commits=True"):
        compare_by_seed(df, "reward_local", "a", "b")
    ok = compare_by_seed(df, "reward_local", "a", "b", mixed_commits=True)
    assert ok["seeds"] == 3 and ok["provenance"].startswith("mixed commits")
    same = compare_by_seed(df.assign(commits="1" * 40), "reward_local", "a", "b")
    assert same["provenance"] == "commit " + "1" * 12


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 200), st.floats(0, 1)), min_size=2, max_size=8, unique_by=lambda t: t[0]))
def test_curve_area_is_the_mean_of_the_interpolated_curve(points):
    # the held-out 'area' summary, against the mean of the same piecewise-linear curve sampled densely by numpy
    from sapo_nb.statistics import curve_area
    x, y = map(np.array, zip(*sorted(points)))
    grid = np.linspace(x[0], x[-1], 400_001)
    assert abs(curve_area(*map(np.array, zip(*points))) - np.interp(grid, x, y).mean()) < 1e-4


def test_report_leaves_out_a_run_still_going(tmp_path):
    """A run still going (here 2/2 seed 1 at round 11 of 30) is not paired with finished runs on its latest curve
    point: the report says it is still going and compares the finished ones."""
    from sapo_nb.analysis import synthetic_runs, write_report
    root = synthetic_runs(tmp_path / "runs", eval_every=10)
    for f in (root / "2-2" / "seed_1" / "logs").glob("*/metrics.jsonl"):
        f.write_text("".join(f.read_text().splitlines(keepends=True)[:12]))
    page = write_report(root, tmp_path / "r.html").read_text()
    assert "Still going, left out of every table and figure below: 2-2/seed_1." in page
