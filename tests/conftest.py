"""Shared fixtures: the released whestbench 0.16.2 beside ours, the 0.16 datasets the tests compare
with, and how to read a dataset's columns.

- ``fixtures16``: ``../shared/fixtures/whestbench-0.16/`` beside the repository (the project's shared
  fixtures, never copied in): datasets frozen in the reference's own repository (older protocols
  0.16.2 no longer bakes), and ``golden/``, the golden set as the reference baked it on another
  machine; see the README there.
- ``golden_dir``: the golden set (the bakes, slices, merge, combine and ``info`` listings of
  ``GOLDEN_COMMANDS``), baked by the reference at one BLAS thread the first time a test asks for it
  and cached for the run under pytest's temp folder (``made_once``: pytest-xdist workers share it).

The reference shares our package name and our ``whest`` command, so it lives in its own virtual
environment and only ever runs in a subprocess. Where it comes from, in order:

1. env ``WHEST_REFERENCE_PYTHON``: the python of an existing reference venv;
2. ``tools/make-reference-venv.sh`` creating (or reusing) ``<repo>/.refvenv`` with the same numpy as
   this environment — the first time this needs the package index;
3. otherwise the tests that need it fail when ``WHEST_REQUIRE_REFERENCE=1`` (CI) and are skipped
   elsewhere.

The reference always runs with single-threaded BLAS unless a test says otherwise: SPEC §2 contract
(a) holds bit-identity only against the reference's single-threaded bake (its own bytes move with
the BLAS thread count). It runs offline, with a private Hugging Face cache.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pyarrow.parquet as pq
import pytest

from whestbench.format.reader import DATA_DIR, data_files
from whestbench.format.reader import read_metadata as read_dataset_metadata
from whestbench.bake.pipeline import create_dataset
from whestbench.format.writer import write_dataset

from helpers.datasets import SMALL, TINY_SHAPE, made_once, make_merge_inputs, merge_inputs_at, write_keeping_trail
from helpers.datasets import resign as resign_metadata

REPO = Path(__file__).resolve().parents[1]
# A suite started in the background by a shell without job control (a CI runner's `cmd &`) inherits
# SIGINT and SIGQUIT ignored, and so would every process the tests start: Python then installs no
# KeyboardInterrupt handler and the Ctrl-C tests see a bake that cannot be interrupted. Undo it here,
# in the session and in every xdist worker (the children reset a handler to the default at exec).
for _sig in (signal.SIGINT, getattr(signal, "SIGQUIT", None)):
    if _sig is not None and signal.getsignal(_sig) is signal.SIG_IGN:
        signal.signal(_sig, signal.default_int_handler if _sig == signal.SIGINT else signal.SIG_DFL)

FIXTURES16 = REPO.parent / "shared" / "fixtures" / "whestbench-0.16"
MAKE_VENV = REPO / "tools" / "make-reference-venv.sh"
REFERENCE_VERSION = "0.16.2"

SINGLE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

# Column name -> numpy dtype the arrays must have (the Parquet schema's leaf types).
COLUMN_DTYPES = {
    "mlp_id": np.int32,
    "mlp_seed": np.int64,
    "weights": np.float32,
    "all_layer_means": np.float32,
    "final_means": np.float32,
    "avg_variance": np.float64,
}

# The golden set: seeds files, then the reference commands run in its folder (as in its README, made
# on another machine on 2026-11-21: fixtures16 / golden).
GOLDEN_SEEDS = {
    "seeds-6.json": [11, 22, 33, 44, 55, 66],
    "seeds-2.json": [6717184059027789272, 9223372036854775807],  # the largest int63 among them
    "seeds-holdout-3.json": [101, 202, 303],
}
_W64 = "dataset bake --n-mlps 6 --n-samples 20001 --width 64 --depth 4 --mlp-seeds seeds-6.json".split()
GOLDEN_COMMANDS: list[tuple[list[str], str | None]] = [  # (argv, file its stdout goes to)
    (_W64 + ["--output", "full-w64-d4"], None),
    *((_W64 + ["--slice", f"{k}/3", "--output", f"part-{k}-of-3"], None) for k in range(3)),
    ("dataset merge part-0-of-3 part-1-of-3 part-2-of-3 --output merged-w64-d4".split(), None),
    (
        "dataset bake --n-mlps 2 --n-samples 5000 --width 256 --depth 8 --mlp-seeds seeds-2.json "
        "--output full-w256-d8".split(),
        None,
    ),
    (
        "dataset bake --n-mlps 3 --n-samples 20001 --width 64 --depth 4 --mlp-seeds seeds-holdout-3.json "
        "--split holdout --config holdout --output holdout-w64-d4".split(),
        None,
    ),
    ("dataset combine-splits full-w64-d4 holdout-w64-d4 --output combined-w64-d4".split(), None),
    ("dataset info combined-w64-d4".split(), "combined-w64-d4.info.txt"),
    ("dataset info full-w64-d4".split(), "full-w64-d4.info.txt"),
]

# The reference's CLI, called the way its console script does (our `whest` may be first on PATH).
_CLI = "import sys; from whestbench.cli import main; sys.exit(main())"

# Several CLI calls in one interpreter (the reference's imports, datasets and flopscope, cost
# seconds); an entry [argv, path] sends that call's stdout to path.
_CLI_BATCH = """
import contextlib, json, sys
from whestbench.cli import main
for argv, stdout in json.loads(sys.argv[1]):
    with open(stdout, "w") if stdout else contextlib.nullcontext(sys.stdout) as out:
        with contextlib.redirect_stdout(out):
            rc = main(argv)
    if rc:
        sys.exit(f"reference `whest {' '.join(argv)}` exited {rc}")
