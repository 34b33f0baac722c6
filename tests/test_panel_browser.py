"""The control panel end to end in a real browser: JupyterLab in headless Chromium runs a notebook that builds a
`SwarmPanel`, the test clicks Launch, waits until the plot in the page has points for every node, saves a
screenshot, clicks Stop and checks that the node processes of the pid file are gone.

Needs: `pip install jupyterlab playwright anywidget` and Debian's `apt-get install -y chromium` (Playwright drives the
system Chromium: no `playwright install`). Missing pieces fail the test with what to install; set
SAPO_SKIP_BROWSER=1 to skip it instead."""
import importlib.util, json, os, secrets, shutil, signal, socket, subprocess, sys, time, urllib.request
from pathlib import Path
import pytest

REPO = Path(__file__).resolve().parents[1]
SCREENSHOT = os.environ.get("SAPO_PANEL_SCREENSHOT")  # where to keep the screenshot; the docs' one comes from scripts/panel_screenshot.py
CHROMIUM = os.environ.get("SAPO_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
NODES, ROUNDS = 2, 2000  # far more rounds than the test waits for (a tiny round takes ~0.1 s): Stop has running nodes to stop

def _missing() -> list:
    out = [] if Path(CHROMIUM).is_file() else [f"chromium ({CHROMIUM} not found): apt-get update && apt-get install -y chromium"]
    for mod in ("jupyterlab", "playwright", "anywidget", "ipykernel", "psutil"):
        if importlib.util.find_spec(mod) is None: out.append(f"{mod}: pip install {mod}")
    return out

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); return s.getsockname()[1]

def _notebook(root) -> dict:
    src = (f"from sapo_nb.panel import SwarmPanel\n"
           f"panel = SwarmPanel(root={str(root)!r}, experiment='e2e', interval=1.0, model='tiny', nodes={NODES}, rounds={ROUNDS},\n"
           f"                   extra='max_new_tokens=8, checkpoint_every=0')\npanel")
    return {"nbformat": 4, "nbformat_minor": 5, "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
            "cells": [{"cell_type": "code", "id": "panel", "metadata": {}, "execution_count": None, "outputs": [], "source": src}]}

def _start_lab(tmp, port, token):
    "A JupyterLab server on 127.0.0.1 with its own config, settings and runtime folders (no news, no update checks)."
    settings = tmp / "lab-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp / "jcfg"), "JUPYTER_RUNTIME_DIR": str(tmp / "jrt"),
           "JUPYTERLAB_SETTINGS_DIR": str(tmp / "lab-settings"), "JUPYTERLAB_WORKSPACES_DIR": str(tmp / "lab-ws"),
           "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    log = open(tmp / "jupyterlab.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
                             "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={tmp / 'nb'}",
                             "--LabApp.expose_app_in_browser=True"] + (["--allow-root"] if os.geteuid() == 0 else []),
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    end = time.monotonic() + 120
    while time.monotonic() < end:
        if proc.poll() is not None: raise AssertionError("jupyter lab exited:\n" + (tmp / "jupyterlab.log").read_text()[-3000:])
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=2); return proc
        except OSError: time.sleep(0.5)
    raise AssertionError("jupyter lab did not answer in 120 s:\n" + (tmp / "jupyterlab.log").read_text()[-3000:])

# the notebook is open and its kernel has started and is idle
KERNEL_READY = """() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.isReady && w.sessionContext.session && w.sessionContext.session.kernel;
  return !!(k && k.status === 'idle' && document.querySelector('.jp-Notebook .jp-Cell')); }"""

# the plotly figure in the page: (trace name, points) of the raw-reward traces, or None before it is drawn
PLOT_POINTS = """() => { const gd = document.querySelector('.sapo-panel .js-plotly-plot');
  if (!gd || !gd._fullData) return null;
  return gd._fullData.filter(t => t.mode === 'markers').map(t => [t.name, t._length || 0]); }"""

