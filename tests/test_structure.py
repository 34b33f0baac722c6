"""The shape of the library: notebooks numbered in dependency order, no private names crossing modules, methods
attached with `@patch` (so they are in `_modidx` and the docs)."""
import ast, json, re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NBS = sorted((ROOT / "nbs").glob("[0-9][0-9]_*.ipynb"))


def cells(nb):
    return ["".join(c["source"]) for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code"]


def module_of(nb):
    m = re.search(r"^#\| default_exp (\w+)", "\n".join(cells(nb)), re.M)
    return m.group(1) if m else None


# The one pair whose examples run both ways: the checkers of `rewards` are shown on real questions from the task
# streams, and the task streams keep only questions a checker can score. The code depends one way (tasks on rewards);
# only the examples and tests of `rewards` draw their questions from `tasks`.
EXAMPLES_ONLY = {("01_rewards.ipynb", "tasks")}


def test_notebooks_are_numbered_in_dependency_order():
    "No notebook, in its library code or its tests, imports a module that a later notebook defines (`EXAMPLES_ONLY` aside)."
    number = {module_of(nb): int(nb.name[:2]) for nb in NBS if module_of(nb)}
    assert len(set(number.values())) == len(number), "two library notebooks share a number"
    late = []
    for nb in NBS:
        own = int(nb.name[:2])
        for src in cells(nb):
            for mod in re.findall(r"\bsapo_nb\.(\w+)|^\s*from \.(\w+) import", src, re.M):
                mod = next(m for m in mod if m)
                exported = src.startswith("#| export")
                if number.get(mod, -1) > own and (exported or (nb.name, mod) not in EXAMPLES_ONLY):
                    late.append(f"{nb.name} uses {mod} ({number[mod]:02d})")
    assert not late, late


def test_no_private_name_crosses_modules():
    "A module imports only public names from another, and reads no private attribute of another module."
    found = []
    for f in sorted((ROOT / "sapo_nb").glob("*.py")):
        if f.name.startswith("_"): continue
        tree = ast.parse(f.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("sapo_nb")):
                found += [f"{f.name}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    assert not found, found


def test_methods_are_patched_not_assigned():
    "`Class.method = function` keeps a method out of `_modidx` and the docs; `@patch` puts it there."
    assigned = [f"{f.name}: {line.strip()}" for f in sorted((ROOT / "sapo_nb").glob("*.py"))
                for line in f.read_text().splitlines() if re.match(r"^[A-Z]\w*\.\w+(\s*,\s*[A-Z]\w*\.\w+)*\s*=\s*\w", line)]
    assert not assigned, assigned
