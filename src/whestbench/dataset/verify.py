"""Verify a dataset: its integrity, and every stored number against an independent computation.

``verify_dataset(dir)`` returns a ``VerifyReport``: a list of named checks, each passed or failed
with a one-line detail. Nothing raises on a broken dataset; a failed check says what is wrong.
What each check catches and misses is tabled in docs/cli.md ("What verify proves").

1. **Integrity** (here) — metadata validates (``schema.validate_metadata``, the one validator every
   reader shares; a partial is allowed and reported); the data files match their ``checksums``
   (when present); every shard has the columns ``schema.columns_for`` names (0.16's eight, plus
   ``all_layer_stderr`` and ``n_samples_used`` where the metadata records them) with the Arrow types
   ``make_features`` gives; ``mlp_id`` is the declared range; ``mlp_seed`` values are distinct;
   ``mlp_name`` is what the seeds give; ``weights`` are byte-identical to the ones re-derived from
   ``mlp_seed``; every number is finite; ``final_means == all_layer_means[-1]``; every
   ``sampling_budget_breakdown`` parses.
2. **Statistics** — layer 1 (here) has a closed form. With ``x ~ N(0, I)`` the pre-activation of
   neuron j is ``N(0, s_j²)``, ``s_j = ‖W₁[:, j]‖``, so ``E relu = s_j/√(2π)`` and
   ``Var relu = s_j²/2 − s_j²/(2π)``: each stored layer-1 mean and standard error is held to it.
   Layers 2.., the standard errors and ``avg_variance`` are held to a fresh pilot of every MLP in
   ``plausibility``; a target bake's sample counts to what each MLP's pilot plans.
3. **Against another bake** (``against=DIR2``) — in ``compare``, which reads rows through
   ``scan_split``; **recompute** (``recompute=K``) bakes K MLPs again (``recompute``) and compares
   them the same way.

Checksums are judged by ``reader.checksum_state`` (the one implementation the loader also uses).
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any, Callable, Iterator

import numpy as np

from whestbench.dataset.errors import InvalidDatasetError
from whestbench.dataset.reader import checksum_state, data_files, read_metadata
from whestbench.dataset.schema import (
    COLUMNS,
    N_USED_COLUMN,
    STDERR_COLUMN,
    columns_for,
    protocol_version,
    split_names,
    validate_metadata,
)
from whestbench.dataset.schema import infer_sampler  # noqa: F401  (re-exported: dataset.inspect imports it from here)
from whestbench.errors import UsageError
from whestbench.text import sanitize

P_OVERALL = 1e-6
"""False-alarm probability of each statistical check for a correct dataset (whole dataset)."""

_SQRT_2PI = math.sqrt(2.0 * math.pi)
_RELU_VAR = 0.5 - 1.0 / (2.0 * math.pi)  # Var relu(u) / s² for u ~ N(0, s²)
_BATCH_BYTES = 64 * 1024**2  # rows read at a time: memory stays flat on multi-GB datasets
_READ_COLUMNS = ["mlp_id", "mlp_name", "mlp_seed", "weights", "all_layer_means", "final_means", "avg_variance",
                 "sampling_budget_breakdown"]


@dataclass(frozen=True)
class Check:
    """One verification: ``ok`` False means the dataset failed it; ``skipped`` means it could not run."""

    name: str
    ok: bool
    detail: str = ""
    skipped: bool = False


@dataclass
class VerifyReport:
    path: Path
    against: Path | None = None
    checks: list[Check] = field(default_factory=list)
    on_check: Callable[[Check], None] | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def check(self, name: str, ok: bool, detail: str = "", *, skipped: bool = False) -> Check:
        c = Check(name, bool(ok), " ".join(str(detail).split()), skipped)  # one line, whatever pyarrow said
        self.checks.append(c)
        if self.on_check is not None:
            self.on_check(c)
        return c

    def skip(self, name: str, detail: str) -> Check:
        return self.check(name, True, detail, skipped=True)

    def get(self, name: str) -> Check:
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(name)


# ----------------------------------------------------------------------------------------------
# Public entry point


def verify_dataset(
    directory: str | Path,
    *,
    against: str | Path | None = None,
    n_check: int | None = None,
    z_max: float | None = None,
    on_check: Callable[[Check], None] | None = None,
    sample_mlps: int | None = None,
    sample_seed: int = 0,
    recompute: int | None = None,
    device: str | None = None,
    recompute_root: str | Path | None = None,
    on_event=None,
    stop=None,
) -> VerifyReport:
    """Run every check on the dataset at ``directory`` (and the comparison with ``against``).

    ``n_check`` limits the statistical check and the comparison to the first K MLPs (integrity
    covers every row).
    ``sample_mlps`` runs the per-MLP pilot statistics on that many MLPs chosen at random with
    ``sample_seed`` (huge datasets; the choice is reported).
    ``recompute`` bakes that many MLPs (chosen at random with ``sample_seed``) again with the
    dataset's own recipe (``device`` for philox datasets) in ``recompute_root`` (default: the user
    cache; resumable) and compares every numeric column (``dataset.recompute``); ``on_event`` hears
    that bake's progress and ``stop`` interrupts it (resumable).
    ``z_max`` replaces the Bonferroni threshold of the statistical checks. ``on_check`` sees
    each check as it completes (the CLI prints it). Raises UsageError only for arguments that
    cannot name a dataset (a path that does not exist, a non-positive ``n_check``).
    """
    directory = Path(directory)
    _require_dir(directory, "DIR")
    if against is not None:
        against = Path(against)
        _require_dir(against, "--against")
    if n_check is not None and (isinstance(n_check, bool) or not isinstance(n_check, int) or n_check <= 0):
        raise UsageError(f"--n-check must be a positive integer; got {n_check!r}.")
    if sample_mlps is not None and (isinstance(sample_mlps, bool) or not isinstance(sample_mlps, int) or sample_mlps <= 0):
        raise UsageError(f"--sample-mlps must be a positive integer; got {sample_mlps!r}.")
    if recompute is not None and (isinstance(recompute, bool) or not isinstance(recompute, int) or recompute <= 0):
        raise UsageError(f"--recompute must be a positive integer; got {recompute!r}.")
    if device is not None and recompute is None:
        raise UsageError("--device applies to --recompute only; add --recompute K, or leave --device out.")
    if recompute is not None:  # a recipe that cannot be recomputed here is a usage error, before any check
        from whestbench.dataset.recompute import recipe

        try:
            recipe(read_metadata(directory), device)
        except UsageError:
            raise
        except (InvalidDatasetError, KeyError, TypeError, ValueError):
            pass  # the metadata check reports a broken dataset
    report = VerifyReport(directory, against, on_check=on_check)
    ds = _integrity(directory, report)
    if ds is None:
        return report
    _statistics(ds, report, n_check=n_check, z_max=z_max, sample_mlps=sample_mlps, sample_seed=sample_seed)
    if against is not None:
        from whestbench.dataset.compare import compare_with  # compare builds on this module

        compare_with(ds, against, report, n_check=n_check, z_max=z_max)
    if recompute is not None:
        _recompute(ds, report, recompute, sample_seed, device, recompute_root, on_event, stop)
    return report


def _recompute(ds: DatasetScan, report: VerifyReport, k: int, sample_seed: int, device: str | None,
               root, on_event, stop) -> None:
    from whestbench.dataset import plausibility
    from whestbench.dataset.compare import compare_with
    from whestbench.dataset.recompute import recipe, recompute

    rows = plausibility.choose_rows(list(ds.rows()), k, sample_seed)
    if not rows:
        report.skip("recompute", "the dataset has no rows")
        return
    rec = recipe(ds.md, device)
    seeds = [int(s.seeds[i]) for s, i in rows]
    ids = ", ".join((f"{s.name}:" if ds.is_multi else "") + str(int(s.ids[i])) for s, i in rows)
    how = rec["backend"] + (f" on {rec['device']}" if rec["device"] else "")
    report.check("recompute", True, f"{len(rows)} MLP(s) chosen at random with --sample-seed {sample_seed}: mlp_id {ids}; "
                 f"baked again with the dataset's recipe ({how}, {rec['estimator']}, n_samples={rec['n_samples']:,}"
                 + (f", target {rec['target_stderr']:g}" if rec["target_stderr"] else "") + ")")
    path = recompute(ds.md, seeds, device=device, root=Path(root) if root is not None else None, on_event=on_event,
                     stop=stop)
    compare_with(ds, path, report, n_check=None, z_max=None, name="recompute")


def bonferroni_z(n_tests: int, p_overall: float = P_OVERALL) -> float:
    """Two-sided |z| threshold such that ``n_tests`` correct z-scores exceed it with probability ≤ p.

    The union bound holds whatever the correlations between the tests (neurons of one MLP share
    their inputs), so no independence is assumed: 48 tests give 5.6, 10⁴ give 6.5, 10⁶ give 7.1.
    """
    return -NormalDist().inv_cdf(p_overall / (2 * max(int(n_tests), 1)))


def chi2_mean_limit(n_groups: int, p: float = P_OVERALL) -> float:
    """Upper limit for the mean of z² over the neurons of ``n_groups`` independent MLPs.

    Neurons of one MLP are correlated (shared inputs), so each MLP counts as one degree of
    freedom: the sum of its w correlated z² has variance at most 2w², like w·χ²₁. The limit is
    the χ²_k / k quantile at ``1 − p`` with k = n_groups (Wilson–Hilferty), conservative for
    correlated neurons: 10.9 for 3 MLPs, 1.23 for 1000 (where a bias of half a standard error in
    every mean fails while noise does not).
    """
    k = max(int(n_groups), 1)
    z = -NormalDist().inv_cdf(p)
    return (1.0 - 2.0 / (9.0 * k) + z * math.sqrt(2.0 / (9.0 * k))) ** 3


def check_checksums(directory: str | Path, md: dict[str, Any]) -> tuple[str, str]:
    """``(state, detail)`` of ``reader.checksum_state`` for the whole dataset: state is "ok",
    "absent", "stale" or "mismatch" (every bad file named). Never raises on a tampered dataset."""
    state = checksum_state(directory, md)
    return state.state, state.detail


# ----------------------------------------------------------------------------------------------
# Reading


@dataclass
class SplitScan:
    """One split's rows, reduced to what the checks need (weights are hashed, not kept)."""

    name: str
    ids: np.ndarray  # (n,) int64
    names: list[str]
    seeds: list[int]
    weight_digests: list[bytes]
    sigma1: np.ndarray  # (n, w) float64: ‖W₁[:, j]‖ per MLP and neuron
    means: np.ndarray  # (n, depth, w) float32
    final: np.ndarray  # (n, w) float32
    avg_var: np.ndarray  # (n,) float64
    weight_mismatch: list[tuple[int, str]]  # (mlp_id, what differs) against the re-derived weights
    bad_breakdown: list[tuple[int, str]] = field(default_factory=list)  # (mlp_id, why) rows whose breakdown does not parse
    stderr: np.ndarray | None = None  # (n, depth, w) float32: all_layer_stderr, when the dataset has it
    n_used: np.ndarray | None = None  # (n,) int64: n_samples_used, when the dataset has it


