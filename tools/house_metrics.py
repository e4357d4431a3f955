"""The house's measures (issue 36): src lines, modules over 600 lines, function-level imports of
whestbench's own modules, and WhestError constructions without ``fix=``. ``--files`` lists each site.

    python tools/house_metrics.py [--files] [paths under src/whestbench ...]
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "src" / "whestbench"


def _error_classes() -> set[str]:
    tree = ast.parse((PKG / "errors.py").read_text())
    classes = {"WhestError"}
    changed = True
    while changed:
        changed = False
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name not in classes:
                if {ast.unparse(b) for b in node.bases} & classes:
                    classes.add(node.name)
                    changed = True
    return classes


def measure(paths: list[Path]) -> dict:
    errors = _error_classes()
    out = {"lines": 0, "over_600": [], "fn_imports": [], "no_fix": []}
    for path in paths:
        text = path.read_text()
        rel = path.relative_to(PKG)
        n = len(text.splitlines())
        out["lines"] += n
        if n > 600:
            out["over_600"].append(f"{rel} {n}")
        tree = ast.parse(text)
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("whestbench")):
                        out["fn_imports"].append(f"{rel}:{node.lineno} {node.module}")
                    elif isinstance(node, ast.Import) and any(a.name.startswith("whestbench") for a in node.names):
                        out["fn_imports"].append(f"{rel}:{node.lineno} {node.names[0].name}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = node.func.id if isinstance(node.func, ast.Name) else (
                    node.func.attr if isinstance(node.func, ast.Attribute) else None)
                if name in errors and not any(k.arg == "fix" or k.arg is None for k in node.keywords):
                    out["no_fix"].append(f"{rel}:{node.lineno} {name}")
    return out


def main(argv: list[str]) -> int:
    show = "--files" in argv
    args = [a for a in argv if a != "--files"]
    paths = sorted(p for a in args for p in ([Path(a)] if a.endswith(".py") else Path(a).rglob("*.py"))) if args \
        else sorted(PKG.rglob("*.py"))
    m = measure([p.resolve() for p in paths])
    print(f"src lines: {m['lines']}")
    print(f"modules over 600 lines: {len(m['over_600'])}  {', '.join(m['over_600'])}")
    print(f"function-level imports of whestbench's own modules: {len(m['fn_imports'])} (at most 20)")
    print(f"WhestError constructions without fix=: {len(m['no_fix'])}")
    if show:
        for key in ("fn_imports", "no_fix"):
            for site in m[key]:
                print(f"  {key}: {site}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
