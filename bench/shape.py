"""The shape of the library as a reader meets it: lines per module, the longest functions, exported cells, long lines.

    python bench/shape.py [--tree .] [--out bench/results/shape.json]

`--tree` is a folder holding `nbs/` and `sapo_nb/` (a checkout, or an older commit unpacked with `git archive`), so
two versions are measured by the same code. Counted: each module's lines; the longest function and method
definitions (lines from `def` to the end of the body); the exported cells of the numbered notebooks (median, 90th
percentile, largest, in source lines); and lines over 120 characters in the package and in the notebooks' sources.
"""
import argparse, ast, json, re, statistics
from pathlib import Path


def module_lines(pkg: Path) -> dict:
    "Lines of each exported module (`_modidx` aside)."
    return {f.stem: len(f.read_text().splitlines()) for f in sorted(pkg.glob("*.py")) if not f.stem.startswith("_")}


def longest_functions(pkg: Path, n: int = 10) -> list:
    "The `n` longest function definitions, as (`module.name`, lines)."
    found = []
    for f in sorted(pkg.glob("*.py")):
        if f.stem.startswith("_"): continue
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((f"{f.stem}.{node.name}", node.end_lineno - node.lineno + 1))
    return sorted(found, key=lambda x: -x[1])[:n]


def exported_cells(nbs: Path) -> list:
    "Source lines of every exported cell of the numbered notebooks (directive lines not counted)."
    sizes = []
    for nb in sorted(nbs.glob("[0-9]*_*.ipynb")):
        for c in json.loads(nb.read_text())["cells"]:
            src = "".join(c["source"]).splitlines()
            if c["cell_type"] == "code" and src and re.match(r"#\|\s*export", src[0]):
                sizes.append(sum(1 for line in src if not line.startswith("#|")))
    return sizes


def long_lines(paths, limit: int = 120) -> int:
    "Lines longer than `limit` characters over the given files (a notebook counts its cells' sources)."
    count = 0
    for p in paths:
        if p.suffix == ".ipynb":
            lines = [l for c in json.loads(p.read_text())["cells"] for l in "".join(c["source"]).splitlines()]
        else:
            lines = p.read_text().splitlines()
        count += sum(len(l) > limit for l in lines)
    return count


def shape(tree: Path) -> dict:
    pkg, nbs = tree / "sapo_nb", tree / "nbs"
    cells = sorted(exported_cells(nbs))
    modules = module_lines(pkg)
    return dict(modules=modules, module_lines_total=sum(modules.values()), longest_functions=longest_functions(pkg),
                exported_cells=len(cells), cell_median=statistics.median(cells),
                cell_p90=cells[int(0.9 * (len(cells) - 1))], cell_max=cells[-1],
                package_lines_over_120=long_lines(p for p in pkg.glob("*.py") if not p.stem.startswith("_")),
                notebook_lines_over_120=long_lines(nbs.glob("[0-9]*_*.ipynb")))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tree", default=".")
    p.add_argument("--out", default=None)
    a = p.parse_args()
    result = shape(Path(a.tree))
    print(json.dumps(result, indent=1))
    if a.out: Path(a.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
