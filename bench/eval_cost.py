"""What a held-out evaluation costs on the embedded model: 64 and 512 questions, for the `cpu` preset's mix and `arith`.

    nice python bench/eval_cost.py     # writes bench/results/eval_cost_cpu.json; run it alone, compare only ratios
"""
import json, time
from pathlib import Path
from sapo_nb.config import preset
from sapo_nb.core import provenance
from sapo_nb.evaluation import evaluate
from sapo_nb.models import load_policy
from sapo_nb.rewards import make_reward_fn
from sapo_nb.tasks import eval_items, format_prompt, mix_settings

out = dict(provenance=None, runs=[])
for mix in ("quick", "arith"):
    cfg = preset("cpu").replace(mix=mix)
    pol = load_policy(cfg.model, device=cfg.device, dtype=cfg.dtype, compute_dtype=cfg.compute_dtype)
    out["provenance"] = provenance(str(pol.device), str(pol.model.dtype), str(pol.compute_dtype))
    style, fallback = mix_settings(mix)["prompt_style"], mix_settings(mix).get("answer_fallback", False)
    ask = lambda tok, e: format_prompt(tok, e, style=style)
    for n in (64, 512):
        t = time.perf_counter()
        r = evaluate(pol, eval_items(mix, n), ask, make_reward_fn(answer_fallback=fallback), mix_settings(mix)["max_new_tokens"])
        out["runs"].append(dict(mix=mix, questions=n, seconds=round(time.perf_counter() - t, 1), pass1=round(r.pass1, 4),
                                tokens=r.tokens, by_component={k: round(v, 3) for k, v in r.by_task.items()}))
        print(json.dumps(out["runs"][-1]), flush=True)
Path("bench/results/eval_cost_cpu.json").write_text(json.dumps(out, indent=1) + "\n")
