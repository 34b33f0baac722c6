"""The worst case of every audited checker (`rewards.CHECKERS`) on adversarial answers within the allowed sizes.

A peer writes the completion text; the receiver rebuilds the item (so the entry is honest) and runs the task's checker
on the extracted answer, at most `MAX_ANSWER_CHARS` (1024) characters. For each task this script builds real items of
the `paper` mix and a family of hostile answers aimed at what that checker does (long nested formulas, fresh variable
names and tautologies for propositional_logic; huge numbers and exponents for the arithmetic tasks; big and deep
matrices for binary_matrix; near-miss substrings for the default rule), and records for each answer family the
slowest `check_answer` call (best of `--repeats` runs of each answer, so the number is the answer's cost, not the
machine's noise), plus the honest cost (gold and wrong answers of the right shape) for comparison.

It also prices one group and one round: a group is G=8 completions of `max_completion_chars` (16,384) with 8
distinct worst answers (the scorer checks each distinct answer once), and a round under the default caps is
`max_groups_per_round` (2,048) such groups. That round is what `select_external`'s scoring budget must bound.

    nice python bench/checker_worst_case.py --label after      # writes bench/results/checker_worst_case_cpu.json

Results of earlier labels in the JSON are kept, so `before` (the code before a fix) and `after` sit side by side.
"""
import argparse, json, os, platform, subprocess, sys, time
from pathlib import Path

try:
    import sapo_nb
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sapo_nb.rewards import CHECKERS, MAX_ANSWER_CHARS, check_answer, gold_answer, score_completions
from sapo_nb.tasks import TaskStream

ROOT = Path(__file__).resolve().parents[1]
N = MAX_ANSWER_CHARS


def fit(s: str) -> str: return s[:N]


def logic_answers(entry):
    "Hostile propositional_logic answers: fresh lower-case names (a big truth table), tautologies that make the checker "
    "walk every row twice, long nested and negated formulas, at the checker's size limits (256 characters, 48 symbols)."
    names = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    items = list(entry["metadata"].get("variables") or ["P", "Q"])
    out = {}
    for k in (4, 8, 12, 16):  # (x ↔ x) pairs chained by ↔: a tautology, and ↔ never short-circuits
        out[f"tautology_{k}_fresh_names"] = " ↔ ".join(f"({v} ↔ {v})" for v in names[:k])
    for k in (6, 8, 9, 10):  # 47 ↔ and 48 leaves, each of k names an even number of times: a tautology of maximal size
        leaves = [names[i % k] for i in range(48)]
        out[f"iff_chain_{k}_fresh_names_16"] = "↔".join(sorted(leaves[:16]))  # the same within 16 symbols
        leaves.sort()
        out[f"iff_chain_{k}_fresh_names"] = "↔".join(leaves)
    out["tautology_item_names"] = " ↔ ".join(f"({v} ↔ {v})" for v in (items * 12)[:12])
    out["or_chain_12_fresh"] = " ∨ ".join(names[:12] + ["¬a"])
    out["nested_brackets"] = "(" * 23 + "P" + ")" * 23
    out["negation_chain"] = "¬" * 47 + "P"
    out["negation_chain_16"] = "¬" * 16 + "P"
    out["negation_chain_16_spaced"] = " ".join("¬" * 16) + " " * 200 + "P"
    out["negation_brackets_8"] = "¬(" * 8 + "P" + ")" * 8
    out["wide_iff_item_names_16"] = "↔".join((items * 17)[:17])
    out["brackets_16_item_names"] = "(" * 16 + "∨".join(items) + ")" * 16
    out["wide_iff_item_names"] = " ↔ ".join((items * 24)[:24])
    out["long_name"] = "P ∨ " + "x" * 250
    out["long_item_formula"] = " ∨ ".join((items * 17)[:17])
    out["over_symbols"] = " ∧ ".join(["P"] * 200)  # refused by the size limit: the cost of the refusal
    out["over_chars"] = "P" + " " * 1000
    return out


def number_answers():
    return {"digits_1024": "9" * N, "neg_digits": "-" + "9" * (N - 1),
            "decimal_1024": "9." + "9" * (N - 2), "exponent_huge": "9e999999999999999999",
            "exponent_neg_huge": "1e-999999999999999999", "nan": "sNaN", "inf": "-Infinity",
            "fraction_digits": "9" * 511 + "/" + "9" * 511, "latex_frac_digits": "\\frac{" + "9" * 500 + "}{" + "9" * 500 + "}",
            "latex_unclosed": "\\frac{" + "1" * 1000, "dollars": "$" * N, "spaces_digits": fit(" 1" * 512)}


