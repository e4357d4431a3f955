"""The layout docs/architecture.md describes is the layout of src/: every module on the page, the
packages importing downwards only, no import circle anywhere, and one home for the error classes and
the estimator's name."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "src" / "whestbench"
PAGE = REPO / "docs" / "architecture.md"
LAYERS = ["compute", "work", "format", "hub", "bake", "verify", "assemble", "cli"]  # lowest first
HELPERS = {"errors", "text", "atomic", "paths", "events", "values", "hubenv", "optional"}  # importable from any layer; they import none
FACES = {"__init__", "__main__", "dataset_io", "dataset_torch", "dataset"}  # public faces: may import any layer
MAX_MODULES = 15  # modules one package folder holds directly


def _modules() -> list[Path]:
    return sorted(p.relative_to(PKG) for p in PKG.rglob("*.py"))


def _name(path: Path) -> str:
    parts = ["whestbench", *path.with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[str]:
    """Every ``whestbench...`` module ``path`` imports, at the top or inside a function; for
    ``from package import module`` the module itself."""
    known = {_name(p) for p in _modules()}
    found = []
    for node in ast.walk(ast.parse((PKG / path).read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("whestbench"):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.append(sub if sub in known else node.module)
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("whestbench")]
    return found


def _page_modules() -> dict[str, set[str]]:
    """Section ("top", "compute", "compute/philox", ...) -> the module files its table names."""
    sections: dict[str, set[str]] = {}
    current = None
    for line in PAGE.read_text().splitlines():
        if line.startswith("### "):
            word = line[4:].split()[0].rstrip("/").lower()
            current = "top" if word == "top" else word
            sections[current] = set()
        elif current and (m := re.match(r"\| `([a-z0-9_/]+\.py)` \|", line)):
            sections[current].add(m.group(1))
    return sections


def test_the_module_map_names_every_module_and_only_modules_that_exist():
    page = _page_modules()
    named = {(f"{s}/{m}" if s != "top" else m) for s, ms in page.items() for m in ms}
    actual = {str(p) for p in _modules() if not (p.name == "__init__.py" and len(p.parts) > 1)}
    actual |= {"work/__init__.py", "dataset/__init__.py"}  # a constant of its own; 0.16's public face
    assert sorted(actual - named) == [], "modules docs/architecture.md does not name"
    assert sorted(named - actual) == [], "docs/architecture.md names modules that do not exist"


@pytest.mark.parametrize("path", _modules(), ids=str)
def test_a_package_imports_no_package_above_it_and_the_helpers_import_no_package(path):
    own = path.parts[0] if len(path.parts) > 1 else None
    for name in _imports(path):
        parts = name.split(".")
        target = parts[1] if len(parts) > 1 else None
        if own in LAYERS and target in LAYERS:
            assert LAYERS.index(target) <= LAYERS.index(own), f"{path} imports {name}, a package above it"
        if own in LAYERS:
            assert target in LAYERS or target in HELPERS, f"{path} imports {name}, a public face (import the package)"
        if own is None and path.stem in HELPERS:
            assert target not in LAYERS, f"{path} is a helper every layer may import; it imports {name}"


def test_no_import_circle_exists_anywhere_in_src():
    """Every import counts, also one inside a function: a circle means two modules own one concept."""
    graph = {_name(p): {n for n in _imports(p) if n != _name(p)} for p in _modules()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert circles == []


def test_the_circle_check_finds_a_circle(monkeypatch, tmp_path):
    """The check above can fail: two modules that import each other are one circle."""
    (tmp_path / "a.py").write_text("from whestbench import b\n")
    (tmp_path / "b.py").write_text("def f():\n    from whestbench.a import f\n")
    monkeypatch.setattr(sys.modules[__name__], "PKG", tmp_path)
    with pytest.raises(AssertionError):
        test_no_import_circle_exists_anywhere_in_src()


@pytest.mark.parametrize("folder", sorted({p.parent for p in _modules()}), ids=str)
def test_no_package_folder_holds_more_than_fifteen_modules(folder):
    held = [p for p in _modules() if p.parent == folder and p.name != "__init__.py"]
    assert len(held) <= MAX_MODULES, f"{folder} holds {len(held)} modules: split it into packages"


@pytest.mark.parametrize("layer", LAYERS)
def test_each_package_says_what_it_owns_and_exactly_what_it_may_import(layer):
    doc = ast.get_docstring(ast.parse((PKG / layer / "__init__.py").read_text())) or ""
    assert len(doc.split()) > 12, f"{layer}/__init__.py does not say what the package owns"
    m = re.search(r"May import: (.*?)(?:\.|$)", " ".join(doc.split()))
    assert m, f"{layer}/__init__.py does not say what it may import"
    said = set(re.findall(r"``(\w+)``", m.group(1)))
    assert said == set(LAYERS[:LAYERS.index(layer)]), f"{layer}/__init__.py: 'May import' names {sorted(said)}"


def test_every_public_error_class_is_defined_in_errors_py():
    # Control flow that never leaves its module (errors.py's docstring lists these).
    local = {"UnitStopped", "_ShapeError", "_Absent"}
    elsewhere = []
    for path in _modules():
        if path == Path("errors.py"):
            continue
        for node in ast.walk(ast.parse((PKG / path).read_text())):
            if isinstance(node, ast.ClassDef) and node.name not in local:
                bases = {ast.unparse(b) for b in node.bases}
                if node.name.endswith(("Error", "Exception")) or bases & {"Exception", "ValueError", "RuntimeError",
                                                                             "UsageError", "WorkFailed", "BaseException"}:
                    elsewhere.append(f"{path}: {node.name}")
    assert elsewhere == []


def test_the_estimator_names_are_written_in_one_module():
    hits = sorted({str(p) for p in _modules() if '"control-variate"' in (PKG / p).read_text()})
    assert hits == ["compute/estimation.py"]


def test_the_error_tree_in_the_docs_names_exactly_the_classes_errors_py_defines():
    defined = {node.name for node in ast.walk(ast.parse((PKG / "errors.py").read_text())) if isinstance(node, ast.ClassDef)}
    docs = (REPO / "docs" / "cli.md").read_text()
    tree = docs[docs.index("### Errors"):].split("```")[1]
    assert set(re.findall(r"[├└]── (\w+)", tree)) == defined


# The house (issue 36): measured by tools/house_metrics.py, held here.

def _house():
    sys.path.insert(0, str(REPO / "tools"))
    try:
        import house_metrics
    finally:
        sys.path.pop(0)
    return house_metrics.measure(sorted(PKG.rglob("*.py")))


def test_no_module_in_src_is_over_six_hundred_lines():
    assert _house()["over_600"] == []


def test_whestbench_s_own_modules_are_imported_in_the_header():
    """At most 20 function-level imports of whestbench's own modules (the engines that import a heavy
    library at their top load through optional.engine_module)."""
    sites = _house()["fn_imports"]
    assert len(sites) <= 20, sites


def test_every_whest_error_is_made_with_its_fix():
    assert _house()["no_fix"] == []


def test_the_house_checks_can_fail(tmp_path):
    sys.path.insert(0, str(REPO / "tools"))
    try:
        import house_metrics
    finally:
        sys.path.pop(0)
    (tmp_path / "errors.py").write_text((PKG / "errors.py").read_text())
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from whestbench import text\n    raise UsageError('x')\n" + "\n" * 600)
    monkey = house_metrics.PKG
    house_metrics.PKG = tmp_path
    try:
        m = house_metrics.measure([bad])
    finally:
        house_metrics.PKG = monkey
    assert len(m["over_600"]) == 1 and len(m["fn_imports"]) == 1 and len(m["no_fix"]) == 1
