"""Seconds per round of one node on the `quick` (cpu preset) settings: the number to compare two versions of the library by.

    python bench/round_time.py                                   # this checkout
    PYTHONPATH=/path/to/other/checkout python bench/round_time.py  # another version, on the same machine

Runs `--rounds` rounds (after `--warmup` rounds) of one `SwarmNode` with the embedded model on the `cpu` preset
(I=2, J=2, G=4, 32 new tokens), three peers publishing into an in-memory pool each round so that selection and
training see external groups, evaluation off. Prints the library's path, the median and the mean seconds per
round, and per phase. Timings compare only within one machine and one run of this script per version, run alone.
"""
import argparse, json, os, statistics, tempfile, time


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=6); p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--model", default="smollm2-135m"); p.add_argument("--out", default=None)
    a = p.parse_args()
    os.environ.setdefault("SAPO_KEY_DIR", tempfile.mkdtemp())
    import sapo_nb, torch
    from sapo_nb.config import preset
    from sapo_nb.node import SwarmNode
    from sapo_nb.transport import MemoryTransport
    torch.manual_seed(0)
    pool, root = MemoryTransport(), tempfile.mkdtemp()
    cfgs = [preset("cpu", model=a.model, node_id=f"node-{i}", root=root, transport="memory", eval_every=0,
                   checkpoint_every=0, rounds=a.warmup + a.rounds) for i in range(4)]
    nodes = [SwarmNode(cfgs[0], transport=pool, log=lambda *_: None)]
    peers = [SwarmNode(c, transport=pool, policy=nodes[0].policy, log=lambda *_: None) for c in cfgs[1:]]
    rows = []
    for r in range(a.warmup + a.rounds):
        for peer in peers: peer.begin_round(r)  # peers only publish: the measured node finds external groups
        t = time.perf_counter(); row = nodes[0].step(); wall = time.perf_counter() - t
        if r >= a.warmup: rows.append(dict(wall=wall, **row["seconds"]))
    out = dict(library=os.path.dirname(sapo_nb.__file__), rounds=a.rounds, median_s=statistics.median(r["wall"] for r in rows),
               mean_s=statistics.fmean(r["wall"] for r in rows),
               phases={k: statistics.median(r.get(k, 0.0) for r in rows) for k in rows[0] if k != "wall"})
    print(json.dumps(out, indent=1))
    if a.out: open(a.out, "w").write(json.dumps(out, indent=1))


if __name__ == "__main__": main()
