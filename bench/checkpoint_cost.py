"""What checksummed checkpoints cost: save, verify (hash every file) and load of the embedded model's checkpoint.

    python bench/checkpoint_cost.py            # prints one JSON line; run it alone, compare only ratios
"""
import json, tempfile, time
from pathlib import Path
import torch
from sapo_nb.models import load_policy
from sapo_nb.node import save_checkpoint, verify_checkpoint, load_checkpoint, CHECKPOINT_FILES, _digest

pol = load_policy("smollm2-135m")
params = [p for p in pol.model.parameters() if p.requires_grad]
opt = torch.optim.AdamW(params, lr=1e-5)
for p in params: p.grad = torch.zeros_like(p)
opt.step()  # Adam's moments exist, as in a real checkpoint
with tempfile.TemporaryDirectory() as d:
    t = time.perf_counter(); ck = save_checkpoint(d, 0, pol.model, opt, {}); save = time.perf_counter() - t
    size = sum((ck / n).stat().st_size for n in CHECKPOINT_FILES)
    t = time.perf_counter(); [_digest(ck / n) for n in CHECKPOINT_FILES]; digest = time.perf_counter() - t
    t = time.perf_counter(); verify_checkpoint(ck); verify = time.perf_counter() - t
    t = time.perf_counter(); load_checkpoint(d, pol.model, opt, log=lambda *_: None); load = time.perf_counter() - t
print(json.dumps(dict(bytes=size, save_s=round(save, 2), hash_s=round(digest, 2), verify_s=round(verify, 2),
                      load_s=round(load, 2), hash_share_of_save=round(digest / save, 3),
                      hash_gb_per_s=round(size / digest / 1e9, 2))))