def string_answers(gold: str):
    g = gold or "0"
    return {"gold_repeated": fit(g * (N // max(len(g), 1) + 1)), "near_miss_repeated": fit((g[:-1] + "#") * N),
            "one_char": "a" * N, "gold_at_end": fit("a" * (N - len(g))) + g, "unicode": "é" * N}


def matrix_answers():
    return {"deep_brackets": "[" * 512 + "]" * 512, "deep_99": "[" * 99 + "1" + "]" * 99,
            "wide_row": fit("[[" + "1," * 510 + "1]]"), "many_rows": fit("[" + "[1]," * 254 + "[1]]"),
            "huge_ints": "[[" + "9" * 1000 + "]]", "negatives": fit("[[" + "-" * 1000 + "1]]"),
            "grid_10x10_text": "\n".join(" ".join("1" for _ in range(10)) for _ in range(10))}


def answers_for(task, entry):
    gold = gold_answer(entry) or ""
    common = {"gold": gold, "empty": "", "wrong_shape": "0"}
    if task == "propositional_logic": return {**common, **logic_answers(entry)}
    if task == "binary_matrix": return {**common, **matrix_answers(), **string_answers(gold)}
    if task in ("basic_arithmetic", "decimal_arithmetic", "fraction_simplification", "calendar_arithmetic",
                "base_conversion"):
        return {**common, **number_answers(), **string_answers(gold)}
    return {**common, **string_answers(gold), **number_answers()}


def cost(entry, answer, repeats):
    "The best of `repeats` timings of one `check_answer` call, in seconds."
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter(); check_answer(entry, answer); best = min(best, time.perf_counter() - t)
    return best


def measure_task(task, items, repeats):
    entries = TaskStream("paper", seed=11, node_id="bench", tasks=[task]).next(items)
    worst, honest = {}, []
    for e in entries:
        for name, a in answers_for(task, e).items():
            if len(a) > N: a = a[:N]
            s = cost(e, a, repeats)
            if name in ("gold", "wrong_shape"): honest.append(s)
            if s > worst.get(name, (0, ""))[0]: worst[name] = (s, a[:80])
    name, (s, sample) = max(worst.items(), key=lambda kv: kv[1][0])
    return dict(items=items, worst_answer=name, worst_answer_sample=sample, worst_ms=1000 * s,
                honest_ms=1000 * max(honest), by_answer_ms={k: round(1000 * v[0], 4) for k, v in sorted(worst.items())},
                entry=entries[0]), entries, name


def group_cost(task, entries, worst_name, G=8, chars=16384, repeats=2):
    "One group of G completions of `chars` characters, each ending in a distinct variant of the worst answer."
    e = entries[0]
    base = answers_for(task, e)[worst_name]
    base = base[:N - G]
    variants = [base[:1] + " " * k + base[1:] for k in range(G)]  # distinct answers of the same cost (inner spaces)
    pad = "Let me think step by step. " * (chars // 27)
    comps = [fit_completion(pad, f"<answer>{v}</answer>", chars) for v in variants]
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter(); score_completions(e, comps); best = min(best, time.perf_counter() - t)
    return best


def fit_completion(pad, tail, chars): return pad[:max(chars - len(tail), 0)] + tail


def honest_group_cost(task, entries, G=8, chars=1500, repeats=3):
    "One honest group: G ~1,500-character completions with 8 distinct answers (gold, and wrong ones of the right shape)."
    worst = 0.0
    pad = "Let me work through this step by step, checking each intermediate result carefully. " * 18
    for e in entries[:8]:
        gold = gold_answer(e) or "0"
        answers = [gold] + [f"{gold} {k}" if task != "propositional_logic" else f"({gold}) ∨ {v}"
                            for k, v in zip(range(G - 1), (e["metadata"].get("variables") or ["P"]) * G)]
        comps = [pad[:chars] + f"<answer>{a}</answer>" for a in answers]
        best = float("inf")
        for _ in range(repeats):
            t = time.perf_counter(); score_completions(e, comps); best = min(best, time.perf_counter() - t)
        worst = max(worst, best)
    return worst


def commit():
    try: return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    except OSError: return None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--label", default="after", help="where in the JSON this run goes (e.g. before, after)")
    p.add_argument("--items", type=int, default=12, help="items per task")
    p.add_argument("--repeats", type=int, default=3, help="timings per answer (the best is kept)")
    p.add_argument("--groups-per-round", type=int, default=2048, help="the default max_groups_per_round")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "checker_worst_case_cpu.json"))
    a = p.parse_args(argv)
    rows = {}
    for task in CHECKERS:
        t0 = time.perf_counter()
        row, entries, worst_name = measure_task(task, a.items, a.repeats)
        row.pop("entry")
        row["group_worst_s"] = group_cost(task, entries, worst_name)
        row["honest_group_s"] = honest_group_cost(task, entries)
        row["round_worst_s"] = row["group_worst_s"] * a.groups_per_round
        row["round_honest_s"] = row["honest_group_s"] * a.groups_per_round
        rows[task] = row
        print(f"{task:24} worst {row['worst_ms']:9.3f} ms ({row['worst_answer']}), honest {row['honest_ms']:.3f} ms; "
              f"group {1000 * row['group_worst_s']:.1f} ms; round at the caps {row['round_worst_s']:.1f} s "
              f"(honest {row['round_honest_s']:.2f} s)  [{time.perf_counter() - t0:.1f}s]", flush=True)
    out = Path(a.out)
    res = json.loads(out.read_text()) if out.exists() else {}
    res[a.label] = dict(tasks=rows, max_answer_chars=N, groups_per_round=a.groups_per_round, G=8,
                        worst_ms=max(r["worst_ms"] for r in rows.values()),
                        round_worst_s=max(r["round_worst_s"] for r in rows.values()),
                        round_honest_s=max(r["round_honest_s"] for r in rows.values()),
                        provenance=dict(commit=commit(), python=platform.python_version(), machine=platform.machine(),
                                        cpu_count=os.cpu_count(), loadavg=os.getloadavg(), nice=os.nice(0),
                                        when=time.strftime("%Y-%m-%d %H:%M:%S")))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1, ensure_ascii=False))
    print(f"worst answer {res[a.label]['worst_ms']:.2f} ms; worst round at the caps {res[a.label]['round_worst_s']:.1f} s; "
          f"honest round at the caps {res[a.label]['round_honest_s']:.2f} s -> {out}")


if __name__ == "__main__":
    main()
