"""What a planted file or folder can cost a reader of a run folder (`sapo status`, the panel, `sapo report`, a node
resuming) is bounded: rows read, names kept, folders looked at and configs held have caps far beyond any real run, so
a peer who can write under a shared root cannot make a reader run out of memory or time. Each test fails without its
cap (measured without them: a 0.1 MB file of distinct row keys took `load_runs` 0.5 GB; 3 MB of `{}` lines took a
reader 138 MB).
"""
import json, tracemalloc
from pathlib import Path

import pytest

from conftest import sapo_cli as cli


def rows(node:str, n:int, **kw) -> str:
    return "".join(json.dumps(dict(round=r, node_id=node, I=2, J=2, reward_train=0.5, pool_available=0,
                                   pool_selected=0, seconds=dict(total=1.0), time=1.0 + r, **kw)) + "\n"
                   for r in range(n))


def test_a_row_key_per_row_does_not_make_a_column_per_row(tmp_path):
    "A metrics file whose every row carries a name of its own: the table keeps 64 such names, and says so."
    from sapo_nb.analysis import EXTRA_COLUMNS_MAX, load_runs
    logs = tmp_path / "run" / "logs" / "node-0"; logs.mkdir(parents=True)
    (logs / "metrics.jsonl").write_text("".join(
        json.dumps(dict(json.loads(line), **{f"x{r}": 1})) + "\n" for r, line in enumerate(rows("node-0", 2000).splitlines())))
    with pytest.warns(RuntimeWarning, match="1936 values under further names were left out"): df = load_runs(tmp_path / "run")
    assert len(df) == 2000 and sum(c.startswith("x") for c in df.columns) == EXTRA_COLUMNS_MAX


def test_a_row_with_a_flood_of_peers_is_not_a_row(tmp_path):
    """A row naming 10,000 peers (a node writes 32 at most): readers skip it, so `sapo status` neither holds nor prints
    the flood."""
    from sapo_nb.core import PEERS_PER_ROW, valid_metrics_row
    peer = dict(offered=1, taken=0, refused={"bad_item": 1})
    flood = {f"p{k}.{k:016x}": peer for k in range(10_000)}
    exp = tmp_path / "root" / "exp"; (exp / "logs" / "node-0").mkdir(parents=True)
    (exp / "logs" / "node-0" / "metrics.jsonl").write_text(rows("node-0", 1, peers=flood))
    assert not valid_metrics_row(json.loads((exp / "logs" / "node-0" / "metrics.jsonl").read_text()))
    assert valid_metrics_row(json.loads(rows("node-0", 1, peers=dict(list(flood.items())[:PEERS_PER_ROW]))))
    code, out, _ = cli("status", "--root", tmp_path / "root", "--experiment", "exp")
    assert code == 0 and "p9999." not in out and len(out) < 5000, len(out)


def test_planted_node_folders_are_looked_at_up_to_a_cap(tmp_path):
    "Thousands of planted node folders: status, compare and the configs look at the first `NODE_FOLDERS_MAX`."
    from sapo_nb.core import NODE_FOLDERS_MAX, read_node_configs
    from sapo_nb.monitor import swarm_status
    logs = tmp_path / "root" / "exp" / "logs"
    for k in range(NODE_FOLDERS_MAX + 200):
        (logs / f"n{k:05d}").mkdir(parents=True)
        if k % 100 == 0: (logs / f"n{k:05d}" / "config.json").write_text(json.dumps({"node_id": f"n{k:05d}"}))
    assert len(swarm_status(tmp_path / "root", "exp")) == NODE_FOLDERS_MAX
    assert len(read_node_configs(tmp_path / "root" / "exp")) == len(range(0, NODE_FOLDERS_MAX, 100))


def test_oversized_configs_are_not_read(tmp_path):
    "A node's config.json of 1 MB and a swarm's of 8 MB (real ones are a few kB a node): read as absent."
    from sapo_nb.core import read_node_configs
    run = tmp_path / "run"; (run / "logs" / "node-0").mkdir(parents=True)
    padding = "x" * (1 << 20)
    (run / "logs" / "node-0" / "config.json").write_text(json.dumps({"node_id": "node-0", "model": padding}))
    (run / "config.json").write_text(json.dumps({"nodes": [{"node_id": f"node-{k}", "model": padding[:1 << 16]}
                                                           for k in range(1, 129)]}))
    tracemalloc.start()
    try: got = read_node_configs(run)
    finally: peak = tracemalloc.get_traced_memory()[1]; tracemalloc.stop()
    assert got == {} and peak < 16 << 20, (sorted(got)[:3], peak)


def test_a_file_of_tiny_rows_is_read_up_to_a_row_cap(tmp_path):
    "Millions of `{}` lines (a metrics file a node reads on resume, and every reader): the first 100,000 rows."
    from sapo_nb.core import JSONL_MAX_ROWS, read_jsonl
    p = tmp_path / "metrics.jsonl"; p.write_bytes(b"{}\n" * (3 * JSONL_MAX_ROWS))
    tracemalloc.start()
    try: got = read_jsonl(p)
    finally: peak = tracemalloc.get_traced_memory()[1]; tracemalloc.stop()
    assert len(got) == JSONL_MAX_ROWS and peak < 64 << 20, peak
