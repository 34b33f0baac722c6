#!/usr/bin/env python
"""The pre-registered analysis of the `decisive` plan, recomputed with code that shares nothing with sapo_nb.

The decisive page renders its verdict through `analysis.plan_verdict` and `statistics`; this script reads the same
committed records (metrics.jsonl, eval_items.jsonl) with the standard library, numpy and scipy alone, and prints the
primary comparison (paired t with its 95% interval, Fieller's interval in % of 4/0, the exact sign-flip test, TOST at
±5%), the control comparisons, the look the landed seeds reach and its verdict by the pre-registered boundaries, and
every inconsistency it finds in the records (a missing or duplicated round, a pass@1 that is not the share right in
its per-question records, question sets that differ). Every execution of the page runs it and checks that its
primary comparison and verdict equal the page's and that it found nothing inconsistent.

    python bench/decisive_independent.py [DATA_DIR]    # default: nbs/data/decisive beside this script's repo
"""
import json
import math
import os
import sys

import numpy as np
from scipy import stats

DATA = os.path.normpath(sys.argv[1] if len(sys.argv) > 1 else
                        os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "nbs", "data", "decisive"))
ARMS = ["4-0", "2-2", "2-0"]
NODES = ["node-0", "node-1", "node-2", "node-3"]
ROUNDS = 100
FINAL_ROUND = ROUNDS - 1
N_QUESTIONS = 512
INTERIM_N, INTERIM_ALPHA = 12, 0.005
LAST_N, LAST_ALPHA = 24, 0.048
TOST_MARGIN_FRAC, TOST_ALPHA = 0.05, 0.05
EXPECTED_IJ = {"4-0": (4, 0), "2-2": (2, 2), "2-0": (2, 0)}

anomalies = []


def note(msg):
    anomalies.append(msg)


def read_jsonl(path):
    rows = []
    with open(path) as f:
        for i, line in enumerate(f):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                note(f"{path}: line {i + 1} is not valid JSON (skipped)")
    return rows


def load_node(arm, seed, node):
    """Return (final pass@1 or None, question-id tuple or None)."""
    d = os.path.join(DATA, arm, f"seed_{seed}", "logs", node)
    tag = f"{arm}/seed_{seed}/{node}"
    mpath = os.path.join(d, "metrics.jsonl")
    ipath = os.path.join(d, "eval_items.jsonl")
    if not os.path.exists(mpath):
        note(f"{tag}: no metrics.jsonl")
        return None, None
    rows = read_jsonl(mpath)
    by_round = {}
    for r in rows:
        rd = r.get("round")
        if rd in by_round:
            note(f"{tag}: duplicate metrics row for round {rd} (using the last)")
        by_round[rd] = r  # last row wins
        if r.get("node_id") not in (None, node):
            note(f"{tag}: row round {rd} has node_id={r.get('node_id')}")
        ij = (r.get("I"), r.get("J"))
        if ij != EXPECTED_IJ[arm]:
            note(f"{tag}: round {rd} has I/J={ij}, expected {EXPECTED_IJ[arm]}")
    missing = [k for k in range(ROUNDS) if k not in by_round]
    extra = sorted(k for k in by_round if not (isinstance(k, int) and 0 <= k < ROUNDS))
    if extra:
        note(f"{tag}: unexpected round indices {extra}")
    fin = by_round.get(FINAL_ROUND)
    if fin is None:  # an unfinished run: listed under the incomplete runs, not an inconsistency
        return None, None
    if fin.get("eval_pass1") is None:
        note(f"{tag}: round {FINAL_ROUND} has no final evaluation")
        return None, None
    if missing:
        note(f"{tag}: has a final but is missing rounds {missing[:10]}")
    p = float(fin["eval_pass1"])
    if fin.get("eval_n") != N_QUESTIONS:
        note(f"{tag}: final eval_n={fin.get('eval_n')} (expected {N_QUESTIONS})")

    # cross-check against per-item records
    if not os.path.exists(ipath):
        note(f"{tag}: no eval_items.jsonl to cross-check")
        return p, None
    finals = [e for e in read_jsonl(ipath) if e.get("when") == "final"]
    if not finals:
        note(f"{tag}: eval_items.jsonl has no 'final' record")
        return p, None
    if len(finals) > 1:
        note(f"{tag}: {len(finals)} 'final' records in eval_items.jsonl (using the last)")
    e = finals[-1]
    items = e.get("items", [])
    if e.get("round") != FINAL_ROUND:
        note(f"{tag}: final eval_items record has round {e.get('round')}")
    if len(items) != N_QUESTIONS:
        note(f"{tag}: final eval_items has {len(items)} items (expected {N_QUESTIONS})")
    ids = [it[0] for it in items]
    if len(set(ids)) != len(ids):
        note(f"{tag}: final eval_items has duplicated question ids")
    correct = [bool(it[-1]) for it in items]
    share = sum(correct) / len(correct) if correct else float("nan")
    if not math.isclose(share, p, abs_tol=1e-12):
        note(f"{tag}: metrics final pass@1={p} but per-item share={share} "
             f"({sum(correct)}/{len(correct)})")
    if e.get("pass1") is not None and not math.isclose(float(e["pass1"]), p, abs_tol=1e-12):
        note(f"{tag}: metrics final pass@1={p} but eval_items pass1={e['pass1']}")
    qids = tuple(sorted(ids))
    return p, qids


