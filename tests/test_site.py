"""scripts/render_site.py on a tiny processed site: pages named by their front matter, Quarto's cell options applied,
links rewritten as Quarto does, broken links and anchors found, plotly inlined; in Chromium (when installed) a
figure that draws passes and one that does not is reported."""
import importlib.util, json, sys
from pathlib import Path
import pytest

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("render_site", REPO / "scripts" / "render_site.py")
site = sys.modules["render_site"] = importlib.util.module_from_spec(spec); spec.loader.exec_module(site)
DOCS = site.doc_url()  # nbdev's absolute doc links start with this
GIT = "https://github.com/sapo-nb/sapo_nb/blob/main/"  # settings.ini's git_url: links into this repository are checked

def _nb(cells):
    return {"nbformat": 4, "nbformat_minor": 5, "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
            "cells": [dict(c, id=f"c{i}", metadata={}) for i, c in enumerate(cells)]}
def _md(src): return {"cell_type": "markdown", "source": src}
def _raw(src): return {"cell_type": "raw", "source": src}
def _code(src, outputs=()): return {"cell_type": "code", "source": src, "execution_count": None, "outputs": list(outputs)}
def _html(h): return {"output_type": "display_data", "metadata": {}, "data": {"text/html": h}}

def _figure_html(kind="data") -> str:
    "A plotly figure as the notebooks record it (plotly.js from the CDN): with data, empty with a note, or blank."
    import plotly.graph_objects as go
    fig = go.Figure(go.Scatter(x=[0, 1, 2], y=[1, 3, 2])) if kind == "data" else go.Figure()
    if kind == "note": fig.add_annotation(text="no runs yet", showarrow=False)
    return fig.to_html(include_plotlyjs="cdn", full_html=False, div_id=kind)

@pytest.fixture
def proc(tmp_path):
    p = tmp_path / "_proc"; p.mkdir()
    (p / "_quarto.yml").write_text("website:\n  sidebar:\n    contents:\n      - section: Pages\n        contents:\n"
                                   "          - 01_alpha.ipynb\n          - beta.ipynb\n          - gone.ipynb\n")
    (p / "images").mkdir(); (p / "images" / "ok.png").write_bytes(b"\x89PNG")
    (p / "01_alpha.ipynb").write_text(json.dumps(_nb([
        _raw("---\ntitle: Alpha\ndescription: The first page\noutput-file: alpha.html\n---\n"),
        _md("## Files of a node\n\nSee [beta](beta.ipynb#section-two), [a symbol](" + DOCS + "beta.html#thing) and "
            "[source](https://example.com){target=\"_blank\"}.\n\n![ok](images/ok.png) ![missing](images/missing.png)\n\n"
            "[here](#files-of-a-node) [nowhere](#Files-of-a-node)\n\n"
            f"[ok]({GIT}settings.ini#L1) [gone]({GIT}nope.py) [past the end]({GIT}settings.ini#L99999)"),
        _code("#| echo: false\n#| output: asis\nhidden_source_marker()", [{"output_type": "stream", "name": "stdout", "text": "shown output\n"}]),
        _code("#| include: false\nnot_rendered_marker()"),
    ])))
    (p / "beta.ipynb").write_text(json.dumps(_nb([
        _raw("---\ntitle: Beta\n---\n"), _md("## Section two\n\ntext\n\n## Section two"),
        _code("fig", [_html(_figure_html())]), _code("note", [_html(_figure_html("note"))]), _code("blank", [_html(_figure_html("blank"))]),
        _code("broken", [_html('<div class="plotly-graph-div" id="never-drawn" style="height:200px"></div>')]),
    ])))
    return p

