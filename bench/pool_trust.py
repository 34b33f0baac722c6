"""What trust costs in the rollout pool: signatures per round, and the bounded worst case of one collect.

1. Signing and verifying, for N peers per round (default 8 and 512), each publishing a `quick`-sized rollout
   (I=2 groups x G=4 completions of ~100 characters):
     sign_ms      one node signing its rollout (canonical JSON + Ed25519), per round
     verify_s     one receiver checking the signatures of the other N-1 rollouts (canonical JSON + Ed25519)
     collect_s    one cold folder collect of the round with everything (list, read, parse, verify, validate),
                  under the default caps (at most 256 entries read)
     bytes        bytes per round in the pool
2. The worst case of one collect under the default caps, in a fresh process: a round folder holding 300 valid,
   signed rollouts at max_file_bytes each, plus 50 FIFOs and 50 links (`--worst`), and a
   flood of 65,536 tiny files (`--flood`): wall seconds and the reader's peak memory above its start.

    python bench/pool_trust.py                      # 1 only
    python bench/pool_trust.py --worst --flood      # 1 and 2
"""
import argparse, json, os, random, resource, statistics, subprocess, sys, tempfile, time
from pathlib import Path

try:
    from sapo_nb.transport import FolderTransport, PoolLimits, decode_rollout
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from sapo_nb.transport import FolderTransport, PoolLimits, decode_rollout
from sapo_nb.identity import check_signature, load_key

WORDS = "the answer is so we add carry one then digit sum total result check step first next final".split()


def text(rng, chars):
    out = []
    while sum(map(len, out)) + len(out) < chars: out.append(rng.choice(WORDS))
    return " ".join(out)[:chars]


def make_groups(rng, I, G, chars):
    return [dict(task="basic_arithmetic", item=dict(component=0, seed=rng.randrange(2**31), index=rng.randrange(500)),
                 question=f"What is {rng.randint(0, 99)} + {rng.randint(0, 99)}?",
                 completions=[text(rng, chars) for _ in range(G)], truncated=[False] * G) for _ in range(I)]


def rss_mb(): return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def bench_signing(peers, I, G, chars, rounds, root, keys):
    rng, rows = random.Random(0), []
    t = FolderTransport(root, f"sign{peers}", key_dir=keys)
    for rnd in range(rounds):
        payloads = []
        t0 = time.perf_counter()
        for n in range(peers): payloads.append(t.encode(rnd, f"peer-{n:03d}", make_groups(rng, I, G, chars), G=G))
        encode_s = (time.perf_counter() - t0) / peers  # validate + canonical JSON + sign, one node
        for n, p in enumerate(payloads): t._put(rnd, f"peer-{n:03d}", p)
        objs = [json.loads(p) for p in payloads[1:]]
        t0 = time.perf_counter(); assert all(check_signature(o) is None for o in objs); verify_s = time.perf_counter() - t0
        reader = FolderTransport(root, f"sign{peers}", key_dir=keys)
        t0 = time.perf_counter(); got = reader.collect(rnd, exclude="peer-000"); collect_s = time.perf_counter() - t0
        assert reader.rejected == 0 and len(got) == min(peers - 1, 256) * I, (reader.rejects, len(got))
        rows.append(dict(sign_ms=1000 * encode_s, verify_s=verify_s, collect_s=collect_s,
                         bytes=sum(map(len, payloads)), read=min(peers - 1, 256)))
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}


def build_worst(root, keys, files, fifos, links):
    "A round folder of `files` valid signed rollouts at max_file_bytes, plus FIFOs and links named like rollouts."
    lim = PoolLimits()
    t = FolderTransport(root, "worst", key_dir=keys)
    rng = random.Random(1)
    G, per = 8, 7500  # 64 groups x 8 x 7500 chars ~ 3.9 MB, just under max_file_bytes
    gs = [dict(g, completions=[text(rng, per)] * G) for g in make_groups(rng, lim.max_groups_per_file, G, 10)]
    sizes = []
    for n in range(files):
        sizes.append(t.publish(0, f"evil-{n:03d}", gs, G=G))
    d = t.round_dir(0)
    wire = lambda alias: f"{alias}.{n:020x}.json"  # the shape of a wire id, so that the reader gets as far as opening it
    for n in range(fifos): os.mkfifo(d / wire("fifo"))
    for n in range(links): os.symlink("/dev/zero", d / wire("link"))
    return max(sizes), sum(sizes)