# ---------------------------------------------------------------- load
runs = {a: {} for a in ARMS}        # arm -> seed -> endpoint (complete runs only)
incomplete = []
qid_sets = {}
for arm in ARMS:
    adir = os.path.join(DATA, arm)
    seeds = sorted(int(s.split("_")[1]) for s in os.listdir(adir)
                   if s.startswith("seed_")) if os.path.isdir(adir) else []
    for s in seeds:
        vals = []
        for node in NODES:
            p, q = load_node(arm, s, node)
            vals.append(p)
            if q is not None:
                qid_sets.setdefault(q, []).append(f"{arm}/{s}/{node}")
        if all(v is not None for v in vals):
            runs[arm][s] = float(np.mean(vals))
        else:
            incomplete.append(f"{arm}/seed_{s} ({sum(v is not None for v in vals)}/4 finals)")
if len(qid_sets) > 1:
    note(f"final question sets differ across nodes/runs: {len(qid_sets)} distinct sets")


# ---------------------------------------------------------------- statistics
def paired(a, b, seeds):
    x = np.array([runs[a][s] for s in seeds])
    y = np.array([runs[b][s] for s in seeds])
    return x, y


def t_summary(d, conf=0.95):
    n = len(d)
    m = float(d.mean())
    if n < 2:
        return m, float("nan"), (float("nan"), float("nan")), float("nan"), float("nan")
    se = float(d.std(ddof=1) / math.sqrt(n))
    tc = stats.t.ppf(0.5 + conf / 2, n - 1)
    if se == 0:
        p = 1.0 if m == 0 else 0.0
        t = float("nan")
    else:
        t = m / se
        p = float(2 * stats.t.sf(abs(t), n - 1))
    return m, se, (m - tc * se, m + tc * se), t, p


def fieller(x, y, conf=0.95):
    """CI for mean(x)/mean(y) with paired (correlated) x, y. Returns (lo, hi) or None if unbounded."""
    n = len(x)
    if n < 2:
        return None
    xb, yb = x.mean(), y.mean()
    c = np.cov(x, y, ddof=1) / n  # covariance matrix of the two means
    v11, v22, v12 = c[0, 0], c[1, 1], c[0, 1]
    t2 = stats.t.ppf(0.5 + conf / 2, n - 1) ** 2
    A = yb * yb - t2 * v22
    B = xb * yb - t2 * v12
    C = xb * xb - t2 * v11
    disc = B * B - A * C
    if A <= 0 or disc < 0:
        return None
    r = math.sqrt(disc)
    return (B - r) / A, (B + r) / A


