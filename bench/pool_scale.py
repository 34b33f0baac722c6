"""How the rollout pool scales with the number of peers.

For N simulated peers per round (default 8, 64, 512), every peer publishes I groups of G completions to the pool,
then one reader node collects the round. Measured per round, median over --rounds rounds:
  publish_s   seconds to publish one peer's rollout (validate + sign + atomic write / DHT store)
  collect_s   one cold collect of the whole round (list + read + parse + verify + validate every peer's entry;
              the per-round caps are lifted here so that every peer is read)
  poll_s      a second collect of the unchanged round (what a node pays per poll while it waits for peers)
  bytes       bytes per round in the pool (all peers)
on the shared-folder transport (a local temp folder), and with --hivemind also on the hivemind DHT (N nodes on
loopback plus the reader; 8 peers by default).

    python bench/pool_scale.py                      # folder: 8, 64, 512 peers
    python bench/pool_scale.py --hivemind           # plus hivemind with 8 peers, if hivemind is importable
"""
import argparse, json, os, random, statistics, sys, tempfile, time
from pathlib import Path

try:
    from sapo_nb.transport import FolderTransport, HivemindTransport, PoolLimits
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from sapo_nb.transport import FolderTransport, HivemindTransport, PoolLimits

WORDS = "the answer is so we add carry one then digit sum total result check step first next final".split()


def make_groups(rng, peer, rnd, I, G, chars):
    def text():
        out = []
        while sum(map(len, out)) + len(out) < chars: out.append(rng.choice(WORDS))
        return " ".join(out) + f" <answer>{rng.randint(0, 99)}</answer>"
    return [dict(task="basic_arithmetic", item=dict(component=0, seed=rng.randrange(2**31), index=i),
                 question=f"[{peer} r{rnd} q{i}] What is {rng.randint(0, 99)} + {rng.randint(0, 99)}?",
                 completions=[text() for _ in range(G)], truncated=[False] * G)
            for i in range(I)]

UNCAPPED = PoolLimits(max_files_per_round=10**6, max_bytes_per_round=10**10, max_groups_per_round=10**7)


def measure(publishers, reader, peers, rounds, I, G, chars, bytes_of_round, seed=0):
    "publishers: list of (transport, node_id); returns the median row."
    rng, rows = random.Random(seed), []
    for rnd in range(rounds):
        payloads = [(t, n, make_groups(rng, n, rnd, I, G, chars)) for t, n in publishers]
        t0 = time.perf_counter(); sent = sum(t.publish(rnd, n, gs, G=G, model="bench") for t, n, gs in payloads)
        publish_s = (time.perf_counter() - t0) / len(publishers)
        reader._cache.clear()
        t0 = time.perf_counter(); got = reader.collect(rnd, exclude="reader"); collect_s = time.perf_counter() - t0
        t0 = time.perf_counter(); again = reader.collect(rnd, exclude="reader"); poll_s = time.perf_counter() - t0
        assert len(got) == len(again) == peers * I, (len(got), peers * I)
        assert reader.rejected == 0, reader.rejects
        rows.append(dict(publish_s=publish_s, collect_s=collect_s, poll_s=poll_s,
                         bytes=bytes_of_round(rnd) if bytes_of_round else sent, groups=len(got)))
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}


def bench_folder(peers, rounds, I, G, chars):
    with tempfile.TemporaryDirectory() as root:
        t = FolderTransport(root, "bench", limits=UNCAPPED)
        reader = FolderTransport(root, "bench", limits=UNCAPPED)
        size = lambda rnd: sum(p.stat().st_size for p in t.round_dir(rnd).glob("*.json"))
        return measure([(t, f"peer-{i:03d}") for i in range(peers)], reader, peers, rounds, I, G, chars, size)


def bench_hivemind(peers, rounds, I, G, chars):
    opts = dict(host_maddrs=["/ip4/127.0.0.1/tcp/0"], nat_port_map=False, auto_nat=False, use_relay=False)
    reader = HivemindTransport("bench", limits=UNCAPPED, **opts)
    nodes = []
    try:
        t0 = time.perf_counter()
        nodes = [HivemindTransport("bench", initial_peers=reader.maddrs, **opts) for _ in range(peers)]
        print(f"  started {peers + 1} DHT nodes in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        return measure([(t, f"peer-{i:03d}") for i, t in enumerate(nodes)], reader, peers, rounds, I, G, chars, None)
    finally:
        for t in nodes + [reader]: t.close()


def table(results):
    lines = ["| transport | peers | publish s/peer | collect s (cold) | poll s (warm) | bytes/round | groups |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, peers, r in results:
        lines.append(f"| {name} | {peers} | {r['publish_s']:.4f} | {r['collect_s']:.4f} | {r['poll_s']:.4f} "
                     f"| {int(r['bytes']):,} | {int(r['groups'])} |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--peers", type=int, nargs="+", default=[8, 64, 512])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--I", type=int, default=4, help="groups each peer publishes")
    p.add_argument("--G", type=int, default=8, help="completions per group")
    p.add_argument("--chars", type=int, default=400, help="characters per completion (~100 tokens)")
    p.add_argument("--hivemind", action="store_true", help="also run the hivemind DHT")
    p.add_argument("--hivemind-peers", type=int, nargs="+", default=[8])
    p.add_argument("--json", help="also write the results here")
    a = p.parse_args(argv)
    os.environ["SAPO_KEY_DIR"] = tempfile.mkdtemp()  # the simulated peers' keys: never the user's key folder
    results = []
    for n in a.peers:
        print(f"folder, {n} peers ...", file=sys.stderr)
        results.append(("folder", n, bench_folder(n, a.rounds, a.I, a.G, a.chars)))
    if a.hivemind:
        try:
            import hivemind.dht.node  # noqa: F401
        except Exception as e:
            print(f"hivemind skipped: not importable ({e})", file=sys.stderr)
        else:
            for n in a.hivemind_peers:
                print(f"hivemind, {n} peers ...", file=sys.stderr)
                results.append(("hivemind", n, bench_hivemind(n, a.rounds, a.I, a.G, a.chars)))
    print(f"I={a.I} groups x G={a.G} completions x ~{a.chars} chars per peer; median of {a.rounds} rounds")
    print(table(results))
    if a.json: Path(a.json).write_text(json.dumps([dict(transport=t, peers=n, **r) for t, n, r in results], indent=1))


if __name__ == "__main__":
    main()
