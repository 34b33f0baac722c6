"""A screenshot of the control panel on a real-model run, for the docs (`nbs/images/panel.png`).

    python scripts/panel_screenshot.py [--run nbs/data/sharing/2-2/seed_1] [--out nbs/images/panel.png]
    python scripts/panel_screenshot.py --run <a run with peers> --out nbs/images/panel_peers.png

The panel is opened in JupyterLab in headless Chromium (as in `tests/test_panel_browser.py`, whose helpers this
uses) on a copy of a committed run of the `sharing` plan: four SmolLM2-135M nodes, 100 rounds each, on the `arith`
mix. The run has finished, so its nodes read `done`; the curves are the real ones."""
import argparse, json, os, secrets, shutil, signal, sys, tempfile, time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from test_panel_browser import CHROMIUM, FLAGS, KERNEL_READY, PLOT_POINTS, _free_port, _missing, _start_lab  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run", default=str(REPO / "nbs/data/sharing/2-2/seed_1")); p.add_argument("--out", default=str(REPO / "nbs/images/panel.png"))
    a = p.parse_args(argv)
    if _missing(): raise SystemExit("needs: " + "; ".join(_missing()))
    from playwright.sync_api import sync_playwright
    tmp = Path(tempfile.mkdtemp(prefix="sapo_panel_"))
    root, exp = tmp / "runs", "sharing-2-2"
    shutil.copytree(a.run, root / exp)
    want = {d.name: len((d / "metrics.jsonl").read_text().splitlines()) for d in sorted((root / exp / "logs").iterdir())
            if (d / "metrics.jsonl").is_file()}  # every node's every round on the plot
    (tmp / "nb").mkdir()
    src = f"from sapo_nb.panel import SwarmPanel\npanel = SwarmPanel(root={str(root)!r}, experiment={exp!r}, interval=None)\npanel"
    (tmp / "nb" / "panel.ipynb").write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {"kernelspec": {
        "name": "python3", "display_name": "Python 3", "language": "python"}}, "cells": [{"cell_type": "code", "id": "panel",
        "metadata": {}, "execution_count": None, "outputs": [], "source": src}]}))
    port, token = _free_port(), secrets.token_hex(16)
    lab = _start_lab(tmp, port, token)
    try:
        with sync_playwright() as pw:
            ctx = pw.chromium.launch_persistent_context(str(tmp / "profile"), executable_path=CHROMIUM, headless=True, args=FLAGS,
                                                        viewport={"width": 1300, "height": 1150})
            page = ctx.new_page()
            page.goto(f"http://127.0.0.1:{port}/lab/tree/panel.ipynb?reset&token={token}", timeout=120_000, wait_until="domcontentloaded")
            page.wait_for_function(KERNEL_READY, timeout=180_000, polling=500)
            page.evaluate("() => { const c = window.jupyterapp.commands; c.execute('application:toggle-left-area');"
                          " c.execute('notebook:run-all-cells'); return true; }")
            panel = page.locator(".sapo-panel"); panel.wait_for(timeout=120_000)
            end = time.monotonic() + 120
            while not ((pts := page.evaluate(PLOT_POINTS)) and {n: k for n, k in pts} == want):
                if time.monotonic() > end: raise SystemExit(f"the plot did not fill: {pts}")
                time.sleep(1)
            page.wait_for_timeout(1500)
            Path(a.out).parent.mkdir(parents=True, exist_ok=True); panel.screenshot(path=a.out)
            print(f"{a.out}: panel on {a.run} ({pts})")
            ctx.close()
    finally:
        os.killpg(lab.pid, signal.SIGTERM); lab.wait(30); shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__": main()
