"""What reading and writing a node's own files without following links costs a `quick` round.

    python bench/private_io_cost.py [--rounds 4] [--out bench/results/private_io_cost.json]

A node's own files (metrics, lease, configs, checkpoints) and the pool are opened from the root down through
directory descriptors with `O_NOFOLLOW` at every component (`core.open_dir`, `open_nofollow`, ...), a few system
calls more per open than a plain `open`. This runs `--rounds` rounds of one node of the embedded model on the `cpu`
preset with the folder transport and three peers publishing into the same folder, under `cProfile`, and prints the
seconds per round spent inside those helpers beside the round's wall time. Run it alone: timings compare only
within one run on one machine. Checkpoints are off here: writing one is measured by `bench/checkpoint_cost.py`.
"""
import argparse, cProfile, json, os, pstats, tempfile, time

HELPERS = ("open_dir", "in_dir", "open_nofollow", "open_regular", "open_append", "list_dir", "path_kind", "remove",
           "rename", "atomic_write", "read_json_file", "read_jsonl", "append_jsonl", "trust_root", "anchor")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=4); p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--out", default=None)
    a = p.parse_args()
    os.environ.setdefault("SAPO_KEY_DIR", tempfile.mkdtemp())
    import torch, sapo_nb.core as core
    from sapo_nb.config import preset
    from sapo_nb.node import SwarmNode
    torch.manual_seed(0)
    root = tempfile.mkdtemp()
    cfgs = [preset("cpu", model=a.model, node_id=f"node-{i}", root=root, transport="folder", eval_every=0,
                   rounds=a.rounds + 1, wait_policy="none", checkpoint_every=0) for i in range(4)]
    nodes = [SwarmNode(cfgs[0], log=lambda *_: None)]
    peers = [SwarmNode(c, policy=nodes[0].policy, log=lambda *_: None) for c in cfgs[1:]]
    nodes[0].resume()
    for peer in peers: peer.begin_round(0)
    nodes[0].step()  # warm-up round: first-use costs out of the measurement
    prof, walls = cProfile.Profile(), []
    for r in range(1, a.rounds + 1):
        for peer in peers: peer.begin_round(r)
        t = time.perf_counter(); prof.enable(); nodes[0].step(); prof.disable(); walls.append(time.perf_counter() - t)
    nodes[0].close()
    stats = pstats.Stats(prof).stats  # {(file, line, name): (cc, nc, tt, ct, callers)}
    core_file = os.path.abspath(core.__file__)
    inside = {(f, l, name): v for (f, l, name), v in stats.items() if os.path.abspath(f) == core_file and name in HELPERS}
    # the time of the outermost calls only: a helper's cumulative time counted where a caller outside them called it
    outer = sum(ct for v in inside.values() for caller, (cc, nc, tt, ct) in v[4].items() if caller not in inside)
    out = dict(rounds=a.rounds, wall_s_per_round=sum(walls) / len(walls),
               helpers_s_per_round=outer / a.rounds,
               calls_per_round={k[2]: v[1] / a.rounds for k, v in sorted(inside.items(), key=lambda kv: kv[0][2])})
    out["fraction_of_round"] = out["helpers_s_per_round"] / out["wall_s_per_round"]
    print(json.dumps(out, indent=1))
    if a.out: open(a.out, "w").write(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__": main()
