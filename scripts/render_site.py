#!/usr/bin/env python
"""Render the docs site without Quarto and look at it: the check CI can run where Quarto cannot be installed.

Three steps, each usable on its own:

1. `render`: every page that nbdev's processing step left in `_proc/` (notebooks, and `.md`/`.qmd` pages) becomes
   one HTML file named by its front matter's `output-file`, as Quarto would name it. Nothing is executed: the pages
   show the outputs committed in the notebooks. What Quarto would do and nbconvert does not is done here by hand:
   the front matter's title and description head the page; `#| echo/output/include: false` hide what they hide;
   headings get pandoc's identifiers (the ones nbdev's doc links and hand-written `#anchors` point at); links to
   `.ipynb`/`.md`/`.qmd` pages go to their HTML, and nbdev's absolute doc links (`doc_host` + `doc_baseurl`) become
   relative, so they are checked like any other link. plotly.js is inlined from the installed plotly package and
   the outputs' own CDN `<script>`s are dropped: the figures draw offline. A navigation list made from
   `_quarto.yml`'s sidebar heads each page (so a sidebar entry without a page is a broken link too).
2. `check_links`: every relative link, image and script of every page resolves to a rendered file, and every
   `#anchor` to an id on the target page; links into this repository on GitHub (`git_url/blob/main/PATH`) to a
   file that exists here (and, for a `#L123` link, has that many lines).
3. `check_browser`: headless Chromium (Debian's, driven by playwright: no browser download) opens the pages over
   a local HTTP server with every other request blocked, waits until each plotly figure has drawn (an SVG with
   traces in each `.js-plotly-plot`), checks that images loaded and no script failed, and saves full-page
   screenshots of the chosen pages.

Usage (from the repository root, after `python -c "from nbdev.serve import proc_nbs; proc_nbs()"`):

    python scripts/render_site.py                          # render + links + browser, shots in _proc/_shots
    python scripts/render_site.py --proc                   # run proc_nbs first
    python scripts/render_site.py --shots nbs/images/site  # refresh the committed screenshots
    python scripts/render_site.py --no-browser             # render + links only

Exit status 1 with a list of what failed."""
from __future__ import annotations
import argparse, configparser, copy, functools, http.server, json, os, re, shutil, sys, threading, time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("SAPO_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
SCREENSHOT_PAGES = ["index.html", "replication.html", "panel.html", "tutorial_colab.html"]  # pages whose screenshots are kept
EXTERNAL = ("http:", "https:", "mailto:", "data:", "javascript:", "about:", "tel:")
PAGE_SUFFIXES = (".ipynb", ".qmd", ".md")

# --- reading the processed pages -------------------------------------------------------------------------------------

@dataclass
class Page:
    src: Path          # the processed source in _proc/
    rel: str           # its path relative to _proc/ (links between pages are written with these)
    output_file: str   # the HTML name Quarto gives it (front matter `output-file`, else the source's stem)
    title: str = ""
    description: str = ""
    nb: dict = field(default_factory=dict, repr=False)  # the notebook (a .md/.qmd page becomes one markdown cell)

FRONT = re.compile(r"\A\s*---\s*\n(.*?)\n---\s*(\n|\Z)", re.S)

def _front_matter(text: str) -> tuple[dict, str]:
    "The YAML front matter at the start of `text` (or {}) and the text after it."
    import yaml
    m = FRONT.match(text)
    if not m: return {}, text
    return (yaml.safe_load(m.group(1)) or {}), text[m.end():]

def read_page(src: Path, proc: Path) -> Page:
    "One processed page: its front matter (from the first raw cell of a notebook, or the top of a .md/.qmd file)."
    import nbformat
    if src.suffix == ".ipynb":
        nb = nbformat.reads(src.read_text(), as_version=4)  # multi-line sources and outputs joined into strings
        fm, cells = {}, nb["cells"]
        if cells and cells[0]["cell_type"] == "raw":
            fm, rest = _front_matter("".join(cells[0]["source"]))
            if fm: cells = cells[1:] if not rest.strip() else [{**cells[0], "source": rest}] + cells[1:]
        nb = {**nb, "cells": cells}
    else:
        fm, body = _front_matter(src.read_text())
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(body)])
    out = (src.relative_to(proc).parent / (fm.get("output-file") or src.with_suffix(".html").name)).as_posix()
    return Page(src, src.relative_to(proc).as_posix(), out, str(fm.get("title") or src.stem), str(fm.get("description") or ""), nb)

