"""The layout docs/architecture.md describes is the layout of src/: every module on the page, the
layers importing downwards only, one home for the error classes and the estimator's name."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "src" / "whestbench"
PAGE = REPO / "docs" / "architecture.md"
LAYERS = ["compute", "work", "dataset", "cli"]  # lowest first
HELPERS = {"errors", "text", "atomic", "paths", "events"}  # importable from any layer; they import none


def _modules() -> list[Path]:
    return sorted(p.relative_to(PKG) for p in PKG.rglob("*.py"))


def _imports(path: Path) -> list[str]:
    """Every ``whestbench...`` module ``path`` imports, at the top or inside a function."""
    found = []
    for node in ast.walk(ast.parse((PKG / path).read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("whestbench"):
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("whestbench")]
    return found


def _page_modules() -> dict[str, set[str]]:
    """Section ("top", "compute", ...) -> the module files its table names."""
    sections: dict[str, set[str]] = {}
    current = None
    for line in PAGE.read_text().splitlines():
        if line.startswith("### "):
            word = line[4:].split("/")[0].split()[0].lower()
            current = "top" if word == "top" else word
            sections[current] = set()
        elif current and (m := re.match(r"\| `([a-z0-9_]+\.py)` \|", line)):
            sections[current].add(m.group(1))
    return sections


def test_the_module_map_names_every_module_and_only_modules_that_exist():
    page = _page_modules()
    named = {(f"{s}/{m}" if s != "top" else m) for s, ms in page.items() for m in ms}
    actual = {str(p) for p in _modules() if not (p.name == "__init__.py" and len(p.parts) > 1)}
    actual |= {"work/__init__.py"}  # holds a constant of its own
    assert sorted(actual - named) == [], "modules docs/architecture.md does not name"
    assert sorted(named - actual) == [], "docs/architecture.md names modules that do not exist"


@pytest.mark.parametrize("path", _modules(), ids=str)
def test_a_layer_imports_no_layer_above_it_and_the_helpers_import_no_layer(path):
    own = path.parts[0] if len(path.parts) > 1 else None
    for name in _imports(path):
        parts = name.split(".")
        target = parts[1] if len(parts) > 1 else None
        if own in LAYERS and target in LAYERS:
            assert LAYERS.index(target) <= LAYERS.index(own), f"{path} imports {name}, a layer above it"
        if own is None and path.stem in HELPERS:
            assert target not in LAYERS, f"{path} is a helper every layer may import; it imports {name}"


def test_every_public_error_class_is_defined_in_errors_py():
    # Control flow that never leaves its module (errors.py's docstring lists these).
    local = {"AlreadyBaked", "UnitStopped", "_ShapeError", "_Absent"}
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
