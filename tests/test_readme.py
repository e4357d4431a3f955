"""The README's commands run as written: every ```bash block, in order, in one bash (``set -euo
pipefail``), in an empty directory, with ``whest`` on PATH running this tree; then its ```python block.
(tests/helpers/doc_commands.py holds the rules, which tests/test_docs_commands.py applies to docs/*.md too.)

The only changes made to the README's text, by rule:

- Sizes: the value after ``--n-samples``, ``--width`` and ``--depth`` (and of ``n_samples=``,
  ``width=``, ``depth=`` in Python) becomes ``SMALL``'s, so the tour takes seconds. ``--n-mlps`` is
  kept: the slices and ranges are written for it.
- Skipped lines (replaced by ``:``), and only these, judged by their command (not their comment), by
  ``doc_commands.SKIP``: they need the network (``pip install``, the Hub verbs ``push``, ``upload``,
  ``pull``, ``download``), a GPU (``--device cuda``, ``--device mps``), or torch when the torch extra is
  not installed (``--torch``, ``--device cpu``, ``torchrun``), or they are the test suite
  (``bash tools/test.sh``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.doc_commands import SKIP, command, small  # noqa: F401  (the rules every documented command follows)


REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", README.read_text(), re.S | re.M)


def tour_script() -> tuple[str, list[str]]:
    """The bash blocks as one script, sizes made small, skipped lines replaced by ``:``; and those lines."""
    lines, skipped = [], []
    for block in blocks("bash"):
        for line in block.splitlines():
            assert not line.rstrip().endswith("\\"), f"continuation lines hide commands from the rules: {line}"
            if any(rule.search(command(line)) for rule in SKIP.values()):
                skipped.append(line.strip())
                lines.append(":")
            else:
                lines.append(small(line))
    return "\n".join(lines) + "\n", skipped


@pytest.fixture
def shell_env(tmp_path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    whest = bin_dir / "whest"
    whest.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m whestbench "$@"\n')
    whest.chmod(0o755)
    src = str(REPO / "src")
    return {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p),
        "HF_HOME": str(tmp_path / "hf-home"),  # loading writes a datasets cache: keep it here
        "WHEST_RECOMPUTE_DIR": str(tmp_path / "recompute"),  # verify --recompute's bakes: here, not ~/.cache
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
    }


def test_the_size_rule_changes_only_the_size_values():
    line = 'shape="--n-mlps 8 --n-samples 1e5 --width 64 --depth 4"; create_dataset(n_samples=100_000, width=64, depth=4)'
    assert small(line) == ('shape="--n-mlps 8 --n-samples 4096 --width 8 --depth 2"; '
                           "create_dataset(n_samples=4096, width=8, depth=2)")


def test_only_network_gpu_and_test_suite_lines_are_skipped():
    script, skipped = tour_script()
    assert {rule for line in skipped for rule, pattern in SKIP.items() if pattern.search(command(line))} >= {
        "needs the network", "needs a GPU", "is the test suite"}
    ran = {line.split()[2] for line in script.splitlines() if line.startswith("whest dataset ")}
    assert ran == {"generate-seeds", "bake", "verify", "merge", "combine-splits", "prepare-arrow", "inspect", "calibrate"}


@pytest.mark.slow
def test_the_bash_blocks_run_in_order_from_an_empty_directory(tmp_path, shell_env):
    script, _ = tour_script()
    work = tmp_path / "tour"
    work.mkdir()
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=work, env=shell_env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    for made in ("seeds.json", "public", "holdout", "merged", "eval", "means.png", "long"):
        assert (work / made).exists(), made
    assert not list(work.glob("*.whest-work")), "a finished bake left its work directory behind"


@pytest.mark.slow
def test_the_python_block_runs(tmp_path, shell_env):
    (code,) = blocks("python")
    proc = subprocess.run([sys.executable, "-c", small(code)], cwd=tmp_path, env=shell_env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert all((tmp_path / made).is_dir() for made in ("ds", "merged", "holdout", "eval"))
