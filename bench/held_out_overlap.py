"""How many held-out evaluation questions a node's training streams ask, word for word, per mix.

Three measures, all by normalized question text (whitespace collapsed, case folded):
* per plan run: the four nodes of one seed (`node-0` .. `node-3`), 400 questions each (100 rounds of I = 4): how many
  of the evaluation questions (64, and 512 where the library has that many) occur in the run's training questions;
* in bulk: 20,000 training questions over eight streams (seeds 0-3, two node ids each): the same count, and how many
  generated items the streams passed over because their text is an evaluation question (what the skip removes);
* by a peer: how many of the first 64 evaluation items an item a peer names (another seed and index) rebuilds.

It imports whichever `sapo_nb` is on the path, so the same script measures a library before and after a change:

    PYTHONPATH=../old nice python bench/held_out_overlap.py --label before
    nice python bench/held_out_overlap.py --label after      # merges into bench/results/held_out_overlap.json
"""
import argparse, json, subprocess, sys, time
from pathlib import Path

import sapo_nb
from sapo_nb.tasks import ITEM_CHUNK, MIXES, ItemError, TaskStream, eval_items, rebuild_item

def key(text): return " ".join(str(text).split()).casefold()  # `tasks.question_key`, which the library before lacks

def eval_keys(mix, n):
    "The first `n` evaluation questions of `mix` as keys, or None where the library has fewer."
    try: return {key(e["question"]) for e in eval_items(mix, n)}
    except ValueError: return None

def overlap(held, questions): return None if held is None else len(held & questions)

def per_run(mix, seed, sizes):
    "Evaluation questions met in one plan run's training questions (four nodes, 400 questions each)."
    asked = {key(q["question"]) for node in range(4) for q in TaskStream(mix, seed, f"node-{node}").next(400)}
    return {n: overlap(eval_keys(mix, n), asked) for n in sizes}

def bulk(mix, sizes):
    "Evaluation questions met in 20,000 training questions over eight streams."
    streams = [TaskStream(mix, seed, node) for seed in range(4) for node in ("a", "b")]
    asked = {key(q["question"]) for s in streams for q in s.next(2500)}
    skipped = [getattr(s, "held_out", None) for s in streams]  # items a stream passed over as evaluation questions
    return dict(distinct_training_texts=len(asked), skipped_as_held_out=None if None in skipped else sum(skipped),
                **{str(n): overlap(eval_keys(mix, n), asked) for n in sizes})

def aliased(mix, n=64):
    """Evaluation items a peer can rebuild by naming another (seed, index): ReasoningGym seeds item `index` of a dataset
    with `Random(seed + index)`, so the pair with the largest index and the same sum is the one most likely accepted."""
    hits = 0
    for e in eval_items(mix, n):
        it, idx = e["item"], ITEM_CHUNK - 1
        named = dict(component=it["component"], seed=it["seed"] + it["index"] - idx, index=idx)
        try: hits += key(rebuild_item(mix, e["task"], named)["question"]) == key(e["question"])
        except ItemError: pass
    return hits

def commit():
    src = Path(sapo_nb.__file__).resolve().parent
    return subprocess.run(["git", "-C", str(src), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", required=True, help="the key this library's numbers are stored under, e.g. before/after")
    ap.add_argument("--mixes", nargs="*", default=sorted(MIXES))
    ap.add_argument("--seeds", type=int, default=6, help="plan runs (seeds) to measure per mix")
    ap.add_argument("--out", default="bench/results/held_out_overlap.json")
    args = ap.parse_args()
    sizes, result, t0 = (64, 512), dict(commit=commit(), mixes={}), time.perf_counter()
    for mix in args.mixes:
        runs = [per_run(mix, s, sizes) for s in range(args.seeds)]
        result["mixes"][mix] = dict(per_run={str(n): [r[n] for r in runs] for n in sizes}, bulk=bulk(mix, sizes),
                                    rebuilt_by_alias_of_64=aliased(mix))
        print(mix, json.dumps(result["mixes"][mix]), f"{time.perf_counter() - t0:.0f} s", flush=True)
    out = Path(args.out)
    merged = json.loads(out.read_text()) if out.exists() else {}
    merged[args.label] = result
    out.write_text(json.dumps(merged, indent=1) + "\n")