def read_pages(proc: Path) -> list[Page]:
    "Every page in `proc` (notebooks first, then .md/.qmd; files and folders starting with _ or . are not pages)."
    srcs = [p for suf in PAGE_SUFFIXES for p in sorted(proc.rglob(f"*{suf}"))
            if not any(part.startswith(("_", ".")) for part in p.relative_to(proc).parts)]
    return [read_page(p, proc) for p in srcs]

def sidebar(proc: Path) -> list[tuple[str, list[str]]]:
    "`_quarto.yml`'s sidebar as (section, [source file, ...])."
    import yaml
    cfg = yaml.safe_load((proc / "_quarto.yml").read_text())
    def entries(items):
        for it in items or []:
            if isinstance(it, str): yield it
            elif isinstance(it, dict) and "href" in it: yield it["href"]
            elif isinstance(it, dict) and "contents" in it: yield from entries(it["contents"])
    secs = []
    for it in cfg.get("website", {}).get("sidebar", {}).get("contents", []) or []:
        if isinstance(it, dict) and "section" in it: secs.append((it["section"], list(entries(it.get("contents")))))
        else: secs.append(("", list(entries([it]))))
    return secs

def doc_url() -> str:
    "The published site's address from settings.ini (doc_host + doc_baseurl), with a trailing slash."
    cfg = configparser.ConfigParser(); cfg.read(REPO / "settings.ini")
    d = cfg["DEFAULT"]
    return d.get("doc_host", "").rstrip("/") + "/" + d.get("doc_baseurl", "").strip("/") + "/"

# --- what Quarto does that nbconvert does not --------------------------------------------------------------------------

ATTRS_AFTER_LINK = re.compile(r"(\]\([^)\s]*\))\{[^}\n]*\}")  # pandoc's [text](url){target="_blank"}: drop the {…}
DIV_FENCE = re.compile(r"^:::+[ \t]*(\{[^}\n]*\}|[\w-]+)?[ \t]*$", re.M)
CODE_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)

def _div(m) -> str:
    "`::: {.callout-note}` opens a <div class=\"callout-note\">, a bare `:::` closes it (blank lines keep markdown inside)."
    spec = m.group(1)
    if spec is None: return "\n</div>\n"
    classes = " ".join(c[1:] for c in spec.strip("{}").split() if c.startswith(".")) if spec.startswith("{") else spec
    return f'\n<div class="{classes}">\n'

def _markdown(text: str) -> str:
    "Pandoc-only markdown made readable by nbconvert's renderer: link attributes dropped, `:::` divs as <div>s (not inside code blocks)."
    out, last = [], 0
    for m in CODE_FENCE.finditer(text):
        out += [DIV_FENCE.sub(_div, ATTRS_AFTER_LINK.sub(r"\1", text[last:m.start()])), m.group(0)]; last = m.end()
    out.append(DIV_FENCE.sub(_div, ATTRS_AFTER_LINK.sub(r"\1", text[last:])))
    return "".join(out)

def _cell_options(src: str) -> tuple[dict, str]:
    "A code cell's `#| key: value` options (Quarto's) and its source without them."
    import yaml
    opts, keep = {}, []
    for line in src.splitlines():
        if line.startswith("#|") and not keep:  # options lead the cell
            try: opt = yaml.safe_load(line[2:].strip())
            except yaml.YAMLError: opt = None
            if isinstance(opt, dict): opts.update(opt)
        else: keep.append(line)
    return opts, "\n".join(keep)

