"""The shape of the library: notebooks numbered in dependency order, no private names crossing modules, methods
attached with `@patch` (so they are in `_modidx` and the docs)."""
import ast, json, re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NB_NAME = re.compile(r"^(\d+)([a-z]*)_\w+\.ipynb$")  # `07_generation.ipynb`, and a page slotted in later: `07a_x.ipynb`
NBS = sorted(nb for nb in (ROOT / "nbs").glob("*.ipynb") if NB_NAME.match(nb.name))


def cells(nb):
    return ["".join(c["source"]) for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code"]


def module_of(nb):
    m = re.search(r"^#\| default_exp (\w+)", "\n".join(cells(nb)), re.M)
    return m.group(1) if m else None


def place(nb) -> tuple:
    "A notebook's place in the order: its number, then its letter (`07` < `07a` < `07b` < `08`)."
    number, letter = NB_NAME.match(nb.name).groups()
    return int(number), letter


def imported_modules(src:str) -> set:
    "The sapo_nb modules a piece of code imports or names, in every spelling Python allows."
    found = set(re.findall(r"\bsapo_nb\.(\w+)", src)) | set(re.findall(r"^\s*from \.(\w+) import", src, re.M))
    for names in re.findall(r"^\s*from (?:sapo_nb|\.) import (\([^)]*\)|[\w ,]+)", src, re.M):
        found |= {n.split(" as ")[0].strip() for n in names.strip("()").split(",") if n.strip()}
    return found


# The one pair whose examples run both ways: the checkers of `rewards` are shown on real questions from the task
# streams, and the task streams keep only questions a checker can score. The code depends one way (tasks on rewards);
# only the examples and tests of `rewards` draw their questions from `tasks`.
EXAMPLES_ONLY = {("01_rewards.ipynb", "tasks")}


def test_notebook_names_are_all_seen():
    "Every numbered notebook, whatever its suffix, is in the order the tests check (a renamed page cannot slip out)."
    numbered = [nb.name for nb in (ROOT / "nbs").glob("*.ipynb") if nb.name[0].isdigit()]
    assert sorted(numbered) == sorted(nb.name for nb in NBS), set(numbered) - {nb.name for nb in NBS}


def test_imports_are_seen_in_every_spelling():
    "The order test's reader finds `from . import x`, `from sapo_nb import x as y`, dotted names and `from .x import`."
    src = ("from . import grpo, sampler as s\nfrom sapo_nb import node\nimport sapo_nb.panel\nfrom .cli import main\n"
           "from sapo_nb import (monitor,\n    swarm as sw)")
    assert imported_modules(src) == {"grpo", "sampler", "node", "panel", "cli", "monitor", "swarm"}


def test_notebooks_are_numbered_in_dependency_order():
    "No notebook, in its library code or its tests, imports a module that a later notebook defines (`EXAMPLES_ONLY` aside)."
    where = {module_of(nb): place(nb) for nb in NBS if module_of(nb)}
    assert len(set(where.values())) == len(where), "two library notebooks share a place"
    late = []
    for nb in NBS:
        own = place(nb)
        for src in cells(nb):
            exported = src.startswith("#| export")
            for mod in imported_modules(src):
                if mod in where and where[mod] > own and (exported or (nb.name, mod) not in EXAMPLES_ONLY):
                    late.append(f"{nb.name} uses {mod} ({where[mod]})")
    assert not late, late


def _sources():
    "(name, module it belongs to or None, source) for the package, the tests, the benchmarks and the scripts."
    for f in sorted((ROOT / "sapo_nb").glob("*.py")):
        if not f.name.startswith("_"): yield f"sapo_nb/{f.name}", f.stem, f.read_text()
    for folder in ("tests", "bench", "scripts"):
        for f in sorted((ROOT / folder).glob("*.py")): yield f"{folder}/{f.name}", None, f.read_text()


def private_crossings(name:str, own:str|None, src:str) -> list:
    """Private names of another sapo_nb module that `src` imports (`from sapo_nb.x import _y`) or reads as an
    attribute of a module it imported (`x._y`, `sapo_nb.x._y`); `own` is the module the source belongs to."""
    tree, found, modules = ast.parse(src), [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level or mod.startswith("sapo_nb"):
                target = mod.removeprefix("sapo_nb").lstrip(".")
                if target and target != own:
                    found += [f"{name}: {target}.{a.name}" for a in node.names if a.name.startswith("_")]
                if target in ("", "sapo_nb"):  # `from sapo_nb import x as y` / `from . import x`
                    modules.update({a.asname or a.name: a.name for a in node.names})
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("sapo_nb.") and a.asname: modules[a.asname] = a.name.split(".", 1)[1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            v = node.value
            mod = (modules.get(v.id) if isinstance(v, ast.Name) else
                   v.attr if isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name) and v.value.id == "sapo_nb"
                   else None)
            if mod and mod != own: found.append(f"{name}: {mod}.{node.attr}")
    return found


def test_the_privacy_reader_sees_each_crossing():
    "The reader below finds each way of reaching another module's private name, and leaves a module's own alone."
    src = ("from sapo_nb.sampler import _rebuild\nimport sapo_nb.node as node\nfrom sapo_nb import grpo\n"
           "node._check()\ngrpo._torch()\nsapo_nb.panel._x\nfrom .tasks import _eval_set\nnode.SwarmNode")
    assert sorted(private_crossings("f", "tasks", src)) == ["f: grpo._torch", "f: node._check", "f: panel._x",
                                                             "f: sampler._rebuild"]


def test_no_private_name_crosses_modules():
    "A module, a test, a benchmark or a script uses only public names of the modules it imports."
    found = [c for name, own, src in _sources() for c in private_crossings(name, own, src)]
    assert not found, found


def test_methods_are_patched_not_assigned():
    "`Class.method = function` keeps a method out of `_modidx` and the docs; `@patch` puts it there."
    assigned = [f"{f.name}: {line.strip()}" for f in sorted((ROOT / "sapo_nb").glob("*.py"))
                for line in f.read_text().splitlines() if re.match(r"^[A-Z]\w*\.\w+(\s*,\s*[A-Z]\w*\.\w+)*\s*=\s*\w", line)]
    assert not assigned, assigned


IMPORT_LINE = re.compile(r"(from \S+ import |import \S)")


def test_imports_sit_in_cells_of_their_own():
    "The docs step executes every cell holding an import (to show its docs), so an example's code must not share one."
    mixed = []
    for nb in NBS:
        for src in cells(nb):
            if src.startswith("#|"): continue
            lines = [l for l in src.splitlines() if l.strip() and not l.lstrip().startswith("#")]
            if any(IMPORT_LINE.match(l) for l in lines) and not all(IMPORT_LINE.match(l) for l in lines):
                mixed.append(f"{nb.name}: {lines[0][:60]}")
    assert not mixed, mixed


def test_every_test_the_security_page_names_exists():
    "The security page names the test that proves each defence: each of those tests is there to run (or the page lies)."
    page = "".join("".join(c["source"]) for c in json.loads((ROOT / "nbs" / "security.ipynb").read_text())["cells"])
    files = {p.stem for p in (ROOT / "tests").glob("test_*.py")}
    defined = set(re.findall(r"^def (test_\w+)\(", "\n".join(p.read_text() for p in (ROOT / "tests").glob("test_*.py")),
                             re.M))
    named = set(re.findall(r"\b(test_\w+)(?![\w*])", page)) - files - {n[:-4] for n in re.findall(r"test_\w+\.py", page)}
    assert len(named) > 50, named  # the page's table was read
    assert named <= defined, f"the security page names tests that do not exist: {sorted(named - defined)}"