def signflip_p(d):
    """Exact two-sided sign-flip permutation p: share of 2^n sign patterns with |sum| >= |observed sum|."""
    n = len(d)
    if n == 0:
        return float("nan")
    if n > 24:
        raise ValueError("exact enumeration only for n <= 24")
    # differences are multiples of 1/(4*512); work in integers when exact
    scale = 4 * N_QUESTIONS
    k = d * scale
    if np.all(np.abs(k - np.round(k)) < 1e-6):
        v = np.round(k).astype(np.int64)
        tol = 0
    else:
        v = d.astype(float)
        tol = 1e-12 * max(1.0, float(np.abs(v).sum()))
    obs = abs(v.sum())
    # meet in the middle: sums of each half over all sign patterns
    h = n // 2
    def all_sums(part):
        s = np.zeros(1, dtype=v.dtype)
        for val in part:
            s = np.concatenate([s + val, s - val])
        return s
    s1 = all_sums(v[:h])
    s2 = np.sort(all_sums(v[h:]))
    # count pairs with s1+s2 >= obs-tol or s1+s2 <= -obs+tol
    hi = len(s2) - np.searchsorted(s2, obs - tol - s1, side="left")
    lo = np.searchsorted(s2, -obs + tol - s1, side="right")
    cnt = hi + lo
    if obs - tol <= 0:  # every pattern counts (obs == 0): avoid double counting
        cnt = np.full_like(cnt, len(s2))
    return float(cnt.sum()) / float(2 ** n)


def tost(d, margin):
    n = len(d)
    m = float(d.mean())
    se = float(d.std(ddof=1) / math.sqrt(n))
    if se == 0:
        return (0.0 if abs(m) < margin else 1.0), (m, m)
    p_low = float(stats.t.sf((m + margin) / se, n - 1))   # H0: mu <= -margin
    p_high = float(stats.t.cdf((m - margin) / se, n - 1))  # H0: mu >= +margin
    tc = stats.t.ppf(1 - TOST_ALPHA, n - 1)
    return max(p_low, p_high), (m - tc * se, m + tc * se)


def fmt(x, nd=4):
    return "nan" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{nd}f}"


def report_pair(a, b, seeds, full=False):
    x, y = paired(a, b, seeds)
    d = x - y
    n = len(d)
    out = {}
    m, se, ci, t, p = t_summary(d)
    print(f"  {a} minus {b}: n={n} pairs (seeds {seeds})")
    if n == 0:
        return None
    print(f"    mean {a} = {fmt(x.mean())}, mean {b} = {fmt(y.mean())}")
    print(f"    mean diff = {fmt(m)}  (SE {fmt(se)}), 95% t CI [{fmt(ci[0])}, {fmt(ci[1])}], "
          f"t = {fmt(t, 3)}, df = {n - 1}, paired t p = {fmt(p)}")
    if full:
        tt = stats.ttest_rel(x, y)
        print(f"    (scipy ttest_rel: t = {fmt(float(tt.statistic), 3)}, p = {fmt(float(tt.pvalue))})")
        rel = (x.mean() / y.mean() - 1) * 100
        fc = fieller(x, y)
        fs = ("unbounded" if fc is None else
              f"[{(fc[0] - 1) * 100:+.2f}%, {(fc[1] - 1) * 100:+.2f}%]")
        print(f"    relative diff = {rel:+.2f}% of {b}'s mean, Fieller 95% CI {fs}")
        pp = signflip_p(d)
        print(f"    exact sign-flip permutation p (2^{n} = {2 ** n} patterns) = {fmt(pp)}")
        margin = TOST_MARGIN_FRAC * y.mean()
        tp, ci90 = tost(d, margin)
        print(f"    TOST margin +/-{fmt(margin)} (5% of {b} mean): TOST p = {fmt(tp)}, "
              f"90% t CI [{fmt(ci90[0])}, {fmt(ci90[1])}] "
              f"{'inside' if -margin < ci90[0] and ci90[1] < margin else 'not inside'} margin")
        out.update(p=p, mean=m, tost_p=tp, n=n)
    return out