@dataclass
class DatasetScan:
    path: Path
    md: dict[str, Any]
    width: int
    depth: int
    n_samples: int
    splits: list[SplitScan]

    @property
    def is_multi(self) -> bool:
        return isinstance(self.md.get("splits"), dict)

    def rows(self) -> Iterator[tuple[SplitScan, int]]:
        for s in self.splits:
            for i in range(len(s.seeds)):
                yield s, i


class _ShapeError(InvalidDatasetError):
    pass


def _require_dir(path: Path, what: str) -> None:
    if not path.exists():
        raise UsageError(f"{what} {path} does not exist; pass a dataset directory (holding metadata.json and data/).")
    if not path.is_dir():
        raise UsageError(f"{what} {path} is a file; pass the dataset directory that holds metadata.json and data/.")


def _storage(arr):
    import pyarrow as pa

    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if isinstance(arr, pa.ExtensionArray):
        arr = arr.storage
    return arr


def _dense(arr, inner: tuple[int, ...], column: str, ids: np.ndarray) -> np.ndarray:
    """A list-of-lists Arrow column as a ``(rows, *inner)`` array; raises _ShapeError on ragged rows."""
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = _storage(arr)
    n = len(arr)
    want = "x".join(map(str, inner))
    for level, size in enumerate(inner):
        if arr.null_count:
            raise _ShapeError(f"{column} has null entries (expected {want} per row)")
        if pa.types.is_fixed_size_list(arr.type):
            if arr.type.list_size != size:
                raise _ShapeError(f"{column} has fixed-size lists of {arr.type.list_size} at depth {level}; expected {size} ({want} per row)")
        elif pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type):
            lengths = pc.list_value_length(arr).to_numpy(zero_copy_only=False)
            if lengths.size and not np.all(lengths == size):
                bad = int(np.argmax(lengths != size))
                row = bad // (len(lengths) // n) if n else bad
                raise _ShapeError(
                    f"{column} of mlp_id {int(ids[row]) if row < len(ids) else row} has length "
                    f"{int(lengths[bad])} at depth {level}; expected {size} ({want} per row)"
                )
        else:
            raise _ShapeError(f"{column} is {arr.type}; expected nested lists of {want} floats")
        arr = arr.flatten()
    if arr.null_count:
        raise _ShapeError(f"{column} has null values")
    return arr.to_numpy(zero_copy_only=False).reshape((n, *inner))


