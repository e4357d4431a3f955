"""A script written against whestbench 0.16.2's public dataset API runs unchanged with ours (issue 15).

``api_0_16_script.py`` (beside this file) bakes, loads, slices, merges, combines and drives the CLI
through the reference's public names only, printing one JSON line per step. It runs once in the
reference's venv, once with ours, and once with ours with torch hidden (the reference venv has no
torch). What both print must agree:

- identity columns, shapes, metadata, return values, and the CPU path's numbers (SPEC §2 (a):
  bit-identical to the reference at one BLAS thread, as both run here) are equal;
- an error: ours raises an instance of every class the reference's raised (ours may add a base,
  e.g. an existing output is a FileExistsError and a usage error), and raises exactly when it does;
- except SPEC §8's deliberate refusals (a slice without seeds; splits that share seeds), which the
  reference accepts and ours refuses with an ``InvalidDatasetError``/``ValueError``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.reference

SCRIPT = Path(__file__).with_name("api_0_16_script.py")
SRC = Path(__file__).resolve().parents[2] / "src"
REFUSALS = "refusals"
OUR_COLUMNS = ("all_layer_stderr",)  # every bake of ours adds them; a 0.16 script never asks for them


def _steps(stdout: str) -> dict[str, dict]:
    steps = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return {s.pop("step"): s for s in steps}


@pytest.fixture(scope="module")
def reference_run(run_reference_python, tmp_path_factory) -> dict[str, dict]:
    work = tmp_path_factory.mktemp("api-script-reference")
    return _steps(run_reference_python(SCRIPT.read_text(), str(work)).stdout)


def _ours(reference_env, tmp_path_factory, *, hide_torch: bool) -> dict[str, dict]:
    work = tmp_path_factory.mktemp("api-script-ours")
    path = [str(SRC)]
    if hide_torch:
        site = tmp_path_factory.mktemp("no-torch")
        (site / "sitecustomize.py").write_text('import sys\nsys.modules["torch"] = None\n')
        path.insert(0, str(site))
    env = {**reference_env, "PYTHONPATH": os.pathsep.join(path)}
    proc = subprocess.run([sys.executable, str(SCRIPT), str(work)], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return _steps(proc.stdout)


@pytest.fixture(scope="module")
def our_run(reference_env, tmp_path_factory) -> dict[str, dict]:
    return _ours(reference_env, tmp_path_factory, hide_torch=False)


@pytest.fixture(scope="module")
def our_run_without_torch(reference_env, tmp_path_factory) -> dict[str, dict]:
    return _ours(reference_env, tmp_path_factory, hide_torch=True)


def _disagreements(ref, ours, where: str = "") -> list[str]:
    if isinstance(ref, dict) and isinstance(ours, dict):
        if "raised" in ref and "raised" in ours:
            ok = set(ref["raised"]) <= set(ours["raised"]) and bool(ref["raised"]) == bool(ours["raised"])
            found = [] if ok else [f"{where}: reference raised {ref['raised']}, ours {ours['raised']}"]
            rest = {k: v for k, v in ref.items() if k != "raised"}
            return found + _disagreements(rest, {k: v for k, v in ours.items() if k != "raised"}, where)
        found = [f"{where}.{k}: missing on one side" for k in sorted(set(ref) ^ set(ours))]
        for k in sorted(set(ref) & set(ours)):
            found += _disagreements(ref[k], ours[k], f"{where}.{k}")
        return found
    return [] if ref == ours else [f"{where}: reference {ref!r}, ours {ours!r}"]


def test_every_step_ran_on_both_sides(reference_run, our_run):
    assert list(reference_run) == list(our_run)
    assert len(reference_run) >= 10


@pytest.mark.parametrize("step", ["create_dataset", "load", "mlps", "merge", "merge_errors", "combine", "errors",
                                  "top_level", "cli"])
def test_the_step_prints_what_the_reference_prints(step, reference_run, our_run):
    assert reference_run[step].get("raised") is None, f"the reference failed this step: {reference_run[step]}"
    assert _disagreements(reference_run[step], _without_our_columns(our_run[step]), step) == []


def _without_our_columns(result: dict) -> dict:
    """A step's result with the columns only ours writes (issue 14's standard errors) taken out of
    its ``columns`` listing, after checking that they are there."""
    if "columns" not in result:
        return result
    assert set(OUR_COLUMNS) <= set(result["columns"]), result["columns"]
    return {**result, "columns": [c for c in result["columns"] if c not in OUR_COLUMNS]}


def test_the_deliberate_refusals_are_the_only_difference(reference_run, our_run):
    assert reference_run[REFUSALS] == {"slice_without_seeds": {"raised": []}, "splits_sharing_seeds": {"raised": []}}
    assert "ValueError" in our_run[REFUSALS]["slice_without_seeds"]["raised"]
    assert "InvalidDatasetError" in our_run[REFUSALS]["splits_sharing_seeds"]["raised"]


def test_without_torch_create_dataset_torch_raises_import_error_as_the_reference(reference_run, our_run_without_torch):
    assert reference_run["torch"] == {"raised": ["ImportError"]}, "the reference venv is expected to lack torch"
    assert _disagreements(reference_run["torch"], our_run_without_torch["torch"], "torch") == []


def test_with_torch_create_dataset_torch_gives_the_cpu_bakes_identity_columns(our_run):
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed (the gpu extra)")
    torch_step, cpu = our_run["torch"], our_run["load"]
    assert torch_step.pop("backend") == "torch"
    assert torch_step == {k: cpu[k] for k in torch_step}