"""

RunResult = subprocess.CompletedProcess


# --- work done ---------------------------------------------------------------------------------


@pytest.fixture
def count_work(monkeypatch) -> dict[str, int]:
    """Counts the work an in-process command does, so a test of "refused before any work" bounds what
    the code did instead of how long it took (a time bound depends on the machine's speed and load):
    ``units`` is every call that samples (a unit's passes, the plan's timing probe and a resumed
    unit alike), ``seeds`` every derivation of a bake's seed list."""
    from whestbench.bake import plan
    from whestbench.work import steps

    counts = {"units": 0, "seeds": 0}

    def counted(key: str, real: Callable) -> Callable:
        def wrapper(*args, **kwargs):
            counts[key] += 1
            return real(*args, **kwargs)

        return wrapper

    for name in ("_run_pcg64", "_run_philox"):
        monkeypatch.setattr(steps, name, counted("units", getattr(steps, name)))
    monkeypatch.setattr(plan, "derived_seeds", counted("seeds", plan.derived_seeds))
    return counts


# --- datasets ------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def fixtures16() -> Path:
    """The frozen whestbench 0.16 datasets in ``../shared`` (read-only: copy before writing)."""
    if not (FIXTURES16 / "golden" / "README.md").is_file():
        pytest.fail(f"{FIXTURES16} is missing: these tests read the project's shared fixtures from ../shared "
                    "beside the repository (clone the project with its shared/ folder)", pytrace=False)
    return FIXTURES16


@pytest.fixture(scope="session")
def golden_dir(tmp_path_factory, run_reference_batch) -> Path:
    """The golden set, baked by whestbench 0.16.2 at one BLAS thread (once per test run; copy before writing)."""

    def make(root: Path) -> None:
        for name, seeds in GOLDEN_SEEDS.items():
            (root / name).write_text(json.dumps(seeds))
        run_reference_batch([argv for argv, _ in GOLDEN_COMMANDS], stdout_to=[out for _, out in GOLDEN_COMMANDS],
                            cwd=root)

    return made_once(tmp_path_factory, "golden-0.16", make)


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> dict:
    """Tiny pcg64 bakes (``helpers.datasets.TINY_SHAPE``: 2,000 samples, 8x2) that many test files only
    read, baked once per test run (``made_once``): never write under them (copy one into ``tmp_path``
    first). ``public`` (2 MLPs, ``--seed 3``: ``TINY_PUBLIC``), ``holdout`` (``--seed 4``, split and config
    ``holdout``), ``p0`` and ``p1`` (the halves of one 4-MLP bake, ``--seed 3``: ``p0`` holds ``public``'s
    MLPs), as paths; ``parts`` and ``splits`` as the merge and combine-splits arguments (strings)."""
    root = made_once(tmp_path_factory, "tiny", lambda root: make_merge_inputs(root, **TINY_SHAPE))
    return merge_inputs_at(root)


@pytest.fixture(scope="session")
def small_bake(tmp_path_factory) -> Path:
    """3 MLPs, 4,000 samples, 16x3, ``--seed 1`` (``helpers.datasets.SMALL``), baked once per test run
    (``made_once``) for the verify, inspect and compare tests: never write under it."""
    return made_once(tmp_path_factory, "small", lambda root: create_dataset(output_path=root / "ds", **SMALL)) / "ds"


@pytest.fixture
def golden_copy(tmp_path, golden_dir) -> Callable[[str], Path]:
    """``golden_copy(name)``: a private copy of ``golden/<name>`` under ``tmp_path`` that a test may damage."""
    return lambda name: Path(shutil.copytree(golden_dir / name, tmp_path / name))


@pytest.fixture
def dataset16(request) -> Callable[[str], Path]:
    """``dataset16(name)``: a whestbench 0.16 dataset, ``"golden/<name>"`` from ``golden_dir`` (baked on
    first use) or another name from ``fixtures16``."""

    def path(name: str) -> Path:
        if name.startswith("golden/"):
            return request.getfixturevalue("golden_dir") / name.removeprefix("golden/")
        return request.getfixturevalue("fixtures16") / name

    return path


def _read_columns(dataset_dir: Path) -> dict[str, Any]:
    """Every row of every ``data/*.parquet`` shard (in file-name order) as numpy arrays / lists.

    Read with pyarrow only (no ``datasets`` cache), so reading never writes anywhere.
    """
    import pyarrow.parquet as pq

    files = sorted((Path(dataset_dir) / "data").glob("*.parquet"))
    assert files, f"no parquet files under {dataset_dir}/data"
    rows: dict[str, list] = {}
    for f in files:
        for name, values in pq.read_table(f).to_pydict().items():
            rows.setdefault(name, []).extend(values)
    out: dict[str, Any] = {}
    for name, values in rows.items():
        out[name] = np.asarray(values, dtype=COLUMN_DTYPES[name]) if name in COLUMN_DTYPES else values
    return out


def _read_metadata(dataset_dir: Path) -> dict[str, Any]:
    return json.loads((Path(dataset_dir) / "metadata.json").read_text())


def _assert_bytes_equal(a: np.ndarray, b: np.ndarray, what: str = "") -> None:
    """Bit-for-bit equality (stricter than ==: -0.0 vs 0.0 and NaN payloads count)."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, f"{what}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}"
    assert a.tobytes() == b.tobytes(), f"{what}: arrays differ (max |diff| {np.max(np.abs(a - b))})"


# The helpers are handed out as fixtures (not imported from conftest) so the suite works under any
# pytest import mode.
@pytest.fixture(scope="session")
def read_columns():
    return _read_columns


@pytest.fixture(scope="session")
def read_metadata():
    return _read_metadata


@pytest.fixture(scope="session")
def assert_bytes_equal():
    return _assert_bytes_equal


# --- the reference, in its own venv --------------------------------------------------------------


def _require_or_skip(reason: str) -> None:
    if os.environ.get("WHEST_REQUIRE_REFERENCE") == "1":
        pytest.fail(f"{reason} (WHEST_REQUIRE_REFERENCE=1 makes this an error)", pytrace=False)
    pytest.skip(f"{reason}; set WHEST_REFERENCE_PYTHON to a whestbench=={REFERENCE_VERSION} venv's python")


def _check_reference(python: Path) -> str | None:
    """None if ``python`` runs whestbench 0.16.2 with our numpy, else why not."""
    probe = "from importlib.metadata import version as v; print(v('whestbench'), v('numpy'))"
    try:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}  # as reference_env runs it
        out = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=60, check=True, env=env)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"cannot run the reference python {python}: {exc}"
    got = out.stdout.split()
    want = [REFERENCE_VERSION, np.__version__]
    if got != want:
        return f"{python} has whestbench, numpy = {got}; need {want} (re-run tools/make-reference-venv.sh)"
    return None


@pytest.fixture(scope="session")
def reference_python() -> Path:
    """Path to the python of a venv holding whestbench 0.16.2 and this environment's numpy."""
    given = os.environ.get("WHEST_REFERENCE_PYTHON")
    if given:
        # Absolute (not resolved: a venv's python is a symlink), since tests run it from temp folders.
        python = Path(given).absolute()
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


def _run(cmd: Sequence[str], env: Mapping[str, str], check: bool, cwd: Path | None, what: str) -> RunResult:
    done = subprocess.run(list(cmd), capture_output=True, text=True, env=dict(env), cwd=cwd, timeout=600)
    if check and done.returncode != 0:
        pytest.fail(
            f"reference run failed (exit {done.returncode}): {what}\n"
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
        cmd = [str(reference_python), "-c", _CLI, *map(str, args)]
        return _run(cmd, {**reference_env, **(env or {})}, check, cwd, "whest " + " ".join(map(str, args)))

    return run


@pytest.fixture(scope="session")
def run_reference_batch(reference_python, reference_env) -> Callable[..., RunResult]:
    """``run_reference_batch([args, ...], env=None, check=True, cwd=None, stdout_to=None)``: several
    reference CLI calls in one interpreter; ``stdout_to[i]``, if given and not None, is the file
    (relative to ``cwd``) that call ``i`` prints into."""

    def run(
        argvs: Sequence[Sequence[str]],
        env: Mapping[str, str] | None = None,
        check: bool = True,
        cwd: Path | None = None,
        stdout_to: Sequence[str | None] | None = None,
    ):
        outs = list(stdout_to) if stdout_to is not None else [None] * len(argvs)
        payload = json.dumps([[[str(a) for a in argv], out] for argv, out in zip(argvs, outs, strict=True)])
        what = f"{len(argvs)} whest commands in one process (stderr names the one that failed)"
        cmd = [str(reference_python), "-c", _CLI_BATCH, payload]
        return _run(cmd, {**reference_env, **(env or {})}, check, cwd, what)

    return run


@pytest.fixture(scope="session")
def run_reference_python(reference_python, reference_env) -> Callable[..., RunResult]:
    """``run_reference_python(code, *args, env=None, check=True)``: a snippet in the reference venv.

    ``args`` arrive as ``sys.argv[1:]``; a snippet reports back by printing (e.g. one JSON line).
    """

    def run(code: str, *args: str, env: Mapping[str, str] | None = None, check: bool = True):
        cmd = [str(reference_python), "-c", code, *map(str, args)]
        return _run(cmd, {**reference_env, **(env or {})}, check, None, "a python snippet in the reference venv")

    return run


# Rewriting datasets (the format, verify and assembly tests).
def _rewrite(src: Path, dst: Path, *, edit_row=None, md_update: dict | None = None, audit_from: Path | None = None) -> Path:
    """Copy a single-split dataset through the writer, editing rows/metadata; checksums are recomputed,
    so only the content checks can notice the edit. The audit trail is copied (``audit_from``: another
    trail file to carry instead, e.g. an edited one)."""
    md = json.loads((src / "metadata.json").read_text())
    md.pop("checksums", None)
    md.update(md_update or {})
    split = md["split"]
    rows = pq.read_table(data_files(src, split)[0]).to_pylist()
    for i, row in enumerate(rows):
        if edit_row is not None:
            edit_row(i, row)
    if "audit" not in md:
        return write_dataset(dst, split, rows, len(rows), md["width"], md["depth"], md)
    return write_keeping_trail(dst, split, rows, md["width"], md["depth"], md, audit_from or src / md["audit"]["file"])


@pytest.fixture(scope="session")
def rewrite_dataset():
    """``rewrite_dataset(src, dst, edit_row=None, md_update=None)``: a single-split dataset copied
    through the writer with its rows or metadata edited (checksums recomputed)."""
    return _rewrite


def _damage_prepared(root: Path, split: str, *, shift: float = 0.5, resign: bool = False) -> Path:
    """Add ``shift`` to every mean in ``root``'s ``prepared/<split>`` copy (saved again in place); with
    ``resign``, recompute the ``checksums`` block over data/ and prepared/ (adding one if absent)."""
    import datasets

    target = root / "prepared" / split
    ds = datasets.Dataset.load_from_disk(str(target))
    bumped = ds.map(lambda r: {"all_layer_means": [[v + shift for v in layer] for layer in r["all_layer_means"]]})
    scratch = root / "bumped-copy"
    bumped.save_to_disk(str(scratch))
    del ds, bumped
    shutil.rmtree(target)
    scratch.rename(target)
    if resign:
        resign_metadata(root, json.loads((root / "metadata.json").read_text()))
    return root


@pytest.fixture(scope="session")
def damage_prepared():
    """``damage_prepared(root, split, shift=0.5, resign=False)``: a prepared Arrow copy whose means
    are not its rows' (re-signed on request, as a careful attacker would leave it)."""
    return _damage_prepared


@pytest.fixture(scope="session")
def torch_bakes(tmp_path_factory) -> dict[str, Path]:
    """Tiny torch CPU bakes (2 MLPs, 2,000 samples, 4x2): ``checked`` (its device check passed),
    ``skipped`` (``--skip-device-check``, split holdout) and the partials ``p0`` (checked) and ``p1``
    (skipped) of one 4-MLP bake; a few seconds in all."""
    pytest.importorskip("torch")
    from whestbench.dataset_torch import create_dataset_torch

    root = tmp_path_factory.mktemp("torch_bakes")
    shape = dict(n_samples=2000, width=4, depth=2, device="cpu")
    return {
        "checked": create_dataset_torch(2, seed=1, output_path=root / "checked", **shape),
        "skipped": create_dataset_torch(2, seed=2, split="holdout", config="holdout", skip_device_check=True,
                                        output_path=root / "skipped", **shape),
        "p0": create_dataset_torch(4, seed=3, mlp_range=(0, 2), output_path=root / "p0", **shape),
        "p1": create_dataset_torch(4, seed=3, mlp_range=(2, 4), skip_device_check=True, output_path=root / "p1",
                                   **shape),
    }


def _as_0162_merge(partial: Path, whole: Path) -> dict:
    """Turn our ``partial`` into what whestbench 0.16.2's merge writes when it comes first: every
    key of the partial but five (so our checksums ride along), ``n_mlps`` the total, the merge keys
    appended, and the whole bake's data files (``whole``), which the carried checksums do not
    describe. Returns the metadata written."""
    md = read_dataset_metadata(partial)
    dropped = ("is_partial", "mlp_range", "total_n_mlps", "hardware", "created_at_utc")
    out = {k: v for k, v in md.items() if k not in dropped}
    out["n_mlps"] = md["total_n_mlps"]
    out |= {
        "created_at_utc": md["created_at_utc"],
        "merged_at_utc": "2026-01-01T00:00:00+00:00",
        "hardware_fingerprints": [md["hardware"]],
        "partials_count": 2,
    }
    shutil.rmtree(partial / DATA_DIR)
    shutil.copytree(whole / DATA_DIR, partial / DATA_DIR)
    (partial / "metadata.json").write_text(json.dumps(out, indent=2))
    return out


@pytest.fixture(scope="session")
def as_0162_merge():
    """``as_0162_merge(partial_dir, whole_dir) -> metadata``: our partial rewritten in place as
    whestbench 0.16.2's merge leaves it (see ``tests/reference`` for the real thing)."""
    return _as_0162_merge