# ---------------------------------------------------------------- report
print(f"Independent look at {DATA}")
for a in ARMS:
    print(f"  arm {a}: complete seeds {sorted(runs[a])}")
if incomplete:
    print(f"  incomplete runs: {', '.join(incomplete)}")
all3 = sorted(set(runs["4-0"]) & set(runs["2-2"]) & set(runs["2-0"]))
pairs = sorted(set(runs["2-2"]) & set(runs["4-0"]))
all3_first12 = [s for s in all3 if s < INTERIM_N]
print(f"  seeds complete in all three arms: {len(all3)} {all3}"
      f"  (of seeds 0-11: {len(all3_first12)}/12)")
print(f"  2-2/4-0 pairs: {len(pairs)} {pairs}")

print("\nPer-seed table (endpoint = mean of 4 nodes' final pass@1)")
print(f"  {'seed':>4}  {'4-0':>8}  {'2-2':>8}  {'2-0':>8}  {'2-2 - 4-0':>10}")
for s in sorted(set().union(*[runs[a] for a in ARMS])):
    v = [runs[a].get(s) for a in ARMS]
    dd = (runs["2-2"][s] - runs["4-0"][s]) if s in pairs else None
    print(f"  {s:>4}  " + "  ".join(f"{fmt(x):>8}" if x is not None else f"{'-':>8}" for x in v)
          + f"  {(f'{dd:+.4f}' if dd is not None else '-'):>10}")

# which look are we at? A look is reached when 2-2 and 4-0 have both landed for each of its seeds (0-11, 0-23);
# the interim look is tested first, and one that crosses its boundary stops the plan there
look, look_seeds, alpha = None, pairs, None
LOOKS = ((INTERIM_N, INTERIM_ALPHA, "interim look (12 pairs)"), (LAST_N, LAST_ALPHA, "last look (24 pairs)"))
for n, bound, name in LOOKS:
    if not set(range(n)) <= set(pairs):
        break
    look, look_seeds, alpha = name, list(range(n)), bound
    d = np.array([runs["2-2"][s] - runs["4-0"][s] for s in look_seeds])
    if t_summary(d)[4] < bound:
        break

print("\nPrimary: 2-2 minus 4-0, paired by seed"
      + (f" [{look}]" if look else " [before the first look: all available pairs, informational]"))
res = report_pair("2-2", "4-0", look_seeds, full=True)

print("\nSecondary (paired by seed, seeds complete in both):")
for a, b in [("2-2", "2-0"), ("4-0", "2-0")]:
    ss = sorted(set(runs[a]) & set(runs[b]))
    report_pair(a, b, ss)

print("\nVerdict:")
if look is None:
    print(f"  before the first look: {len([s for s in pairs if s < INTERIM_N])} of the 12 pairs of seeds 0-11 have "
          f"landed; no decision (boundary at the interim look is p < {INTERIM_ALPHA})")
elif res is None:
    print("  no pairs")
else:
    p = res["p"]
    if p < alpha:
        v = "helps" if res["mean"] > 0 else "hurts"
    elif look.startswith("interim"):
        v = "continue"
    elif res["tost_p"] < TOST_ALPHA:
        v = "no effect within +/-5%"
    else:
        v = "inconclusive"
    print(f"  {look}: paired t p = {fmt(p)} vs boundary {alpha}: {v}")

print("\nData checks:")
if anomalies:
    for a in anomalies:
        print("  - " + a)
else:
    print("  no anomalies: every round 0-99 present once per node, I/J match the arm, final eval_n = 512,")
    print("  every final pass@1 equals its eval_items pass1 and the share correct of its 512 item records,")
    print(f"  all {sum(len(v) for v in qid_sets.values())} finals use the same 512 question ids")
