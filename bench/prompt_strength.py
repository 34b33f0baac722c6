"""Can a prompt make one node clearly stronger? The embedded SmolLM2-135M on the `arith` held-out set, greedy pass@1.

A heterogeneous swarm needs a node that is clearly stronger than the others from the start. With one small model
on CPU the cheap candidate is the prompt: the same question asked zero-shot (the mix's `short` style) or after k
solved examples in the same style. This measures each on the held-out set every run is judged by, and writes
bench/results/prompt_strength.json.

    python bench/prompt_strength.py [--questions 128] [--shots 0 4 8]
"""
import argparse, json, math, time
from pathlib import Path

EXAMPLES = [("Calculate 23 + 48.", "23 + 48 = 71"), ("Calculate 7 * 12.", "7 * 12 = 84"),
            ("Calculate 61 - 37.", "61 - 37 = 24"), ("Calculate 4 + 9 + 6.", "4 + 9 + 6 = 19"),
            ("Calculate 35 - 58.", "35 - 58 = -23"), ("Calculate 9 * 8.", "9 * 8 = 72"),
            ("Calculate 17 + 66.", "17 + 66 = 83"), ("Calculate 3 + 8 + 5.", "3 + 8 + 5 = 16")]

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--questions", type=int, default=128)
    p.add_argument("--shots", type=int, nargs="+", default=[0, 4, 8])
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "prompt_strength.json"))
    a = p.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    from sapo_nb.models import load_policy
    from sapo_nb.tasks import eval_items, build_messages, mix_settings, SHORT_INSTRUCTION
    from sapo_nb.rewards import make_reward_fn
    from sapo_nb.evaluation import evaluate
    policy, items = load_policy("smollm2-135m"), eval_items("arith", a.questions)
    reward, style = make_reward_fn(answer_fallback=True), mix_settings("arith")["prompt_style"]
    def prompt(k):
        def fmt(tok, entry):
            msgs = []
            for q, ans in EXAMPLES[:k]: msgs += [{"role": "user", "content": f"{q}\n{SHORT_INSTRUCTION}"}, {"role": "assistant", "content": ans}]
            return tok.apply_chat_template(msgs + build_messages(entry, style), add_generation_prompt=True, tokenize=False)
        return fmt
    rows = []
    for k in a.shots:
        r = evaluate(policy, items, prompt(k), reward, max_new_tokens=32)
        sd = math.sqrt(r.pass1 * (1 - r.pass1) / r.n)
        rows.append(dict(shots=k, pass1=r.pass1, sd=round(sd, 4), questions=r.n, seconds=round(r.seconds, 1)))
        print(f"{k} solved examples: held-out pass@1 {r.pass1:.3f} (± {sd:.3f}) on {r.n} questions, {r.seconds:.0f} s", flush=True)
    Path(a.out).write_text(json.dumps(dict(model="smollm2-135m", mix="arith", rows=rows, when=time.strftime("%Y-%m-%d")), indent=1))

if __name__ == "__main__": main()
