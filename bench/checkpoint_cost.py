"""What checksummed checkpoints cost: save, verify (hash every file) and load of the embedded model's checkpoint, in
seconds and in resident memory above what the process held before each step.

    python bench/checkpoint_cost.py            # prints one JSON line; run it alone, compare only ratios
    PYTHONPATH=/path/to/other/checkout python bench/checkpoint_cost.py   # another version, on the same machine
"""
import json, os, tempfile, threading, time
from pathlib import Path
import torch
import sapo_nb
from sapo_nb.models import load_policy
from sapo_nb.durability import save_checkpoint, verify_checkpoint, load_checkpoint, CHECKPOINT_FILES, file_digest

PAGE = os.sysconf("SC_PAGE_SIZE")

def rss() -> int: return int(open("/proc/self/statm").read().split()[1]) * PAGE

def timed(fn):
    "(seconds, peak resident bytes above the start) of `fn()`, the memory sampled every 2 ms."
    base, peak, done = rss(), [0], threading.Event()
    def watch():
        while not done.is_set(): peak[0] = max(peak[0], rss()); time.sleep(0.002)
    w = threading.Thread(target=watch); w.start()
    t = time.perf_counter(); fn(); s = time.perf_counter() - t
    done.set(); w.join()
    return s, max(peak[0], rss()) - base

pol = load_policy("smollm2-135m")
params = [p for p in pol.model.parameters() if p.requires_grad]
opt = torch.optim.AdamW(params, lr=1e-5)
for p in params: p.grad = torch.zeros_like(p)
opt.step()  # Adam's moments exist, as in a real checkpoint
for p in params: p.grad = None
with tempfile.TemporaryDirectory() as d:
    save, save_mem = timed(lambda: save_checkpoint(d, 0, pol.model, opt, {}))
    ck = Path(d) / "round_0"
    size = sum((ck / n).stat().st_size for n in CHECKPOINT_FILES)
    t = time.perf_counter(); [file_digest(ck / n) for n in CHECKPOINT_FILES]; digest = time.perf_counter() - t
    verify, verify_mem = timed(lambda: verify_checkpoint(ck))
    load, load_mem = timed(lambda: load_checkpoint(d, pol.model, opt, log=lambda *_: None))
print(json.dumps(dict(library=os.path.dirname(sapo_nb.__file__), bytes=size, save_s=round(save, 2), hash_s=round(digest, 2),
                      verify_s=round(verify, 2), load_s=round(load, 2), save_peak_mb=round(save_mem / 1e6),
                      verify_peak_mb=round(verify_mem / 1e6), load_peak_mb=round(load_mem / 1e6),
                      hash_share_of_save=round(digest / save, 3), hash_gb_per_s=round(size / digest / 1e9, 2))))
