"""What `pip install sapo_nb` brings: every package the library imports comes with the plain install, or with the
extra of the one feature that imports it."""
import ast, importlib.metadata as md, re, sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "sapo_nb"
ONLY_WHERE_IT_RUNS = ("google",)  # google.colab: Colab's own, imported only inside a Colab runtime
FEATURE_EXTRAS = {"hivemind": "hivemind"}  # module -> the extra of the one feature that imports it (the DHT pool)


def imported_modules() -> dict:
    "Top-level module -> the files of the package that import it (at any depth: most imports sit inside functions)."
    found = {}
    for path in sorted(PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
            for name in names: found.setdefault(name.split(".")[0], set()).add(path.name)
    return found


def normal(name:str) -> str: return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(requirements) -> set:
    "Normalised distribution names of requirement strings, leaving out those of an extra."
    return {normal(re.split(r"[\s;<>=!~\[(]", r, maxsplit=1)[0]) for r in requirements or [] if "extra ==" not in r}


def installed_by(roots:set) -> set:
    "`roots` and every distribution they require, as far as they are installed here (extras not followed)."
    seen, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        if name in seen: continue
        seen.add(name)
        try: todo.extend(requirement_names(md.requires(name)))
        except md.PackageNotFoundError: pass
    return seen


def declared() -> tuple:
    """What the source declares (not what an older install recorded): `settings.ini`'s requirements, and each extra
    of `setup.py` but the developers' (names normalised)."""
    import configparser
    ini = configparser.ConfigParser()
    ini.read(REPO / "settings.ini")
    plain = requirement_names(ini["DEFAULT"]["requirements"].split())
    call = next(n for n in ast.walk(ast.parse((REPO / "setup.py").read_text()))
                if isinstance(n, ast.keyword) and n.arg == "extras_require")
    extras = {k.value: requirement_names(ast.literal_eval(v)) for k, v in zip(call.value.keys, call.value.values)
              if isinstance(v, ast.List)}  # 'dev' names a variable: the tests' own packages
    return plain, extras


def test_every_package_the_library_imports_comes_with_the_install():
    "A plain install runs every command (the report's statistics too); a feature's own package comes with its extra."
    providers, (plain, extras), missing = md.packages_distributions(), declared(), {}
    plain = installed_by(plain)
    for module, files in imported_modules().items():
        if module in sys.stdlib_module_names or module in ("sapo_nb", *ONLY_WHERE_IT_RUNS): continue
        dists = {normal(d) for d in providers.get(module, [module])}
        if not dists & (plain | extras.get(FEATURE_EXTRAS.get(module), set())): missing[module] = sorted(files)
    assert not missing, f"imported, but neither the plain install nor its feature's extra brings it: {missing}"


def test_each_tracker_names_an_extra_that_brings_its_package():
    """Trackers import their package by name at run time (`trackers.EXTRAS`), out of the reach of the scan above; the
    message of a missing one says `pip install "sapo_nb[KIND]"`, so that extra must exist and bring the package."""
    from sapo_nb.trackers import EXTRAS
    providers, (_, extras) = md.packages_distributions(), declared()
    for kind, module in EXTRAS.items():
        dists = {normal(d) for d in providers.get(module, [module])}
        assert dists & extras.get(kind, set()), f"sapo_nb[{kind}] does not bring {module} (it brings {extras.get(kind)})"