def _prepare(page: Page) -> dict:
    "The notebook nbconvert renders: a title cell, Quarto's cell options applied, markdown made pandoc-free."
    import nbformat
    nb = copy.deepcopy(page.nb)
    cells = []
    head = f"# {page.title}" + (f"\n\n<p class=\"description\">{page.description}</p>" if page.description else "")
    cells.append(nbformat.v4.new_markdown_cell(head))
    for c in nb["cells"]:
        src = "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
        if c["cell_type"] == "markdown": c["source"] = _markdown(src)
        elif c["cell_type"] == "code":
            opts, body = _cell_options(src)
            if opts.get("include") is False: continue
            c["source"] = body
            tags = set(c.get("metadata", {}).get("tags", []))
            if opts.get("echo") is False: tags.add("remove_input")
            if opts.get("output") is False: tags.add("remove_output")
            c.setdefault("metadata", {})["tags"] = sorted(tags)
            c["outputs"] = [o for o in c.get("outputs", []) if o["output_type"] not in ("execute_result", "display_data") or o.get("data")]
            for o in c["outputs"]:
                md = o.get("data", {}).get("text/markdown")
                if md is not None: o["data"]["text/markdown"] = _markdown("".join(md) if isinstance(md, list) else md)
        elif c["cell_type"] == "raw":
            fmt = c.get("metadata", {}).get("format") or c.get("metadata", {}).get("raw_mimetype") or ""
            if "html" not in fmt: continue
        cells.append(c)
    nb["cells"] = cells
    nb.setdefault("metadata", {})
    return nbformat.from_dict(nb)

def pandoc_id(text: str) -> str:
    "Pandoc's auto identifier for a heading (what Quarto gives it): lower case, only letters, digits, _ - . and hyphens for spaces, from the first letter."
    s = "".join(ch for ch in text.lower() if ch.isalnum() or ch in "_-." or ch.isspace())
    s = "-".join(s.split())
    while s and not s[0].isalpha(): s = s[1:]  # identifiers start with a letter
    return s or "section"

@functools.lru_cache(maxsize=1)
def _exporter():
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter
    tpl = ("{%- extends 'lab/index.html.j2' -%}\n"
           "{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}\n"  # no require.js: plotly would register as an AMD module
           "{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}\n"
           "{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}\n")  # no CDN widget manager: widget views stay empty    # no CDN MathJax: formulas show as TeX
    ex = HTMLExporter(template_name="lab", extra_loaders=[DictLoader({"site.html.j2": tpl})], template_file="site.html.j2",
                      exclude_input_prompt=True, exclude_output_prompt=True)
    from nbconvert.preprocessors import TagRemovePreprocessor
    ex.register_preprocessor(TagRemovePreprocessor(remove_input_tags={"remove_input"}, remove_all_outputs_tags={"remove_output"},
                                                   remove_cell_tags={"remove_cell"}, enabled=True), enabled=True)
    return ex

CDN_SCRIPT = re.compile(r"cdn\.plot\.ly|cdnjs\.cloudflare\.com/ajax/libs/mathjax|cdn\.jsdelivr\.net/npm/mathjax")
SITE_CSS = """<style>
nav.site-nav{font:13px/1.4 system-ui,sans-serif;padding:6px 12px;border-bottom:1px solid #ddd;background:#f6f8fa}
nav.site-nav a{margin-right:10px;white-space:nowrap} nav.site-nav b{margin-right:6px}
nav.site-nav a.current{font-weight:bold;text-decoration:none;color:#000}
p.description{font-size:1.1em;color:#555}
</style>"""

