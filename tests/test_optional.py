"""optional.py: the heavy libraries declared once, imported on demand, a missing one named with its fix."""

from __future__ import annotations

import ast
import builtins
import subprocess
import sys
from pathlib import Path

import pytest

from whestbench import optional
from whestbench.errors import TorchMissingError, UsageError, bad_value, InvalidDatasetError

PKG = Path(__file__).resolve().parents[1] / "src" / "whestbench"


def _hide(monkeypatch, name):
    real = builtins.__import__

    def fake(mod, *a, **k):
        if mod == name or mod.startswith(name + "."):
            raise ImportError(f"No module named {mod!r}")
        return real(mod, *a, **k)

    monkeypatch.setattr(builtins, "__import__", fake)
    for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
        monkeypatch.delitem(sys.modules, key)


def test_a_missing_library_is_a_usage_error_naming_what_needs_it_and_the_install_command(monkeypatch):
    _hide(monkeypatch, "matplotlib")
    with pytest.raises(UsageError) as info:
        optional.require("matplotlib.pyplot", needed_for="--plot")
    assert str(info.value) == "--plot needs matplotlib pip install 'whestbench[plot]'."
    assert info.value.fix == "pip install 'whestbench[plot]'." and info.value.name == "matplotlib"


def test_missing_torch_is_torch_missing_error(monkeypatch):
    _hide(monkeypatch, "torch")
    with pytest.raises(TorchMissingError):
        optional.require("torch", needed_for="--torch")


def test_only_declared_libraries_are_required_through_it():
    with pytest.raises(ValueError):
        optional.require("numpy")


def test_every_engine_module_exists_and_imports_a_heavy_library_at_its_top():
    for short, name in optional.ENGINES.items():
        path = PKG / (name.removeprefix("whestbench.").replace(".", "/") + ".py")
        body = ast.parse(path.read_text()).body
        tops = {a.name.split(".")[0] for n in body if isinstance(n, ast.Import) for a in n.names}
        tops |= {n.module.split(".")[0] for n in body if isinstance(n, ast.ImportFrom) and n.module}
        assert tops & set(optional.HEAVY), f"{short}: {path} imports no heavy library at its top"


def test_no_other_module_imports_a_heavy_library_at_its_top():
    engines = {name.removeprefix("whestbench.").replace(".", "/") + ".py" for name in optional.ENGINES.values()}
    found = []
    for path in sorted(PKG.rglob("*.py")):
        rel = str(path.relative_to(PKG))
        if rel in engines:
            continue
        for node in ast.parse(path.read_text()).body:
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            found += [f"{rel}: {n}" for n in names if n.split(".")[0] in optional.HEAVY]
    assert found == []


def test_the_help_imports_no_heavy_library():
    code = ("import sys, runpy; sys.argv=['whest','--help']\n"
            "try: runpy.run_module('whestbench', run_name='__main__')\n"
            "except SystemExit: pass\n"
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {sorted(optional.HEAVY)!r}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_bad_value_shows_the_value_as_metadata_json_and_keeps_its_fields():
    exc = bad_value(InvalidDatasetError, "metadata n_mlps", [1, 2], "is not a count.", fix="Re-bake it.",
                    where="ds/metadata.json")
    assert str(exc) == "ds/metadata.json: metadata n_mlps [1, 2] is not a count. Re-bake it."
    assert (exc.problem, exc.where, exc.fix) == ("metadata n_mlps [1, 2] is not a count.", "ds/metadata.json", "Re-bake it.")
    assert str(bad_value(UsageError, "--tag", "x" * 100, "is too long.", fix="f", max_len=10)) == "--tag 'xxxxxx... is too long. f"
