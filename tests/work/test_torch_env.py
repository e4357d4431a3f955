"""Asking for the torch backend without torch installed: an ImportError (as whestbench 0.16 and the
manual say) that the CLI still reports as a one-line usage error (exit 2).

torch is hidden from a child interpreter by a ``sitecustomize`` that sets ``sys.modules["torch"] =
None``: ``import torch`` then raises ModuleNotFoundError and ``importlib.util.find_spec("torch")``
says it is absent, as on a machine without it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
BAKE = ["--n-mlps", "1", "--n-samples", "10", "--width", "4", "--depth", "1", "--seed", "1"]


@pytest.fixture
def run_without_torch(tmp_path):
    site = tmp_path / "no-torch"
    site.mkdir()
    (site / "sitecustomize.py").write_text('import sys\nsys.modules["torch"] = None\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(SRC), os.environ.get("PYTHONPATH", "")])}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120, env=env,
                              cwd=tmp_path)

    return run


def test_the_python_api_raises_an_import_error_that_is_also_a_usage_error(run_without_torch, tmp_path):
    script = textwrap.dedent(
        """
        from whestbench.dataset_torch import create_dataset_torch
        from whestbench.errors import UsageError
        try:
            import torch
        except ImportError:
            pass
        else:
            raise SystemExit("torch is not hidden")
        try:
            create_dataset_torch(n_mlps=1, n_samples=10, width=4, depth=1, mlp_seeds=[1], output_path="out",
                                 device="cpu")
        except ImportError as exc:
            print(isinstance(exc, UsageError), exc.name, exc, sep="|")
        """
    )
    proc = run_without_torch("-c", script)
    assert proc.returncode == 0, proc.stderr
    is_usage, name, message = proc.stdout.strip().split("|")
    assert is_usage == "True" and name == "torch" and "pip install 'whestbench[gpu]'" in message
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flags", [["--torch"], ["--device", "cpu"]], ids=["--torch", "--device"])
def test_the_cli_says_how_to_install_torch_in_one_line_and_exits_2(run_without_torch, tmp_path, flags):
    proc = run_without_torch("-m", "whestbench", "dataset", "bake", *BAKE, *flags, "--output", "out")
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if not line.startswith("note: ")]
    assert len(errors) == 1 and errors[0].startswith("error: the torch backend needs torch: pip install 'whestbench[gpu]'")
    assert not (tmp_path / "out").exists()