def test_render_and_links(proc, tmp_path):
    out = tmp_path / "html"
    done = {d.source: d for d in site.render(proc, out, log=lambda *a: None)}
    assert {k: v.page for k, v in done.items()} == {"01_alpha.ipynb": "alpha.html", "beta.ipynb": "beta.html"}
    assert (done["01_alpha.ipynb"].figures, done["beta.ipynb"].figures) == (0, 4)
    alpha, beta = (out / "alpha.html").read_text(), (out / "beta.html").read_text()
    assert "<title>Alpha</title>" in alpha and "The first page" in alpha
    assert "hidden_source_marker" not in alpha and "shown output" in alpha  # echo: false hides the code, keeps the output
    assert "not_rendered_marker" not in alpha and "#| " not in alpha
    assert 'href="beta.html#section-two"' in alpha and 'href="beta.html#thing"' in alpha  # .ipynb and doc links made relative
    assert "{target=" not in alpha
    assert 'id="files-of-a-node"' in alpha and 'id="section-two-1"' in beta  # pandoc's ids, duplicates numbered
    assert 'src="https://cdn.plot.ly' not in beta and "plotly.js v" in beta and "plotly.js v" not in alpha  # inlined where there are figures
    assert (out / "images" / "ok.png").exists()
    assert sorted(site.check_links(out)) == sorted([
        "alpha.html: #Files-of-a-node (no id 'Files-of-a-node' on this page)",
        "alpha.html: beta.html#thing (no id 'thing' on beta.html)",
        "alpha.html: gone.ipynb (no such file in the site)",
        f"alpha.html: {GIT}nope.py (no nope.py in the repository)",
        f"alpha.html: {GIT}settings.ini#L99999 (settings.ini has {len((REPO / 'settings.ini').read_bytes().splitlines())} lines)",
        "alpha.html: images/missing.png (no such file in the site)",
        "beta.html: gone.ipynb (no such file in the site)"])

def test_pandoc_ids():
    for text, want in [("Files of a node", "files-of-a-node"), ("SwarmNode.run", "swarmnode.run"), ("select_external", "select_external"),
                       ("1. What it is?", "what-it-is"), ("What we ran, and why it differs", "what-we-ran-and-why-it-differs"),
                       ("2000", "section"), ("Ändern  Sie", "ändern-sie")]:
        assert site.pandoc_id(text) == want, (text, site.pandoc_id(text))

def test_description_cut(tmp_path):
    nbs = tmp_path / "nbs"; nbs.mkdir()
    (nbs / "a.ipynb").write_text(json.dumps(_nb([_md("# A\n> first line of the summary\n> and its second line")])))
    (nbs / "b.ipynb").write_text(json.dumps(_nb([_md("# B\n> one line")])))
    pages = [site.Page(nbs / "a.ipynb", "a.ipynb", "a.html", "A", "first line of the summary"),
             site.Page(nbs / "b.ipynb", "b.ipynb", "b.html", "B", "one line")]
    assert [w.split(":")[0] for w in site.check_descriptions(pages, nbs)] == ["a.ipynb"]

@pytest.mark.slow
def test_figures_in_chromium(proc, tmp_path):
    if not Path(site.CHROMIUM).is_file() or importlib.util.find_spec("playwright") is None:
        pytest.skip("needs Debian's chromium and playwright")
    out = tmp_path / "html"
    site.render(proc, out, log=lambda *a: None)
    failures, figs = site.check_browser(out, ["beta.html", "alpha.html"], tmp_path / "shots", shot_pages=["beta.html"],
                                        timeout_s=3, log=lambda *a: None)
    assert [f["id"] for f in figs["beta.html"] if f["drawn"] and f["shapes"]] == ["data"]  # the real figure drew offline
    assert sorted(f for f in failures if "plotly" in f) == [  # the placeholder with a note passes
        "beta.html: plotly figure blank drew an empty figure: its output has no traces and no note saying why",
        "beta.html: plotly figure never-drawn did not draw (svg: False, 0 trace(s), 0 drawn)"]
    assert any("images/missing.png did not load" in f for f in failures), failures
    assert (tmp_path / "shots" / "beta.png").stat().st_size > 1000