def build_flood(root, keys, names):
    t = FolderTransport(root, "flood", key_dir=keys)
    t.round_dir(0).mkdir()
    for n in range(names): (t.round_dir(0) / f"f{n:06d}.json").write_bytes(b"{}")


def read_once(root, experiment, keys):
    "Run in a fresh process: one cold collect of round 0 under the default caps."
    before = rss_mb()
    t = FolderTransport(root, experiment, key_dir=keys)
    t0 = time.perf_counter(); got = t.collect(0); wall = time.perf_counter() - t0
    print(json.dumps(dict(wall_s=wall, peak_mb_above_start=rss_mb() - before, groups=len(got),
                          rejects=dict(t.rejects), dropped=dict(t.dropped))))


def in_child(root, experiment, keys):
    out = subprocess.run([sys.executable, __file__, "--read", str(root), experiment, str(keys)],
                         capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--peers", type=int, nargs="+", default=[8, 512])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--I", type=int, default=2); p.add_argument("--G", type=int, default=4)
    p.add_argument("--chars", type=int, default=100)
    p.add_argument("--worst", action="store_true", help="the 300 max-size files + FIFOs + links round")
    p.add_argument("--flood", action="store_true", help="the 65,536-name flood round")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--read", nargs=3, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.read: return read_once(*a.read)
    results = dict(signing=[], worst=None, flood=None)
    with tempfile.TemporaryDirectory() as tmp:
        root, keys = Path(tmp) / "pool", Path(tmp) / "keys"
        for n in a.peers:
            print(f"signing, {n} peers ...", file=sys.stderr)
            results["signing"].append(dict(peers=n, **bench_signing(n, a.I, a.G, a.chars, a.rounds, root, keys)))
        print(f"I={a.I} groups x G={a.G} completions x ~{a.chars} chars per peer; median of {a.rounds} rounds")
        print("| peers | sign ms (one node) | verify s (N-1 rollouts) | cold collect s | entries read | bytes/round |")
        print("|---:|---:|---:|---:|---:|---:|")
        for r in results["signing"]:
            print(f"| {r['peers']} | {r['sign_ms']:.2f} | {r['verify_s']:.4f} | {r['collect_s']:.4f} | {r['read']} | {int(r['bytes']):,} |")
        if a.worst:
            print("worst case: writing 300 max-size signed rollouts ...", file=sys.stderr)
            t0 = time.perf_counter(); biggest, total = build_worst(root, keys, 300, 50, 50)
            print(f"  built in {time.perf_counter() - t0:.0f} s: {total / 1e6:.0f} MB, largest {biggest:,} bytes", file=sys.stderr)
            results["worst"] = dict(files=300, fifos=50, links=50, bytes_in_round=total, largest=biggest, **in_child(root, "worst", keys))
            w = results["worst"]
            print(f"worst case (300 x {biggest / 1e6:.1f} MB + 50 FIFOs + 50 links, {total / 1e6:.0f} MB in the round): "
                  f"collect {w['wall_s']:.2f} s, peak +{w['peak_mb_above_start']:.0f} MB, {w['groups']} groups; "
                  f"rejects {w['rejects']}, dropped {w['dropped']}")
        if a.flood:
            print("flood: writing 65,536 names ...", file=sys.stderr)
            build_flood(root, keys, 65536)
            results["flood"] = f = in_child(root, "flood", keys)
            print(f"flood (65,536 tiny .json files): collect {f['wall_s']:.2f} s, peak +{f['peak_mb_above_start']:.0f} MB; "
                  f"rejects {f['rejects']}, dropped {f['dropped']}")
    if a.json: Path(a.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