def _postprocess(html: str, page: Page, names: dict, nav: list, base: str) -> tuple[str, int]:
    """Headings get pandoc ids; page links go to HTML names; doc links become relative; CDN scripts go; a nav list
    heads the body. Returns the HTML and the number of plotly figures on the page."""
    from bs4 import BeautifulSoup
    soup = BeautifulSoup(html, "html.parser")
    seen = {}
    for h in soup.find_all(re.compile(r"^h[1-6]$")):
        for a in h.find_all("a", class_="anchor-link"): a.decompose()
        text = h.get_text(" ", strip=True)
        m = re.search(r"\s*\{#([^}\s]+)[^}]*\}\s*$", text)
        if m:  # `## Heading {#custom-id}`
            hid = m.group(1)
            for s in h.find_all(string=re.compile(r"\{#")): s.replace_with(re.sub(r"\s*\{#[^}]*\}\s*$", "", s))
        else:
            hid = pandoc_id(text)
            if hid in seen: seen[hid] += 1; hid = f"{hid}-{seen[hid]}"
        seen.setdefault(hid, 0)
        h["id"] = hid
        a = soup.new_tag("a", href=f"#{hid}", attrs={"class": "anchor-link"}); a.string = "¶"; h.append(a)
    here, src_dir = Path(page.output_file).parent, Path(page.rel).parent
    for a in soup.find_all("a", href=True):
        href = a["href"]
        if href.startswith(base): href = os.path.relpath(href[len(base):].split("#")[0] or "index.html", here).replace(os.sep, "/") + \
                                         ("#" + href.split("#", 1)[1] if "#" in href else "")
        parts = urlsplit(href)
        if not parts.scheme and parts.path.endswith(PAGE_SUFFIXES):
            target = os.path.normpath(src_dir / unquote(parts.path))
            if target in names: href = os.path.relpath(names[target], here).replace(os.sep, "/") + (f"#{parts.fragment}" if parts.fragment else "")
        a["href"] = href
    for s in soup.find_all("script"):
        if (s.get("src") and CDN_SCRIPT.search(s["src"])) or (s.get("type") == "module" and CDN_SCRIPT.search(s.string or "")): s.decompose()
    figures = len(soup.select("div.plotly-graph-div"))
    body = soup.body
    if body is not None:
        navtag = BeautifulSoup(_nav_html(nav, page, names), "html.parser")
        body.insert(0, navtag)
    if soup.head is not None: soup.head.append(BeautifulSoup(SITE_CSS, "html.parser"))
    if soup.title is not None: soup.title.string = page.title
    return str(soup), figures

def _nav_html(nav: list, page: Page, names: dict) -> str:
    from html import escape
    here = Path(page.output_file).parent
    out = ['<nav class="site-nav">']
    for section, srcs in nav:
        if section: out.append(f"<b>{escape(section)}:</b>")
        for s in srcs:
            target = names.get(os.path.normpath(s), s)  # an entry without a page keeps its name: check_links reports it
            cls = ' class="current"' if target == page.output_file else ""
            out.append(f'<a href="{escape(os.path.relpath(target, here))}"{cls}>{escape(Path(s).stem)}</a>')
    return " ".join(out) + "</nav>"

@dataclass
class Rendered:
    page: str
    source: str
    figures: int
    seconds: float

def render(proc: Path = REPO / "_proc", out: Path = REPO / "_proc" / "_html", log=print) -> list[Rendered]:
    "Render every page of `proc` into `out` (emptied first), copy the other files (images, data, css) beside them."
    import plotly.offline
    if not (proc / "_quarto.yml").exists(): raise SystemExit(f"{proc}/_quarto.yml not found: run proc_nbs first (or pass --proc)")
    if out.exists(): shutil.rmtree(out)
    out.mkdir(parents=True)
    for f in proc.rglob("*"):  # resources: everything that is not a page or nbdev/Quarto config
        rel = f.relative_to(proc)
        if f.is_file() and not f.suffix in PAGE_SUFFIXES and not rel.parts[0].startswith(("_", ".")):
            (out / rel).parent.mkdir(parents=True, exist_ok=True); shutil.copy2(f, out / rel)
    pages = read_pages(proc)
    names = {os.path.normpath(p.rel): p.output_file for p in pages}
    nav, base = sidebar(proc), doc_url()
    plotly_js = f'<script type="text/javascript">/* plotly.js from the installed plotly package */\n{plotly.offline.get_plotlyjs()}\n</script>'
    done = []
    for p in pages:
        t = time.perf_counter()
        html, _ = _exporter().from_notebook_node(_prepare(p), resources={"metadata": {"name": p.title}})
        html, figures = _postprocess(html, p, names, nav, base)
        if figures: html = html.replace("</head>", plotly_js + "\n</head>", 1)
        dest = out / p.output_file
        dest.parent.mkdir(parents=True, exist_ok=True); dest.write_text(html)
        done.append(Rendered(p.output_file, p.rel, figures, round(time.perf_counter() - t, 2)))
        log(f"  {done[-1].source:28} -> {p.output_file:24} {figures} figure(s)  {done[-1].seconds:.1f} s")
    listed = {os.path.normpath(s) for _, srcs in nav for s in srcs}
    orphans = sorted(set(names) - listed)
    if orphans: log(f"  not in _quarto.yml's sidebar (rendered, reachable only by links): {', '.join(orphans)}")
    return done

