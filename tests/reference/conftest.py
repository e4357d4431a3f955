"""Run the released whestbench 0.16.2 beside ours, for the interoperability tests in this folder.

The reference shares our package name and our ``whest`` command, so it lives in its own virtual
environment and only ever runs in a subprocess. Where it comes from, in order:

1. env ``WHEST_REFERENCE_PYTHON``: the python of an existing reference venv;
2. ``tools/make-reference-venv.sh`` creating (or reusing) ``<repo>/.refvenv`` with the same numpy as
   this environment — the first time this needs the package index;
3. otherwise the tests fail when ``WHEST_REQUIRE_REFERENCE=1`` (CI) and are skipped elsewhere.

The reference always runs with single-threaded BLAS unless a test says otherwise: SPEC §2 contract
(a) holds bit-identity only against the reference's single-threaded bake (its own bytes move with
the BLAS thread count). It runs offline, with a private Hugging Face cache.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Mapping, Sequence

import pytest

REPO = Path(__file__).resolve().parents[2]
MAKE_VENV = REPO / "tools" / "make-reference-venv.sh"
REFERENCE_VERSION = "0.16.2"

SINGLE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

# The reference's CLI, called the way its console script does (our `whest` may be first on PATH).
_CLI = "import sys; from whestbench.cli import main; sys.exit(main())"

# Several CLI calls in one interpreter: the reference's imports (datasets, flopscope) cost seconds.
_CLI_BATCH = """
import json, sys
from whestbench.cli import main
for argv in json.loads(sys.argv[1]):
    rc = main(argv)
    if rc:
        sys.exit(f"reference `whest {' '.join(argv)}` exited {rc}")
"""

RunResult = subprocess.CompletedProcess


def _require_or_skip(reason: str) -> None:
    if os.environ.get("WHEST_REQUIRE_REFERENCE") == "1":
        pytest.fail(f"{reason} (WHEST_REQUIRE_REFERENCE=1 makes this an error)", pytrace=False)
    pytest.skip(f"{reason}; set WHEST_REFERENCE_PYTHON to a whestbench=={REFERENCE_VERSION} venv's python")


def _check_reference(python: Path) -> str | None:
    """None if ``python`` runs whestbench 0.16.2 with our numpy, else why not."""
    import numpy

    probe = "from importlib.metadata import version as v; print(v('whestbench'), v('numpy'))"
    try:
        out = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"cannot run the reference python {python}: {exc}"
    got = out.stdout.split()
    want = [REFERENCE_VERSION, numpy.__version__]
    if got != want:
        return f"{python} has whestbench, numpy = {got}; need {want} (re-run tools/make-reference-venv.sh)"
    return None


@pytest.fixture(scope="session")
def reference_python() -> Path:
    """Path to the python of a venv holding whestbench 0.16.2 and this environment's numpy."""
    given = os.environ.get("WHEST_REFERENCE_PYTHON")
    if given:
        python = Path(given)
    else:
        env = {**os.environ, "PYTHON": sys.executable}
        try:
            made = subprocess.run(
                ["bash", str(MAKE_VENV)], capture_output=True, text=True, env=env, timeout=900, check=False
            )
        except (OSError, subprocess.SubprocessError) as exc:
            _require_or_skip(f"could not run {MAKE_VENV.name}: {exc}")
        if made.returncode != 0:
            tail = " | ".join(made.stderr.strip().splitlines()[-3:])
            _require_or_skip(f"{MAKE_VENV.name} failed (exit {made.returncode}): {tail}")
        python = Path(made.stdout.strip().splitlines()[-1])
    problem = _check_reference(python)
    if problem:
        _require_or_skip(problem)
    return python


@pytest.fixture(scope="session")
def reference_env(tmp_path_factory) -> dict[str, str]:
    """Environment for reference runs: single-threaded BLAS, offline, a private HF cache."""
    hf_home = tmp_path_factory.mktemp("reference-hf-home")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(SINGLE_THREAD)
    env.update(
        HF_HOME=str(hf_home),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        WHEST_SKIP_HARDWARE_FALLBACK_PROBES="1",
        PYTHONWARNINGS="ignore",
        TERM="dumb",
        COLUMNS="200",
    )
    return env


def _run(cmd: Sequence[str], env: Mapping[str, str], check: bool, cwd: Path | None) -> RunResult:
    done = subprocess.run(list(cmd), capture_output=True, text=True, env=dict(env), cwd=cwd, timeout=600)
    if check and done.returncode != 0:
        pytest.fail(
            f"reference run failed (exit {done.returncode}): {' '.join(cmd[3:])}\n"
            f"--- stdout ---\n{done.stdout[-3000:]}\n--- stderr ---\n{done.stderr[-3000:]}",
            pytrace=False,
        )
    return done


@pytest.fixture(scope="session")
def run_reference(reference_python, reference_env) -> Callable[..., RunResult]:
    """``run_reference(args, env=None, check=True, cwd=None)``: the reference's ``whest`` CLI.

    ``args`` follow ``whest`` (e.g. ``["dataset", "bake", ...]``); ``env`` entries override the
    single-threaded, offline defaults (pass ``{"OPENBLAS_NUM_THREADS": "2"}`` to unpin BLAS).
    """

    def run(args: Sequence[str], env: Mapping[str, str] | None = None, check: bool = True, cwd: Path | None = None):
        return _run([str(reference_python), "-c", _CLI, *map(str, args)], {**reference_env, **(env or {})}, check, cwd)

    return run


@pytest.fixture(scope="session")
def run_reference_batch(reference_python, reference_env) -> Callable[..., RunResult]:
    """``run_reference_batch([args, ...], env=None)``: several reference CLI calls in one interpreter."""

    def run(argvs: Sequence[Sequence[str]], env: Mapping[str, str] | None = None, check: bool = True):
        payload = json.dumps([[str(a) for a in argv] for argv in argvs])
        return _run([str(reference_python), "-c", _CLI_BATCH, payload], {**reference_env, **(env or {})}, check, None)

    return run


@pytest.fixture(scope="session")
def run_reference_python(reference_python, reference_env) -> Callable[..., RunResult]:
    """``run_reference_python(code, *args, env=None, check=True)``: a snippet in the reference venv.

    ``args`` arrive as ``sys.argv[1:]``; a snippet reports back by printing (e.g. one JSON line).
    """

    def run(code: str, *args: str, env: Mapping[str, str] | None = None, check: bool = True):
        return _run([str(reference_python), "-c", code, *map(str, args)], {**reference_env, **(env or {})}, check, None)

    return run