@pytest.mark.slow
def test_panel_in_jupyterlab(tmp_path):
    if os.environ.get("SAPO_SKIP_BROWSER") == "1": pytest.skip("SAPO_SKIP_BROWSER=1")
    if _missing(): pytest.fail("the browser test needs: " + "; ".join(_missing()) + " (or set SAPO_SKIP_BROWSER=1 to skip it)")
    import psutil
    from playwright.sync_api import sync_playwright
    from sapo_nb.swarm import read_pid_file, stop_swarm
    t0, times = time.monotonic(), {}
    def mark(step):
        times[step] = round(time.monotonic() - t0, 1); print(f"[browser test] {step}: {times[step]} s", flush=True)
    root, port, token = tmp_path / "runs", _free_port(), secrets.token_hex(16)
    exp = root / "e2e"
    (tmp_path / "nb").mkdir()
    (tmp_path / "nb" / "panel.ipynb").write_text(json.dumps(_notebook(root)))
    lab = _start_lab(tmp_path, port, token)
    mark("jupyterlab up")
    try:
        with sync_playwright() as pw:
            ctx = pw.chromium.launch_persistent_context(str(tmp_path / "chromium-profile"), executable_path=CHROMIUM, headless=True,
                                                        args=FLAGS, viewport={"width": 1300, "height": 1150})
            try:
                page = ctx.new_page()
                page.goto(f"http://127.0.0.1:{port}/lab/tree/panel.ipynb?reset&token={token}", timeout=120_000, wait_until="domcontentloaded")
                page.wait_for_function(KERNEL_READY, timeout=180_000, polling=500)
                mark("notebook open, kernel idle")
                # Run > Run All Cells, through the app's command registry (not awaited: it resolves only when the cells end)
                page.evaluate("() => { const c = window.jupyterapp.commands; c.execute('application:toggle-left-area');"
                              " c.execute('notebook:run-all-cells'); return true; }")
                panel = page.locator(".sapo-panel")
                panel.wait_for(timeout=120_000)
                mark("panel shown")
                panel.locator("button.sapo-launch").click()
                page.locator(".sapo-message", has_text="launched").wait_for(timeout=60_000)
                mark("launched")
                pids = {n: d["pid"] for n, d in read_pid_file(exp)["nodes"].items()}
                assert sorted(pids) == [f"node-{i}" for i in range(NODES)], pids
                assert all(psutil.pid_exists(p) for p in pids.values())
                # the panel's timer refreshes the page by itself: wait until every node has 3 points in the plotly figure
                end = time.monotonic() + 300
                while True:
                    points = page.evaluate(PLOT_POINTS)
                    if points and len(points) == NODES and all(k >= 3 for _, k in points): break
                    dead = [n for n, p in pids.items() if not psutil.pid_exists(p) or psutil.Process(p).status() == psutil.STATUS_ZOMBIE]
                    if len(dead) == NODES or time.monotonic() > end:
                        logs = "\n".join(f"--- {n}/node.log\n" + (exp / "logs" / n / "node.log").read_text()[-2000:] for n in pids)
                        raise AssertionError(f"plot points {points}; nodes exited: {dead}\n{logs}")
                    time.sleep(1)
                mark("3 rounds per node plotted")
                assert [n for n, _ in points] == [f"node-{i}" for i in range(NODES)], points
                summary = json.loads(page.locator(".sapo-summary [data-points]").get_attribute("data-points"))
                assert all(summary[n] >= 3 for n in pids), summary
                assert page.locator(".sapo-status", has_text="running").count() == 1
                shot = Path(SCREENSHOT) if SCREENSHOT else tmp_path / "panel.png"
                shot.parent.mkdir(parents=True, exist_ok=True)
                page.wait_for_timeout(1500)  # let the last refresh draw
                panel.screenshot(path=str(shot))
                panel.locator("button.sapo-stop").click()
                page.locator(".sapo-message", has_text="stopped:").wait_for(timeout=60_000)
                page.locator(".sapo-summary [data-running='0']").wait_for(timeout=30_000)
                assert page.locator(".sapo-status", has_text="stopped").count() == 1
                mark("stopped")
                info = read_pid_file(exp)["nodes"]
                for n, d in info.items():
                    try: p = psutil.Process(d["pid"]); gone = abs(p.create_time() - d["create_time"]) >= 1 or p.status() == psutil.STATUS_ZOMBIE
                    except psutil.NoSuchProcess: gone = True
                    assert gone, f"{n} (pid {d['pid']}) still runs after Stop"
                rows = [len((exp / "logs" / n / "metrics.jsonl").read_text().splitlines()) for n in sorted(info)]
                assert all(3 <= r < ROUNDS for r in rows), rows  # stopped mid-run, after the rounds seen in the page
            except Exception:
                page.screenshot(path=str(tmp_path / "failure.png")); print(f"[browser test] page at failure: {tmp_path / 'failure.png'}")
                raise
            finally:
                ctx.close()
    finally:
        if exp.exists(): stop_swarm(exp, timeout=5)  # never leave nodes behind, whatever failed
        os.killpg(lab.pid, signal.SIGTERM)
        try: lab.wait(30)
        except subprocess.TimeoutExpired: os.killpg(lab.pid, signal.SIGKILL); lab.wait()