def check_descriptions(pages: list[Page], nbs: Path = REPO / "nbs") -> list[str]:
    """Pages whose front-matter description is shorter than the notebook's `>` summary: nbdev keeps only the summary's
    first line, so a summary wrapped over several lines is cut mid-sentence on the site (in its header and in link
    previews). The fix is in the notebook: the `> summary` on one line."""
    out = []
    for p in pages:
        src = nbs / p.rel
        if src.suffix != ".ipynb" or not src.exists() or not p.description: continue
        for c in json.loads(src.read_text())["cells"]:
            text = "".join(c["source"]) if c["cell_type"] == "markdown" else ""
            m = re.search(r"^# .*\n+((?:>.*\n?)+)", text, re.M)
            if not m: continue
            summary, desc = " ".join(line.lstrip(">").strip() for line in m.group(1).splitlines()), p.description.strip()
            if summary.startswith(desc) and len(summary) > len(desc):
                out.append(f"{p.rel}: the site's description is cut to {p.description.strip()!r} (the `>` summary spans "
                           f"{len(m.group(1).splitlines())} lines: put it on one)")
            break
    return out

# --- links ------------------------------------------------------------------------------------------------------------

LINK_ATTRS = [("a", "href"), ("img", "src"), ("link", "href"), ("script", "src"), ("iframe", "src"), ("source", "src"),
              ("video", "src"), ("audio", "src"), ("embed", "src"), ("object", "data")]

def _ids(html_path: Path, cache: dict) -> set:
    if html_path not in cache:
        from bs4 import BeautifulSoup
        soup = BeautifulSoup(html_path.read_text(), "html.parser")
        cache[html_path] = {t["id"] for t in soup.find_all(id=True)} | {t["name"] for t in soup.find_all("a", attrs={"name": True})}
    return cache[html_path]

def _repo_link(url: str) -> str | None:
    "For a link into this repository on GitHub (git_url/blob|tree/<branch>/PATH), PATH; else None."
    cfg = configparser.ConfigParser(); cfg.read(REPO / "settings.ini")
    git_url, branch = cfg["DEFAULT"].get("git_url", "").rstrip("/"), cfg["DEFAULT"].get("branch", "main")
    m = re.match(re.escape(git_url) + rf"/(?:blob|tree|raw)/{re.escape(branch)}/([^#?]+)", url) if git_url else None
    return unquote(m.group(1)) if m else None

@functools.lru_cache(maxsize=None)
def _lines(path: Path) -> int: return len(path.read_bytes().splitlines())

