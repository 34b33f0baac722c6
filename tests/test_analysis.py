"""Property tests of the metrics loader, and a check that importing the analysis module stays light.

Whatever a metrics file holds (torn lines, wrong types, nested junk, duplicated rounds), `load_runs`:
  * never raises;
  * keeps exactly one row per distinct valid round (a non-negative integral number, bools excluded), the last one written;
  * gives only floats (or NaN) in the metric columns, never a string or an infinity;
and `cumulative_reward` equals a sum computed here independently of the code under test.
"""
import json, math, subprocess, sys, tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings, strategies as st

from sapo_nb.analysis import METRIC_COLUMNS, cumulative_reward, load_runs

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=True, allow_infinity=True),
                    st.text(max_size=5))
# mostly small valid rounds, so duplicates (a restarted node) are common; then every kind of invalid one
rounds = st.one_of(st.integers(0, 3), st.integers(0, 3), st.integers(0, 3),
                   st.sampled_from([-1, 2.0, 2.5, True, False, None, "1", math.inf, math.nan]), st.floats(-1, 6))
values = st.one_of(scalars, st.lists(scalars, max_size=2), st.dictionaries(st.text(max_size=3), scalars, max_size=2))
rewards = st.one_of(st.floats(0, 1), st.floats(0, 1), values)
rows = st.fixed_dictionaries({"round": rounds, "reward_train": rewards},
                             optional={k: values for k in ("reward_local", "J", "loss", "seconds")})
lines = st.lists(st.one_of(rows.map(lambda r: json.dumps(r)), st.text(max_size=20), st.just("[1, 2]"), st.just('{"round": 3, "rew')),
                 max_size=25)


def valid_round(r):
    return (not isinstance(r, bool) and isinstance(r, (int, float)) and math.isfinite(r) and r >= 0 and r == int(r))


def number(v):
    return float(v) if not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) else None


@SETTINGS
@given(st.lists(lines, min_size=1, max_size=3))
@example([['{"round": 0, "reward_train": 0.25}', '{"round": 0, "reward_train": 0.75}', '{"round": 1, "reward_train": "x"}'],
          ['{"round": 2, "reward_train": Infinity, "loss": -Infinity, "J": NaN}', '{"round": true}', '{"round": -1, "reward_train": 0.5}', '{"round": 1.5}']])
def test_loader_never_raises_and_keeps_valid_rows(files):
    with tempfile.TemporaryDirectory() as d:
        expected, total = 0, 0.0
        for k, ls in enumerate(files):
            f = Path(d) / "logs" / f"n{k}" / "metrics.jsonl"
            f.parent.mkdir(parents=True)
            f.write_text("\n".join(ls))
            last = {}  # round -> the last valid row written for it (what the loader must keep)
            for line in ls:
                try: r = json.loads(line)
                except ValueError: continue
                if isinstance(r, dict) and valid_round(r.get("round")): last[int(r["round"])] = r
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
