"""Peak resident memory and wall time of the README's main job (`sapo swarm`, bare) and of the same with full fine-tuning.

    python bench/main_job_memory.py [--out bench/results/main_job_memory_cpu.json] [-- extra sapo swarm flags]

Runs each variant as its own `sapo swarm` process in a fresh folder and samples the resident memory of the process and
its children every 0.2 s (`/proc`). Run it alone: timings compare only within one run on one machine.
"""
import argparse, json, os, subprocess, sys, tempfile, time
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")

def tree_rss(pid:int) -> int:
    "Resident bytes of `pid` and its descendants."
    kids = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try: ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]); kids.setdefault(ppid, []).append(int(d.name))
            except (OSError, IndexError, ValueError): pass
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try: total += int(Path(f"/proc/{p}/statm").read_text().split()[1]) * PAGE
        except (OSError, IndexError, ValueError): pass
        todo += kids.get(p, [])
    return total

def run(flags:list) -> dict:
    with tempfile.TemporaryDirectory() as root:
        cmd = [str(Path(sys.executable).parent / "sapo"), "swarm", "--root", root, *flags]
        env = {**os.environ, "SAPO_KEY_DIR": os.path.join(root, "..", f"keys-{os.getpid()}")}
        t0, peak = time.perf_counter(), 0
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        while p.poll() is None: peak = max(peak, tree_rss(p.pid)); time.sleep(0.2)
        out = p.stdout.read()
        return dict(flags=flags, exit=p.returncode, wall_s=round(time.perf_counter() - t0, 1), peak_rss_gb=round(peak / 1e9, 2),
                    first_lines=out.splitlines()[:3], last_lines=out.splitlines()[-12:])

def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0]); p.add_argument("--out"); p.add_argument("extra", nargs="*")
    a = p.parse_args()
    rows = [run(a.extra), run(["--adapter", "none", *a.extra])]
    print(json.dumps(rows, indent=1))
    from sapo_nb.core import machine_type  # the CPU's name and numeric features: bfloat16 arithmetic changes the work
    if a.out: Path(a.out).write_text(json.dumps(dict(date=time.strftime("%Y-%m-%d"), **machine_type(), runs=rows), indent=1) + "\n")

if __name__ == "__main__": main()