def check_links(out: Path = REPO / "_proc" / "_html") -> list[str]:
    "Every broken relative link/image/script and missing anchor in the rendered pages, as 'page: link (why)'."
    from bs4 import BeautifulSoup
    broken, ids, out = [], {}, out.resolve()
    for page in sorted(out.rglob("*.html")):
        rel = page.relative_to(out)
        soup = BeautifulSoup(page.read_text(), "html.parser")
        for tag, attr in LINK_ATTRS:
            for t in soup.find_all(tag, attrs={attr: True}):
                url = t[attr].strip()
                if url.lower().startswith(EXTERNAL):
                    path, line = _repo_link(url), re.search(r"#L(\d+)", url)
                    if path is None: continue
                    if not (REPO / path).exists(): broken.append(f"{rel}: {url} (no {path} in the repository)")
                    elif line and (REPO / path).is_file() and int(line.group(1)) > _lines(REPO / path):
                        broken.append(f"{rel}: {url} ({path} has {_lines(REPO / path)} lines)")
                    continue
                parts = urlsplit(url)
                if parts.scheme or parts.netloc: continue
                target = page if not parts.path else (page.parent / unquote(parts.path)).resolve()
                if not target.is_relative_to(out):
                    broken.append(f"{rel}: {url} (outside the site: Quarto does not publish it)"); continue
                if target.is_dir(): target = target / "index.html"
                if not target.exists(): broken.append(f"{rel}: {url} (no such file in the site)"); continue
                if parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in _ids(target, ids):
                    broken.append(f"{rel}: {url} (no id {parts.fragment!r} on {target.relative_to(out) if target != page else 'this page'})")
    return broken

# --- the browser ------------------------------------------------------------------------------------------------------

FIGURES = """() => Array.from(document.querySelectorAll('.js-plotly-plot, .plotly-graph-div')).filter(
  (d, i, all) => !all.some(o => o !== d && o.contains(d))).map(d => {
    const svg = d.querySelector('svg.main-svg'), r = svg ? svg.getBoundingClientRect() : null;
    return {id: d.id, drawn: !!(svg && r.width > 0 && r.height > 0),
            traces: (d._fullData || []).length,
            shapes: d.querySelectorAll('g.trace, g.hm, g.slice, g.point').length,
            notes: ((d.layout && d.layout.annotations) || []).map(a => String(a.text || '')).filter(t => t)};
  })"""
IMAGES = "() => Array.from(document.images).map(i => ({src: i.getAttribute('src'), ok: i.complete && i.naturalWidth > 0}))"

class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a): pass

def check_browser(out: Path, pages: list[str], shots: Path | None, shot_pages=SCREENSHOT_PAGES, timeout_s: float = 30,
                  max_shot_height: int = 0, log=print) -> tuple[list[str], dict]:
    """Open `pages` (HTML names under `out`) in headless Chromium over a local server, every other request blocked.
    Fails a page whose plotly figures do not all draw, whose images do not load or whose scripts throw.
    Saves full-page screenshots of `shot_pages` into `shots` (the top `max_shot_height` pixels of each, when set). Returns (failures, {page: figure results})."""
    if not Path(CHROMIUM).is_file(): return [f"chromium not found at {CHROMIUM}: apt-get install -y chromium"], {}
    from playwright.sync_api import sync_playwright
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(out)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    origin = f"http://127.0.0.1:{srv.server_address[1]}/"
    failures, results = [], {}
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
            try:
                for name in pages:
                    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
                    page, blocked, errors = ctx.new_page(), [], []
                    page.route("**/*", lambda r: r.continue_() if r.request.url.startswith(origin) else (blocked.append(r.request.url), r.abort()))
                    page.on("pageerror", lambda e: errors.append(str(e).splitlines()[0]))
                    t = time.perf_counter()
                    page.goto(origin + name, wait_until="load", timeout=int(timeout_s * 1000))
                    try: page.wait_for_function(f"({FIGURES})().every(f => f.drawn && (f.shapes > 0 || (f.traces == 0 && f.notes.length)))", timeout=int(timeout_s * 1000), polling=250)
                    except Exception: pass  # reported below, figure by figure
                    figs, imgs = page.evaluate(FIGURES), page.evaluate(IMAGES)
                    results[name] = figs
                    # a figure with no data that says so in an annotation ("no runs yet") is a placeholder, not a failure
                    empty = [f for f in figs if f["drawn"] and not f["traces"] and f["notes"]]
                    bad = [f for f in figs if not (f["drawn"] and f["shapes"] > 0) and f not in empty]
                    for f in bad:
                        why = ("drew an empty figure: its output has no traces and no note saying why" if f["drawn"] and not f["traces"] else
                               f"did not draw (svg: {f['drawn']}, {f['traces']} trace(s), {f['shapes']} drawn)")
                        failures.append(f"{name}: plotly figure {f['id']} {why}")
                    for f in empty: log(f"  {name}: figure {f['id']} has no data; it says: {'; '.join(f['notes'])}")
                    for i in imgs:
                        if not i["ok"]: failures.append(f"{name}: image {i['src']} did not load")
                    for e in errors: failures.append(f"{name}: script error: {e}")
                    if shots is not None and name in shot_pages:
                        shots.mkdir(parents=True, exist_ok=True)
                        height = page.evaluate("() => document.documentElement.scrollHeight")
                        clip = {"x": 0, "y": 0, "width": 1280, "height": min(height, max_shot_height)} if max_shot_height else None
                        page.screenshot(path=str(shots / (Path(name).stem + ".png")), full_page=True, clip=clip)
                    log(f"  {name:24} {len(figs)} figure(s), {len(figs) - len(bad) - len(empty)} drawn with data"
                        f"{f', {len(empty)} empty with a note' if empty else ''}; {len(imgs)} image(s); "
                        f"{len(blocked)} outside request(s) blocked; {time.perf_counter() - t:.1f} s" +
                        (f" -> {shots / (Path(name).stem + '.png')}" if shots is not None and name in shot_pages else ""))
                    ctx.close()
            finally:
                browser.close()
    finally:
        srv.shutdown(); srv.server_close()
    return failures, results