def scan_split(path: Path, split: str, width: int, depth: int, *, rederive: bool,
               columns: tuple[str, ...] = COLUMNS) -> SplitScan:
    """Read ``split`` batch by batch; with ``rederive`` compare each MLP's weights with its seed's.
    ``columns``: the dataset's columns (``schema.columns_for``): its stderr and sample counts are
    read when it has them."""
    import pyarrow.parquet as pq

    from whestbench.compute.mlp import weights_for_seed
    from whestbench.dataset.writer import row_bytes

    batch_rows = max(1, _BATCH_BYTES // row_bytes(width, depth))
    ids, names, seeds, digests, sig, means, final, avg, mismatch = [], [], [], [], [], [], [], [], []
    stderr, n_used, bad_breakdown = [], [], []
    wanted = _READ_COLUMNS + [c for c in (STDERR_COLUMN, N_USED_COLUMN) if c in columns]
    for shard in data_files(path, split):
        try:
            pf = pq.ParquetFile(shard)
            batches = pf.iter_batches(batch_size=batch_rows, columns=wanted)
            for batch in batches:
                b_ids = np.asarray(batch.column("mlp_id").to_numpy(zero_copy_only=False), dtype=np.int64)
                b_seeds = [int(v) for v in batch.column("mlp_seed").to_pylist()]
                w = _dense(batch.column("weights"), (depth, width, width), "weights", b_ids).astype(np.float32, copy=False)
                m = _dense(batch.column("all_layer_means"), (depth, width), "all_layer_means", b_ids)
                f = _dense(batch.column("final_means"), (width,), "final_means", b_ids)
                for k, seed in enumerate(b_seeds):
                    wk = np.ascontiguousarray(w[k])  # (depth, width, width)
                    digests.append(hashlib.blake2b(wk.tobytes(), digest_size=16).digest())
                    if rederive:
                        ref = weights_for_seed(seed, width, depth)
                        if not np.array_equal(wk.view(np.uint32), ref.view(np.uint32)):
                            diff = np.argwhere(wk.view(np.uint32) != ref.view(np.uint32))
                            layer, i, j = (int(v) for v in diff[0])
                            mismatch.append((int(b_ids[k]), f"{len(diff)} value(s) differ, first weights[{layer}][{i}][{j}]"))
                sig.append(np.sqrt(np.sum(w[:, 0].astype(np.float64) ** 2, axis=1)))  # (rows, width)
                for k, text in enumerate(batch.column("sampling_budget_breakdown").to_pylist()):
                    why = _breakdown_problem(text)
                    if why:
                        bad_breakdown.append((int(b_ids[k]), why))
                ids.append(b_ids)
                names.extend(str(v) for v in batch.column("mlp_name").to_pylist())
                seeds.extend(b_seeds)
                means.append(m.astype(np.float32, copy=False))
                final.append(f.astype(np.float32, copy=False))
                avg.append(np.asarray(batch.column("avg_variance").to_numpy(zero_copy_only=False), dtype=np.float64))
                if STDERR_COLUMN in wanted:
                    stderr.append(_dense(batch.column(STDERR_COLUMN), (depth, width), STDERR_COLUMN, b_ids).astype(np.float32))
                if N_USED_COLUMN in wanted:
                    n_used.append(np.asarray(batch.column(N_USED_COLUMN).to_numpy(zero_copy_only=False), dtype=np.int64))
        except InvalidDatasetError:
            raise
        except Exception as e:  # pyarrow raises ArrowInvalid, OSError or ArrowException for a corrupt file
            raise InvalidDatasetError(f"{shard.name} is not a readable Parquet file (truncated or corrupt?): {e}") from e

    def cat(parts, shape, dtype):
        return np.concatenate(parts) if parts else np.zeros(shape, dtype)

    return SplitScan(
        name=split,
        ids=cat(ids, (0,), np.int64),
        names=names,
        seeds=seeds,
        weight_digests=digests,
        sigma1=cat(sig, (0, width), np.float64),
        means=cat(means, (0, depth, width), np.float32),
        final=cat(final, (0, width), np.float32),
        avg_var=cat(avg, (0,), np.float64),
        weight_mismatch=mismatch,
        bad_breakdown=bad_breakdown,
        stderr=cat(stderr, (0, depth, width), np.float32) if STDERR_COLUMN in wanted else None,
        n_used=cat(n_used, (0,), np.int64) if N_USED_COLUMN in wanted else None,
    )


def _breakdown_problem(text: Any) -> str:
    """Why a row's ``sampling_budget_breakdown`` is not the JSON object bakes write ("" when it is)."""
    if not isinstance(text, str):
        return "null" if text is None else f"a {type(text).__name__}, not a JSON string"
    try:
        value = json.loads(text)
    except ValueError:
        return f"not JSON ({sanitize(text[:30])!r})"
    except RecursionError:
        return "JSON nested too deeply"
    return "" if isinstance(value, dict) else f"JSON {type(value).__name__}, not an object"


def _type_sig(t) -> Any:
    """An Arrow type with list child names ignored ("item" and "element" are the same column)."""
    import pyarrow as pa

    if isinstance(t, pa.ExtensionType):
        return ("ext", t.extension_name, json.loads(t.__arrow_ext_serialize__()), _type_sig(t.storage_type))
    if pa.types.is_fixed_size_list(t):
        return ("fixed_size_list", t.list_size, _type_sig(t.value_type))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return ("list", _type_sig(t.value_type))
    return str(t)


def _field_sig(f) -> Any:
    """A field's type signature; an extension type stored only as field metadata counts as that type."""
    import pyarrow as pa

    t = f.type
    if not isinstance(t, pa.ExtensionType) and f.metadata and b"ARROW:extension:name" in f.metadata:
        return (
            "ext",
            f.metadata[b"ARROW:extension:name"].decode(),
            json.loads(f.metadata.get(b"ARROW:extension:metadata", b"null")),
            _type_sig(t),
        )
    return _type_sig(t)


def _sig_text(sig: Any) -> str:
    """A type signature as a reader wants it: ``Array3D[3, 16, 16] float32``, ``fixed_size_list<float>[16]``."""
    if isinstance(sig, tuple) and sig[0] == "ext":
        name = str(sig[1]).rsplit(".", 1)[-1].replace("ExtensionType", "")
        shape, dtype = (sig[2] + [None, None])[:2] if isinstance(sig[2], list) else (sig[2], None)
        return f"{name}{list(shape) if isinstance(shape, list) else shape} {dtype}"
    if isinstance(sig, tuple) and sig[0] == "fixed_size_list":
        return f"fixed_size_list<{_sig_text(sig[2])}>[{sig[1]}]"
    if isinstance(sig, tuple) and sig[0] == "list":
        return f"list<{_sig_text(sig[1])}>"
    return str(sig)


def _schema_problems(path: Path, split: str, width: int, depth: int, columns: tuple[str, ...] = COLUMNS) -> list[str]:
    """What is wrong with the Arrow schema of ``split``'s shards (empty when nothing is)."""
    import pyarrow.parquet as pq
    from datasets import Features

    from whestbench.dataset.schema import make_features

    features = make_features(width, depth, columns)
    expected = features.arrow_schema
    problems = []
    for shard in data_files(path, split):
        try:
            schema = pq.read_schema(shard)
        except Exception as e:  # corrupt footer
            problems.append(f"{shard.name}: unreadable footer ({e})")
            continue
        if list(schema.names) != list(columns):
            problems.append(f"{shard.name}: columns {schema.names}, expected {list(columns)}")
            continue
        for name in columns:
            got, want = _field_sig(schema.field(name)), _field_sig(expected.field(name))
            if got != want:
                problems.append(f"{shard.name}: {name} is {_sig_text(got)}, expected {_sig_text(want)}")
        hf = (schema.metadata or {}).get(b"huggingface")
        if hf is None:
            problems.append(f"{shard.name}: no 'huggingface' features metadata (datasets would infer other types)")
        else:
            try:
                declared = Features.from_dict(json.loads(hf)["info"]["features"])
            except Exception as e:  # malformed JSON or an unknown feature type
                problems.append(f"{shard.name}: unreadable 'huggingface' features metadata ({e})")
            else:
                if declared != features:
                    problems.append(f"{shard.name}: 'huggingface' features metadata differs from width={width} depth={depth}")
    return problems


# ----------------------------------------------------------------------------------------------
# 1. Integrity


def positive_int(md: dict[str, Any], key: str) -> int | None:
    v = md.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _declared_rows(md: dict[str, Any], split: str) -> tuple[int, int, int | None]:
    """``(start, end, n_mlps)``: the mlp_id range the split must hold."""
    if isinstance(md.get("splits"), dict):
        n = md["splits"][split].get("n_mlps")
        return 0, n if isinstance(n, int) else -1, n
    n = md.get("n_mlps")
    rng = md.get("mlp_range")
    if md.get("is_partial") and isinstance(rng, list) and len(rng) == 2 and all(isinstance(v, int) for v in rng):
        return rng[0], rng[1], n
    return 0, n if isinstance(n, int) else -1, n


def _integrity(path: Path, report: VerifyReport) -> DatasetScan | None:
    try:
        md = read_metadata(path)
        validate_metadata(md, allow_partial=True)
    except InvalidDatasetError as e:
        report.check("metadata", False, f"{e} (no further checks possible)")
        return None
    dims = {k: positive_int(md, k) for k in ("width", "depth", "n_samples")}
    bad = [k for k, v in dims.items() if v is None]
    if bad:
        report.check("metadata", False, f"{', '.join(bad)} missing or not a positive integer (no further checks possible)")
        return None
    width, depth, n_samples = dims["width"], dims["depth"], dims["n_samples"]
    version = protocol_version(md)
    splits = split_names(md)
    shape = f"width={width} depth={depth} n_samples={n_samples:,}, seed protocol {version}"
    if md.get("is_partial"):
        start, end, _ = _declared_rows(md, splits[0])
        report.check(
            "metadata",
            True,
            f"valid PARTIAL dataset: MLPs [{start}, {end}) of {md.get('total_n_mlps')} ({shape}); merge the partials "
            "(`whest dataset merge`) before loading",
        )
    else:
        kind = f"{len(splits)} splits ({', '.join(splits)})" if isinstance(md.get("splits"), dict) else f"split {splits[0]!r}"
        report.check("metadata", True, f"valid, {kind}, {shape}")

    state = checksum_state(path, md)
    if state.state in ("absent", "stale"):
        report.skip("checksums", f"{state.detail}; integrity rests on the content checks below")
    else:
        report.check("checksums", state.state == "ok", state.detail if state.state == "ok" else f"MISMATCH: {state.detail}")

    ds = DatasetScan(path, md, width, depth, n_samples, [])
    multi = len(splits) > 1 or isinstance(md.get("splits"), dict)
    for split in splits:
        prefix = f"{split}: " if multi else ""
        try:
            problems = _schema_problems(path, split, width, depth, columns_for(md))
        except InvalidDatasetError as e:
            report.check(f"{prefix}files", False, str(e))
            continue
        shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
        report.check(
            f"{prefix}schema",
            not problems,
            shown if problems else f"{len(columns_for(md))} columns with the Arrow/HF types of width={width} depth={depth}",
        )
        if problems:
            continue
        rederive = version in ("3.0", "4.0")
        try:
            s = scan_split(path, split, width, depth, rederive=rederive, columns=columns_for(md))
        except InvalidDatasetError as e:
            report.check(f"{prefix}rows", False, str(e))
            continue
        report.check(f"{prefix}rows", True, f"{len(s.seeds)} rows read: weights {depth}x{width}x{width}, means {depth}x{width}")
        _rows_checks(ds, s, report, prefix, version)
        ds.splits.append(s)
    return ds if ds.splits else None


def _rows_checks(ds: DatasetScan, s: SplitScan, report: VerifyReport, prefix: str, version: str) -> None:
    from whestbench.compute.naming import mlp_name, unique_names
    from whestbench.compute.seeds import SEED_LIMIT, estimator_seed

    md = ds.md
    start, end, n_mlps = _declared_rows(md, s.name)
    expected = np.arange(start, end, dtype=np.int64) if end >= start else np.zeros(0, np.int64)
    if np.array_equal(s.ids, expected):
        report.check(f"{prefix}mlp_id", True, f"{len(s.ids)} rows, mlp_id {start}..{end - 1} as declared")
    else:
        first = s.ids[:5].tolist()
        report.check(
            f"{prefix}mlp_id",
            False,
            f"{len(s.ids)} rows with mlp_id {first}{'...' if len(s.ids) > 5 else ''}; metadata declares "
            f"[{start}, {end}) (n_mlps={n_mlps})",
        )

    seen: dict[int, int] = {}
    dup = out_of_range = None
    for i, v in enumerate(s.seeds):
        if out_of_range is None and not 0 <= v < SEED_LIMIT:
            out_of_range = (i, v)
        if v in seen and dup is None:
            dup = (seen[v], i, v)
        seen.setdefault(v, i)
    if dup or out_of_range:
        what = []
        if dup:
            what.append(f"rows {dup[0]} and {dup[1]} share mlp_seed {dup[2]}")
        if out_of_range:
            what.append(f"row {out_of_range[0]} has mlp_seed {out_of_range[1]} outside [0, 2**63)")
        report.check(f"{prefix}mlp_seed", False, "; ".join(what))
    else:
        report.check(f"{prefix}mlp_seed", True, f"{len(s.seeds)} distinct int63 seeds")

    if version == "4.0":
        report.skip(f"{prefix}mlp_name", "seed protocol 4.0 derives names with a secret salt; not re-derived")
    else:
        # 3.0: the name seed is the estimator seed derived from mlp_seed; 2.0: mlp_seed is that seed.
        name_seeds = [estimator_seed(v) for v in s.seeds] if version == "3.0" else list(s.seeds)
        complete = not md.get("is_partial")
        if complete:
            want = unique_names(name_seeds)
            bad = [(i, got, w) for i, (got, w) in enumerate(zip(s.names, want)) if got != w]
            detail = f"{len(want)} names = unique_names(estimator seeds)"
        else:
            # Uniqueness suffixes depend on the whole dataset's seed list, which a partial lacks.
            bad = []
            for i, (got, v) in enumerate(zip(s.names, name_seeds)):
                base = mlp_name(v)
                if got != base and not (got.startswith(base + "-") and got[len(base) + 1:].isdigit()):
                    bad.append((i, got, base))
            detail = f"{len(s.names)} names match their seeds (partial: '-k' suffixes not checkable without the whole seed list)"
        if bad:
            i, got, w = bad[0]
            report.check(f"{prefix}mlp_name", False, f"{len(bad)} name(s) differ from the seeds', first mlp_id {int(s.ids[i])}: {got!r} != {w!r}")
        else:
            report.check(f"{prefix}mlp_name", True, detail)

    if version in ("3.0", "4.0"):
        if s.weight_mismatch:
            mid, what = s.weight_mismatch[0]
            report.check(
                f"{prefix}weights",
                False,
                f"{len(s.weight_mismatch)} MLP(s) differ from the weights their mlp_seed gives; first mlp_id {mid}: {what}",
            )
        else:
            report.check(f"{prefix}weights", True, f"all {len(s.seeds)} byte-identical to weights re-derived from mlp_seed")
    else:
        report.skip(f"{prefix}weights", "seed protocol 2.0 derives weights from the dataset's root seed; not re-derived")

    # Sample means of post-ReLU values are >= 0; a control-variate estimate of a nearly dead neuron
    # may dip below 0, but not by more than a few of its standard errors.
    cv = isinstance(ds.md.get("estimator"), dict) and ds.md["estimator"].get("name") == "control-variate"
    floor = -6.0 * s.stderr.astype(np.float64) - 1e-12 if cv and s.stderr is not None else 0.0
    bad_means = ~np.isfinite(s.means) | (s.means < floor)
    bad_var = ~np.isfinite(s.avg_var)
    if bad_means.any() or bad_var.any() or not np.isfinite(s.final).all():
        what = []
        if bad_means.any():
            r, layer, j = (int(v) for v in np.argwhere(bad_means)[0])
            what.append(f"{int(bad_means.sum())} mean(s) non-finite or negative, first mlp_id {int(s.ids[r])} layer {layer + 1} neuron {j}: {s.means[r, layer, j]}")
        if bad_var.any():
            r = int(np.argmax(bad_var))
            what.append(f"avg_variance of mlp_id {int(s.ids[r])} is {s.avg_var[r]}")
        if not np.isfinite(s.final).all():
            what.append("final_means has non-finite values")
        report.check(f"{prefix}finite", False, "; ".join(what))
    else:
        report.check(f"{prefix}finite", True, "all means finite and >= 0 (post-ReLU)" + (" within 6 standard errors" if cv else "")
                     + ", avg_variance finite")

    if s.bad_breakdown:
        mid, why = s.bad_breakdown[0]
        report.check(f"{prefix}breakdown", False, f"{len(s.bad_breakdown)} row(s) whose sampling_budget_breakdown is "
                     f"not a JSON object, first mlp_id {mid}: {why}")
    else:
        report.check(f"{prefix}breakdown", True, f"sampling_budget_breakdown parses as a JSON object in all {len(s.seeds)} rows")

    same = np.array_equal(s.final.view(np.uint32), s.means[:, -1].view(np.uint32))
    if same:
        report.check(f"{prefix}final_means", True, "final_means == all_layer_means[-1] bit for bit")
    else:
        r = int(np.argmax(np.any(s.final.view(np.uint32) != s.means[:, -1].view(np.uint32), axis=1)))
        report.check(f"{prefix}final_means", False, f"final_means != all_layer_means[-1] for mlp_id {int(s.ids[r])}")


# ----------------------------------------------------------------------------------------------
# 2. Statistics


def _limit(ds: DatasetScan, n_check: int | None) -> list[tuple[SplitScan, int]]:
    rows = list(ds.rows())
    return rows[:n_check] if n_check is not None else rows


def _statistics(ds: DatasetScan, report: VerifyReport, *, n_check: int | None, z_max: float | None,
                sample_mlps: int | None = None, sample_seed: int = 0) -> None:
    from whestbench.dataset import plausibility

    rows = _limit(ds, n_check)
    if not rows:
        report.skip("layer-1 means", "the dataset has no rows")
        return
    if sample_mlps is not None and sample_mlps < len(rows):
        rows = plausibility.choose_rows(rows, sample_mlps, sample_seed)
        ids = ", ".join(f"{s.name}:{int(s.ids[i])}" if ds.is_multi else str(int(s.ids[i])) for s, i in rows[:20])
        report.check("sample", True, f"statistics on {len(rows)} MLP(s) chosen at random with --sample-seed "
                     f"{sample_seed}: mlp_id {ids}{' ...' if len(rows) > 20 else ''} (integrity covered every row)")
    n = _sample_counts(ds, rows)[:, None]
    sigma = np.stack([s.sigma1[i] for s, i in rows])  # (m, w) f64
    mean1 = np.stack([s.means[i, 0] for s, i in rows]).astype(np.float64)  # (m, w)
    exact = sigma / _SQRT_2PI
    known = _estimator_check(ds, report)
    _target_checks(ds, rows, report)
    estimator = (ds.md.get("estimator") or {}).get("name") if isinstance(ds.md.get("estimator"), dict) else None
    if estimator == "control-variate":
        _exact_layer1(ds, rows, mean1, exact, report)
        _stderr_checks(ds, rows, None, report)
    else:
        se = sigma * np.sqrt(_RELU_VAR / n)
        with np.errstate(divide="ignore", invalid="ignore"):
            # A zero weight column gives a neuron that is always 0: its mean must be exactly 0.
            z = np.where(se > 0, (mean1 - exact) / np.where(se > 0, se, 1.0), np.where(mean1 == exact, 0.0, np.inf))
        k = z.size
        thr = z_max if z_max is not None else bonferroni_z(k)
        r, j = np.unravel_index(int(np.argmax(np.abs(z))), z.shape)
        s, i = rows[r]
        where = f"{s.name} " if ds.is_multi else ""
        max_z = float(np.abs(z[r, j]))
        mean_z2 = float(np.mean(z**2))
        chi_thr = chi2_mean_limit(len(rows))
        ok = max_z <= thr and mean_z2 <= chi_thr
        scope = f"{len(rows)} MLP(s) x {ds.width} neurons" + (f" (first {n_check})" if n_check is not None else "")
        report.check(
            "layer-1 means",
            ok,
            f"{scope} vs exact ‖W₁[:,j]‖/√(2π): max |z| = {max_z:.2f} at {where}mlp_id {int(s.ids[i])} "
            f"neuron {j} (limit {thr:.2f}{'' if z_max is not None else f', Bonferroni p={P_OVERALL:g} over {k}'}); "
            f"mean z² = {mean_z2:.2f} (limit {chi_thr:.2f})",
        )
        _stderr_checks(ds, rows, se, report)
    if not known:
        return
    audited = plausibility.audit_rows(ds, rows, n[:, 0])
    plausibility.check_layer_means(ds, audited, report, P_OVERALL)
    plausibility.check_avg_variance(ds, audited, report, P_OVERALL)
    plausibility.check_stderr_size(ds, audited, report, P_OVERALL)


def _estimator_check(ds: DatasetScan, report: VerifyReport) -> bool:
    """Whether the recorded estimator is one this whestbench knows (its stderr checks depend on it)."""
    from whestbench.compute.estimators import ESTIMATOR_VERSION, ESTIMATORS

    est = ds.md.get("estimator")
    if est is None:
        return True  # a whestbench 0.16 dataset: plain means, no standard errors
    name = est.get("name") if isinstance(est, dict) else None
    version = est.get("version") if isinstance(est, dict) else None
    if name not in ESTIMATORS or version != ESTIMATOR_VERSION:
        report.check("estimator", False, f"metadata.json's estimator block names {sanitize(repr(name))} version "
                     f"{sanitize(repr(version))}; this whestbench knows {', '.join(ESTIMATORS)} version "
                     f"{ESTIMATOR_VERSION}, so the stored standard errors cannot be judged (was metadata.json edited?)")
        return False
    report.check("estimator", True, f"{name} (version {version})")
    return True


def _target_checks(ds: DatasetScan, rows, report: VerifyReport) -> None:
    """A bake to a target standard error keeps its promise: each MLP used at most ``n_samples``,
    stopped only at a check point, and an MLP that stopped early has every chosen standard error
    at or under the target."""
    from whestbench.compute.estimators import (MIN_RELIABLE_BATCHES, TARGET_RULE, chosen_stderr, is_check_point,
                                               meets_target, n_batches)

    target = ds.md.get("target_stderr")
    if target is None:
        return
    value = target.get("value") if isinstance(target, dict) else None
    layer = target.get("layer") if isinstance(target, dict) else None
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0
            or layer not in ("last", "all")):
        report.check("target", False, f"metadata.json's target_stderr block is {sanitize(json.dumps(target))}: "
                     "needs a positive finite value and layer 'last' or 'all' (was it edited?)")
        return
    if any(s.n_used is None for s, _ in rows):
        report.check("target", False, "a bake to a target standard error must store n_samples_used; the column is missing")
        return
    sampler = ds.md.get("sampler") if isinstance(ds.md.get("sampler"), dict) else {}
    step = sampler.get("block_size")
    est = ds.md.get("estimator") if isinstance(ds.md.get("estimator"), dict) else {}
    batch = est.get("batch_samples")
    cv = est.get("name") == "control-variate"
    cap = ds.n_samples
    if target.get("rule") == TARGET_RULE:
        _planned_counts(ds, rows, report, float(value), layer, step, cv, batch)
        return
    problems = []
    for s, i in rows:
        used = int(s.n_used[i])
        who = f"mlp_id {int(s.ids[i])}"
        if not 1 <= used <= cap:
            problems.append(f"{who} used {used:,} samples, outside 1..n_samples={cap:,}")
        elif used < cap:
            if isinstance(step, int) and step > 0 and (used % step or not is_check_point(used // step)):
                problems.append(f"{who} stopped at {used:,} samples, not a check point (multiples of {step:,})")
            elif cv and isinstance(batch, int) and batch > 0 and n_batches(used, batch) < MIN_RELIABLE_BATCHES:
                problems.append(f"{who} stopped at {used:,} samples, before {MIN_RELIABLE_BATCHES} batches")
            elif s.stderr is not None and not meets_target(s.stderr[i], np.float32(value), layer):
                problems.append(f"{who} stopped early at {used:,} samples with a standard error of "
                                f"{float(np.nanmax(chosen_stderr(s.stderr[i], layer))):.4g} > target {value:g}")
        if len(problems) >= 3:
            break
    report.check("target", not problems, "; ".join(problems) if problems else
                 f"{_stops(ds, rows, cap)} (sequential rule of whestbench 0.17.0 bakes: each early stop at a check point, "
                 f"its standard errors at or under the target {value:g}, {layer} layer)")


def _stops(ds: DatasetScan, rows, cap: int) -> str:
    """How the MLPs of a target bake stopped, from the real counts."""
    early = sum(int(s.n_used[i]) < cap for s, i in rows)
    if early == len(rows):
        return f"all {early} MLP(s) stopped before n_samples={cap:,}"
    if early == 0:
        return f"none of the {len(rows)} MLP(s) stopped before n_samples={cap:,} (the cap decided every count)"
    return f"{early} of {len(rows)} MLP(s) stopped before n_samples={cap:,}, {len(rows) - early} used all of it"


def _planned_counts(ds: DatasetScan, rows, report: VerifyReport, value: float, layer: str, step, cv: bool,
                    batch) -> None:
    """The two-stage rule: each MLP's count is what its own pilot plans (``estimators.planned_samples``),
    a function of the seed and the recipe alone: recompute it and require equality."""
    from whestbench.compute.estimators import MIN_RELIABLE_BATCHES
    from whestbench.compute.mlp import weights_for_seed
    from whestbench.work.units import _planned

    if not (isinstance(step, int) and step > 0) or (cv and not (isinstance(batch, int) and batch > 0)):
        report.check("target", False, "a target bake must record its sampler's block_size (and, for control "
                     "variates, batch_samples): the planned counts cannot be recomputed (was metadata.json edited?)")
        return
    min_samples = batch * MIN_RELIABLE_BATCHES if cv else 0
    estimator = "control-variate" if cv else "plain"
    problems, checked = [], 0
    for s, i in rows:
        seed = int(s.seeds[i])
        w = weights_for_seed(seed, ds.width, ds.depth)
        if hashlib.blake2b(w.tobytes(), digest_size=16).digest() != s.weight_digests[i]:
            continue  # weights that do not re-derive: the weights check has said so
        want = _planned(seed, ds.width, ds.depth, estimator, value, layer, step, ds.n_samples, min_samples)
        used = int(s.n_used[i])
        checked += 1
        if used != want:
            problems.append(f"mlp_id {int(s.ids[i])} used {used:,} samples; its pilot plans {want:,} for a standard "
                            f"error of {value:g} ({layer} layer)")
        if len(problems) >= 3:
            break
    report.check("target", not problems, "; ".join(problems) + " (n_samples_used or the target was edited, or the "
                 "bake is wrong)" if problems else f"{_stops(ds, rows, ds.n_samples)}; all {checked} counts equal what "
                 f"each MLP's own pilot plans for a standard error of {value:g} ({layer} layer), fixed before "
                 "sampling (unbiased)")


def _exact_layer1(ds: DatasetScan, rows, mean1: np.ndarray, exact: np.ndarray, report: VerifyReport) -> None:
    """The control-variate estimator stores layer 1's exact means: equal within float32 rounding."""
    tol = 2 * np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64) + 1e-12  # stored in float32
    bad = np.abs(mean1 - exact) > tol
    if bad.any():
        r, j = (int(v) for v in np.argwhere(bad)[0])
        s, i = rows[r]
        report.check("layer-1 means", False, f"control-variate estimator: layer 1 must be the exact ‖W₁[:,j]‖/√(2π); "
                     f"mlp_id {int(s.ids[i])} neuron {j} is {mean1[r, j]:.9g}, exact {exact[r, j]:.9g}")
    else:
        report.check("layer-1 means", True, f"{len(rows)} MLP(s): exact ‖W₁[:,j]‖/√(2π) within float32 rounding "
                     "(control-variate estimator)")


def _sample_counts(ds: DatasetScan, rows) -> np.ndarray:
    """(m,) each MLP's sample count: ``n_samples``, or what it used when it stopped at a target."""
    return np.array([float(s.n_used[i]) if s.n_used is not None else float(ds.n_samples) for s, i in rows])


def undefined_stderr(md: dict[str, Any], n: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """(m, depth, w) bool: where the estimator has no standard error and stores NaN — plain: fewer
    than 2 samples; control variates: layers 2.. with fewer than 2 batches (layer 1 is exact)."""
    est = md.get("estimator") if isinstance(md.get("estimator"), dict) else {}
    undefined = np.zeros(shape, dtype=bool)
    if est.get("name") == "control-variate":
        batch = est.get("batch_samples")
        if isinstance(batch, int) and not isinstance(batch, bool) and batch > 0:
            undefined[:, 1:] = (np.ceil(n / batch) < 2)[:, None, None]
    else:
        undefined[:] = (n < 2)[:, None, None]
    return undefined


def _stderr_checks(ds: DatasetScan, rows, analytic_se: np.ndarray | None, report: VerifyReport) -> None:
    """The stored standard errors: finite and >= 0 (NaN where the estimator has none), control
    variates' layer 1 exactly 0, and (plain estimator) layer 1's equal to the exact
    ``sqrt(Var relu / N)`` within the sampling error of a sample standard deviation."""
    if any(s.stderr is None for s, _ in rows):
        report.skip("stderr", "no all_layer_stderr column (a whestbench 0.16 dataset)")
        return
    se = np.stack([s.stderr[i] for s, i in rows]).astype(np.float64)  # (m, depth, w)
    n = _sample_counts(ds, rows)
    undefined = undefined_stderr(ds.md, n, se.shape)
    bad = np.where(undefined, ~np.isnan(se), ~np.isfinite(se) | (se < 0))
    if bad.any():
        r, layer, j = (int(v) for v in np.argwhere(bad)[0])
        s, i = rows[r]
        want = "NaN (too few samples for one)" if undefined[r, layer, j] else "finite and >= 0"
        report.check("stderr", False, f"{int(bad.sum())} standard error(s) not {want}, first mlp_id {int(s.ids[i])} "
                     f"layer {layer + 1} neuron {j}: {se[r, layer, j]}")
        return
    cv = isinstance(ds.md.get("estimator"), dict) and ds.md["estimator"].get("name") == "control-variate"
    if cv and np.any(se[:, 0] != 0):
        r, j = (int(v) for v in np.argwhere(se[:, 0] != 0)[0])
        s, i = rows[r]
        report.check("stderr", False, f"control-variate estimator: layer 1 is exact, so its standard error must be 0; "
                     f"mlp_id {int(s.ids[i])} layer 1 neuron {j} is {se[r, 0, j]:.4g}")
        return
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a layer that is all NaN: "nan" in the summary
        detail = "per layer, median (max): " + ", ".join(
            f"{np.nanmedian(se[:, k]):.3g} ({np.nanmax(se[:, k]):.3g})" for k in range(se.shape[1]))
    if undefined.any():
        detail += f"; NaN where too few samples for one ({int(undefined.any(axis=(1, 2)).sum())} MLP(s))"
    if analytic_se is None:
        report.check("stderr", True, f"finite and >= 0; {detail}")
        return
    live = (analytic_se > 0) & ~undefined[:, 0]
    # a sample sd's relative error is about sqrt((kurtosis - 1) / 4N); relu of a Gaussian: kurtosis < 6
    tol = 6.0 * np.sqrt(5.0 / (4.0 * np.maximum(n, 1.0)))[:, None] + 1e-3
    ratio = np.where(live, se[:, 0] / np.where(live, analytic_se, 1.0), 1.0)
    bad = live & (np.abs(ratio - 1.0) > tol)
    if bad.any():
        r, j = (int(v) for v in np.argwhere(bad)[0])
        s, i = rows[r]
        report.check("stderr", False, f"layer-1 standard error of mlp_id {int(s.ids[i])} neuron {j} is {se[r, 0, j]:.4g}, "
                     f"exact sqrt(Var relu / N) = {analytic_se[r, j]:.4g}")
    else:
        report.check("stderr", True, f"layer 1 matches the exact sqrt(Var relu / N) (max ratio off by "
                     f"{float(np.max(np.abs(ratio - 1.0))):.2g}); {detail}")


def require_sound(path: str | Path, what: str, error: type[InvalidDatasetError] = InvalidDatasetError) -> None:
    """Raise ``error`` naming ``path`` and its first failed check when ``verify`` (integrity and the
    per-MLP statistics) fails it: merge and combine-splits call this on each input before writing,
    so a damaged input is refused instead of re-signed with fresh checksums."""
    report = verify_dataset(path)
    if report.ok:
        return
    bad = report.failures
    first = bad[0]
    more = f" (and {len(bad) - 1} more failed check(s))" if len(bad) > 1 else ""
    raise error(f"{what} {sanitize(str(path))} fails verify: {first.name}: {first.detail}{more}. Re-bake it, or run "
                f"`whest dataset verify {sanitize(str(path))}` for every check.")