# --- the command ------------------------------------------------------------------------------------------------------

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--proc", action="store_true", help="run nbdev's proc_nbs first")
    ap.add_argument("--out", type=Path, default=REPO / "_proc" / "_html", help="where the HTML goes (emptied first)")
    ap.add_argument("--shots", type=Path, default=REPO / "_proc" / "_shots", help="where the screenshots go")
    ap.add_argument("--max-shot-height", type=int, default=0, help="keep only the top N pixels of each screenshot (0: whole page)")
    ap.add_argument("--no-browser", action="store_true", help="render and check links only")
    a = ap.parse_args(argv)
    a.out, a.shots = a.out.resolve(), a.shots.resolve()
    t0 = time.perf_counter()
    os.chdir(REPO)
    if a.proc:
        from nbdev.serve import proc_nbs
        proc_nbs(); print(f"proc_nbs: {time.perf_counter() - t0:.1f} s")
    print("render (no execution: the committed outputs):")
    done = render(REPO / "_proc", a.out)
    t1 = time.perf_counter(); print(f"rendered {len(done)} page(s) into {a.out} in {t1 - t0:.1f} s")
    broken = check_links(a.out)
    print(f"links: {len(broken)} broken" + "".join(f"\n  {b}" for b in broken))
    cut = check_descriptions(read_pages(REPO / "_proc"))
    if cut: print(f"warnings: {len(cut)} page description(s) cut short by nbdev (not a failure)" + "".join(f"\n  {c}" for c in cut))
    failures = []
    if not a.no_browser:
        pages = [d.page for d in done if d.figures or d.page in SCREENSHOT_PAGES]
        missing = [p for p in SCREENSHOT_PAGES if p not in {d.page for d in done}]
        failures += [f"{p}: no such page rendered (screenshot wanted)" for p in missing]
        print("browser (headless Chromium, offline):")
        f, _ = check_browser(a.out, pages, a.shots, max_shot_height=a.max_shot_height)
        failures += f
        print(f"browser: {len(failures)} failure(s)" + "".join(f"\n  {x}" for x in failures))
    print(f"site check: {time.perf_counter() - t0:.1f} s")
    return 1 if broken or failures else 0

if __name__ == "__main__":
    sys.exit(main())
