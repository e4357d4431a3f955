"""Describe a dataset (local directory or Hub repo) in lines, and plot its means and standard errors per layer.

``describe`` first prints whestbench 0.16's ``dataset info`` lines — same keys, order and
formatting, so tools that parse them keep working — then ours: sampler, seed source, partial
range, per-split row and shard counts with sizes, and the checksum status. A tampered dataset is
reported (``integrity: checksums MISMATCH ...``), never raised on: inspecting is how one finds out.
Every line is sanitised (``text.sanitize``): a value in ``metadata.json`` cannot put an escape
sequence or an extra line on the terminal.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import numpy as np

from whestbench import optional
from whestbench.atomic import write_file_atomic
from whestbench.hub.client import RemoteMetadata, fetch_metadata
from whestbench.hub.ref import HubRef, resolve_source
from whestbench.format.checksums import checksum_state
from whestbench.format.reader import DatasetDir, data_files, open_dataset, parquet_footer, read_table
from whestbench.format.schema import (DEFAULT_CONFIG, N_USED_COLUMN, STDERR_COLUMN, DatasetMeta, columns_for, infer_sampler,
                                      validate_metadata)
from whestbench.format.card_facts import used_spread
from whestbench.format.prepared import prepared_verdict
from whestbench.errors import InvalidDatasetError, UsageError
from whestbench.events import EventSink
from whestbench.paths import check_output_file
from whestbench.text import format_bytes, format_count, sanitize
from whestbench.verify.scan import arrow_storage
from whestbench.verify.statistics import undefined_stderr
from whestbench.work.device_check import summary_line as device_summary_line

# whestbench 0.16's single-split keys, in its order; each printed only when present.
_SINGLE_KEYS = (
    "schema_version", "format", "backend", "seed", "split", "config", "n_mlps", "n_samples",
    "width", "depth", "created_at_utc", "device", "cuda_device_name",
)


def describe(dir_or_repo: "str | Path | DatasetDir", *, revision: str | None = None, token: str | None = None,
             on_event: EventSink | None = None) -> list[str]:
    """The ``whest dataset inspect`` lines for a local dataset directory or a Hub dataset repo.

    A path that exists is read locally (``revision`` does not apply). Anything else is a Hub
    reference (``org/name``, ``hf://org/name@rev``, ...), whose ``metadata.json`` alone is fetched:
    its data files are neither counted nor checked. ``on_event`` hears the Hub retry note.
    """
    source = resolve_source(dir_or_repo, revision)
    if isinstance(source, HubRef):
        remote = fetch_metadata(source, token=token, what=f"inspecting {source.uri}", on_event=on_event)
        lines = _info_lines(remote.metadata) + _hub_lines(remote) + _validity(remote.metadata)
    else:
        handle = open_dataset(dir_or_repo if isinstance(dir_or_repo, DatasetDir) else source)
        lines = _info_lines(handle.metadata) + _local_lines(handle, handle.metadata) + _validity(handle.metadata)
    return [sanitize(line, max_len=4096).replace("\n", " ") for line in lines]  # no escape sequence, no extra line


def _validity(md: dict[str, Any]) -> list[str]:
    """A line when the metadata fails ``validate_metadata`` (reported, never raised on, as a checksum
    mismatch is): a re-signed ``"n_samples": "20000"`` was described as if every verb accepted it."""
    try:
        validate_metadata(md, allow_partial=True)
    except InvalidDatasetError as e:
        return [f"  metadata: INVALID — {str(e).rstrip('.')}; no other verb accepts this dataset"]
    return []


def plot_means(directory: "str | Path | DatasetDir", path: str | Path) -> Path:
    """Draw the dataset's means and standard errors per layer (``plot_figure``) to ``path``; the image
    format follows its suffix (png, svg, pdf) and the file is written atomically. Needs matplotlib
    (``pip install 'whestbench[plot]'``)."""
    plt = _pyplot()
    handle, path = open_dataset(directory), Path(path)  # an open DatasetDir (inspect --plot) is not read again
    fmt = path.suffix.lstrip(".").lower()
    if fmt not in ("png", "svg", "pdf"):
        raise UsageError("the suffix picks the format;", where=f"--plot {path}",
                         fix="name a .png, .svg or .pdf file.")
    check_output_file(path, "--plot")  # the CLI checked it before any work; a library call is checked here
    fig = plot_figure(handle)
    try:
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt, dpi=110)
    finally:
        plt.close(fig)
    write_file_atomic(path, buf.getvalue())
    return path


def _pyplot():
    try:
        optional.require("matplotlib", needed_for="--plot").use("Agg", force=True)  # no display: never opens a window
        return optional.require("matplotlib.pyplot", needed_for="--plot")
    except UsageError as e:  # said as it always was: "--plot needs matplotlib: <the install command>"
        raise UsageError(f"{e.problem}:", fix=e.fix) from None


def plot_figure(directory: "str | Path | DatasetDir"):
    """The plot as a matplotlib ``Figure``: one histogram panel per layer of the means over all neurons and
    MLPs, then (a dataset with ``all_layer_stderr``) one per layer of their standard errors, titled with
    the layer's median standard error and its median relative error (stderr / mean, over neurons with a
    positive mean). The means' panels share one x and one y axis, and so do the standard errors', so the
    layers compare at a glance; a layer whose means are exact (control variates' layer 1) or that has no
    standard error (too few samples) says so in its panel. Splits of a multi-split dataset are overlaid."""
    plt = _pyplot()
    handle = open_dataset(directory)
    md = handle.metadata
    splits = DatasetMeta.of(md).splits
    means = {s: _layer_means(handle, s) for s in splits}  # split -> (n, depth, width)
    stderr = ({s: _layer_means(handle, s, STDERR_COLUMN) for s in splits}
              if STDERR_COLUMN in columns_for(md) else {})
    depth = next(iter(means.values())).shape[1] if not isinstance(md.get("depth"), int) else md["depth"]
    cols = min(depth, 4)
    rows = -(-depth // cols)
    blocks = [("mean", means)] + ([("standard error", stderr)] if stderr else [])
    fig = plt.figure(figsize=(3.6 * cols, 2.8 * rows * len(blocks)))
    grid = fig.add_gridspec(rows * len(blocks), cols)
    for b, (what, data) in enumerate(blocks):
        first = None
        finite = [v[np.isfinite(v)] for v in data.values() if v.size]
        hi = max((float(v.max()) for v in finite if v.size), default=0.0) or 1.0
        bins = np.linspace(0.0, hi, 41)
        for layer in range(depth):
            ax = fig.add_subplot(grid[b * rows + layer // cols, layer % cols], sharex=first, sharey=first)
            first = first or ax
            values = {s: v[:, layer].ravel() for s, v in data.items() if v.size}
            _panel(ax, what, layer, values, bins, {s: m[:, layer].ravel() for s, m in means.items() if m.size})
            if layer % cols == 0:
                ax.set_ylabel("neurons", fontsize=8)
            if layer // cols == rows - 1 or layer + cols >= depth:
                ax.set_xlabel(what, fontsize=8)
            if len(values) > 1 and layer == 0:
                ax.legend(fontsize=7)
    n_mlps = sum(m.shape[0] for m in means.values())
    fig.suptitle(_plot_title(handle.path.name, n_mlps, md), fontsize=10)
    fig.tight_layout()
    return fig


def _panel(ax: Any, what: str, layer: int, values: dict[str, Any], bins: Any, means: dict[str, Any]) -> None:
    """One layer's histogram of ``values`` (per split), titled; an exact or undefined layer is a note."""
    title = f"layer {layer + 1}"
    shown = {s: v[np.isfinite(v)] for s, v in values.items()}
    if what == "standard error":
        known = np.concatenate([v for v in shown.values()]) if shown else np.zeros(0)
        if not known.size or not np.any(known):
            note = "no standard error\n(too few samples)" if not known.size else "exact means\n(standard error 0)"
            ax.text(0.5, 0.5, note, transform=ax.transAxes, ha="center", va="center", fontsize=8)
            ax.set_title(title, fontsize=9)
            ax.tick_params(labelsize=7)
            return
        se = np.concatenate([v.ravel() for v in values.values()])
        m = np.concatenate([v.ravel() for v in means.values()])
        ok = np.isfinite(se) & (m > 0)
        rel = f", {float(np.median(se[ok] / m[ok])):.2%} of the mean" if ok.any() else ""
        title += f": median {float(np.median(known)):.3g}{rel}"
    for s, v in shown.items():  # a StepPatch per split: its get_data() is the histogram drawn
        ax.stairs(np.histogram(v, bins=bins)[0], bins, fill=len(shown) == 1, alpha=1.0 if len(shown) > 1 else 0.7,
                  label=s)
    ax.set_title(title, fontsize=9)
    ax.tick_params(labelsize=7)
    if what == "standard error":
        ax.ticklabel_format(axis="x", style="sci", scilimits=(-2, 3))


def _used_spread(md: dict[str, Any]) -> str | None:
    """A target bake's samples per MLP, ``524,288–1,048,576`` (from ``samples_used``; every split's
    for a multi-split dataset), or None where the metadata does not record them."""
    spread = used_spread(md)
    if spread is None:
        return None
    lo, hi = spread
    return f"{lo:,}" if lo == hi else f"{lo:,}–{hi:,}"


def _plot_title(name: str, n_mlps: int, md: dict[str, Any]) -> str:
    """The plot's title: the shape and N; a target bake's N is what its MLPs used, with the target and the cap."""
    cap = md.get("n_samples")
    if not isinstance(cap, int):
        return name
    target = md.get("target_stderr")
    if isinstance(target, dict):
        spread = _used_spread(md) or f"≤{cap:,}"
        n = f"N={spread} (target {target.get('value'):g}, cap {cap:,})"
    else:
        n = f"N={cap:,}"
    what = "means and standard errors" if STDERR_COLUMN in columns_for(md) else "means"
    return f"{name}: ground-truth {what} per layer ({n_mlps} MLPs, width {md.get('width')}, {n})"


# ----------------------------------------------------------------------------------------------


def _info_lines(md: dict[str, Any]) -> list[str]:
    """whestbench 0.16's ``dataset info`` output for ``md`` (missing keys are skipped, not fatal)."""
    meta = DatasetMeta.of(md)
    if meta.is_multi:
        splits = meta.blocks
        lines = ["WhestBench dataset (multi-split)"]
        lines += [f"  {k}: {md[k]}" for k in ("schema_version", "format", "backend") if k in md]
        lines.append(f"  width: {md.get('width', '?')}  depth: {md.get('depth', '?')}  "
                     f"n_samples: {format_count(md.get('n_samples', '?'))}")
        lines.append("  splits:")
        for name in sorted(splits):
            entry = splits[name] if isinstance(splits[name], dict) else {}
            lines.append(f"    {name}:  n_mlps={format_count(entry.get('n_mlps', '?'))}"
                         + "".join(f"  {k}={entry[k]}" for k in ("seed", "config") if k in entry))
        if "created_at_utc" in md:
            lines.append(f"  created_at_utc: {md['created_at_utc']}")
        return lines
    lines = ["WhestBench dataset"]
    lines += [f"  {k}: {md[k]}" for k in _SINGLE_KEYS if k in md]
    if isinstance(md.get("target_stderr"), dict) and "n_samples" in md:  # the cap, not what each MLP used
        i = next(i for i, line in enumerate(lines) if line.startswith("  n_samples: "))
        spread = _used_spread(md)
        used = f"each MLP used {spread}" if spread else "each MLP's count is in the n_samples_used column"
        lines[i] += f" (the cap of a --target-stderr bake; {used})"
    sp = md.get("seed_protocol")
    if sp:
        shown = f"{sp.get('name')} (version {sp.get('version')})" if isinstance(sp, dict) else sp
        lines.append(f"  seed_protocol:  {shown}")
    return lines


def _extra_lines(md: dict[str, Any]) -> list[str]:
    """Our additions that need only metadata: sampler, seed source (per split for a multi-split
    dataset, whose splits each record theirs), partial range, how to load each split."""
    lines = []
    splits = {k: v for k, v in DatasetMeta.of(md).blocks.items() if isinstance(v, dict)}
    per_split = {k: v["sampler"] for k, v in splits.items() if isinstance(v.get("sampler"), dict)}
    if isinstance(md.get("sampler"), dict):
        lines.append(f"  sampler: {_sampler(md['sampler'])}")
    elif per_split:
        lines.append("  sampler: " + "; ".join(f"{k}: {_sampler(v)}" for k, v in sorted(per_split.items())))
    else:
        lines.append(f"  sampler: {infer_sampler(md)} (not recorded; inferred from backend {md.get('backend')!r})")
    sources = {k: src for k, v in sorted(splits.items()) if (src := _split_seed_source(v)) is not None}
    if isinstance(md.get("seed_source"), dict):
        lines.append(f"  seed source: {_seed_source(md['seed_source'])}")
    elif sources:
        lines.append("  seed source: " + "; ".join(f"{k}: {v}" for k, v in sources.items()))
    else:
        lines.append("  seed source: not recorded (per-MLP seeds are in the mlp_seed column)")
    lines += [line for line in [device_summary_line(md.get("device_check"))] if line]
    if md.get("is_partial"):
        rng = md.get("mlp_range")
        span = f"[{rng[0]}, {rng[1]})" if isinstance(rng, list) and len(rng) == 2 else str(rng)
        lines.append(f"  partial: MLPs {span} of {md.get('total_n_mlps')} — merge all partials with "
                     "`whest dataset merge` before loading")
    lines += _load_lines(md, splits)
    return lines


def _sampler(s: dict[str, Any]) -> str:
    bits = [f"version {s['version']}"] if "version" in s else []
    if "block_size" in s:
        bits.append(f"block {format_count(s['block_size'])} samples")
    return f"{s.get('name')}" + (f" ({', '.join(bits)})" if bits else "")


def _split_seed_source(entry: dict[str, Any]) -> str | None:
    """A split's seed source: recorded, or read from the bake command it records."""
    if isinstance(entry.get("seed_source"), dict):
        return _seed_source(entry["seed_source"])
    cmd = entry.get("bake_command")
    cmd = " ".join(map(str, cmd)) if isinstance(cmd, list) else cmd if isinstance(cmd, str) else ""
    m = re.search(r"(?:^|\s)--seed[= ](\d+)", cmd)
    if m:
        return f"derived from root seed {m.group(1)} (--seed, from its bake_command)"
    if "--mlp-seeds" in cmd:
        return "explicit list (--mlp-seeds, from its bake_command)"
    return None


def _load_lines(md: dict[str, Any], splits: dict[str, dict[str, Any]]) -> list[str]:
    """A multi-split dataset whose splits live in several configs: plain ``datasets.load_dataset(dir)``
    returns only the default config's split, silently, so say how to get each one."""
    if not splits:
        return []
    default = md.get("default_split")
    configs = {}
    for name, entry in sorted(splits.items()):
        config = entry.get("config") if isinstance(entry.get("config"), str) else None
        if config is None and isinstance(default, str):
            config = DEFAULT_CONFIG if name == default else name
        configs[name] = config or DEFAULT_CONFIG
    if len(set(configs.values())) < 2:
        return []
    lines = ["  load each split with plain `datasets` (load_dataset(dir) alone gives only the default config's):"]
    lines += [f"    {name}: datasets.load_dataset(DIR, {config!r}, split={name!r})" for name, config in configs.items()]
    return lines + ["    or every split at once: whestbench.load_dataset(DIR)"]


def _seed_source(src: dict[str, Any]) -> str:
    method = str(src.get("method"))
    if method == "derived":
        return f"derived from root seed {src.get('root_seed')} (--seed)"
    return {"explicit": "explicit list (--mlp-seeds)",
            "random": "random (generated at bake time; the seeds are in the mlp_seed column)"}.get(method, method)


def _local_lines(handle: DatasetDir, md: dict[str, Any]) -> list[str]:
    directory = handle.path
    lines = _extra_lines(md)
    meta = DatasetMeta.of(md)
    lines.append("  data:")
    for split in meta.splits:
        declared = meta.n_mlps(split)
        try:
            files = data_files(handle, split)
        except ValueError:
            lines.append(f"    {split}: no Parquet shards found (expected data/{split}-00000-of-00001.parquet)")
            continue
        size = sum(p.stat().st_size for p in files)
        shards = f"{len(files)} shard{'s' if len(files) != 1 else ''}"
        try:
            rows = sum(parquet_footer(p).num_rows for p in files)
        except ValueError:
            lines.append(f"    {split}: {shards}, {format_bytes(size)} — UNREADABLE (truncated or corrupt Parquet)")
            continue
        count = f"{format_count(rows)} rows"
        if isinstance(declared, int) and rows != declared:
            count += f" (metadata says {format_count(declared)})"
        lines.append(f"    {split}: {count} in {shards}, {format_bytes(size)}")
        lines += _stderr_lines(handle, split, md)
    prepared = md.get("prepared_splits")
    if isinstance(prepared, dict) and prepared:
        lines.append(f"  prepared Arrow: {', '.join(sorted(prepared))}")
        for split in sorted(prepared):
            verdict = prepared_verdict(handle, md, split)
            if verdict is not None:
                lines.append(f"    {split}: " + ("ok, " + verdict.detail if verdict.ok else f"DIFFERS — {verdict.detail}"))
    files = [p for p in directory.rglob("*") if p.is_file()]
    lines.append(f"  total size: {format_bytes(sum(p.stat().st_size for p in files))} in {len(files)} files")
    state = checksum_state(handle)
    status, detail = state.state, state.detail
    if status == "ok":
        lines.append(f"  integrity: checksums ok ({detail})")
    elif status in ("absent", "stale"):
        lines.append(f"  integrity: checksums {status} — {detail}; `whest dataset verify {directory}` checks the content")
    else:
        lines.append(f"  integrity: checksums MISMATCH — {detail}; re-download or re-bake the dataset")
    return lines


def _hub_lines(remote: RemoteMetadata) -> list[str]:
    md, ref = remote.metadata, remote.ref
    lines = _extra_lines(md)
    commit = f"commit {remote.commit[:12]}; " if remote.commit else ""
    lines.append(f"  source: {ref.uri} ({commit}only metadata.json fetched)")
    meta = DatasetMeta.of(md)
    lines.append("  data:")
    lines += [f"    {split}: {format_count(meta.n_mlps(split))} MLPs (from metadata)" for split in meta.splits]
    checks = "checksums listed" if isinstance(md.get("checksums"), dict) else "no checksums listed"
    lines.append(f"  integrity: not checked ({checks}); `whest dataset pull {ref.repo_id}` then "
                 "`whest dataset verify DIR`")
    return lines


def _stderr_lines(directory: "Path | DatasetDir", split: str, md: dict[str, Any]) -> list[str]:
    """The standard errors of ``split``'s means in one line per layer (median and max over its MLPs
    and neurons), and the samples the MLPs used when the bake had a target standard error."""
    columns = columns_for(md)
    if STDERR_COLUMN not in columns:
        return []
    try:
        se = _layer_means(directory, split, STDERR_COLUMN)
    except ValueError:
        return [f"      stderr: {STDERR_COLUMN} column missing or unreadable though metadata.json records an estimator: "
                "damaged? run `whest dataset verify`"]
    est = DatasetMeta.of(md).estimator
    lines = [f"      stderr ({sanitize(est.get('name', '?'))} estimator), median / max per layer:"]
    n_samples = md.get("n_samples") if isinstance(md.get("n_samples"), int) else 0
    counts = (read_table(directory, split, [N_USED_COLUMN]).column(N_USED_COLUMN).to_numpy().astype(np.int64)
              if N_USED_COLUMN in columns else np.full(se.shape[0], n_samples, dtype=np.int64))
    undefined = undefined_stderr(md, counts, se.shape)  # where the estimator has no standard error: NaN
    for layer in range(se.shape[1] if se.size else 0):
        values = se[:, layer]
        nan = np.isnan(values)
        known = values[~nan]
        damaged = int(np.count_nonzero(nan & ~undefined[:, layer]))
        if not known.size and not damaged:
            lines.append(f"        layer {layer + 1}: n/a (too few samples for a standard error)")
            continue
        text = f"        layer {layer + 1}: " + (f"{np.median(known):.3g} / {known.max():.3g}" if known.size else "-")
        if damaged:
            text += f" ({damaged:,} NaN where a standard error must exist: damaged? run `whest dataset verify`)"
        elif nan.any():
            text += f" ({int(nan.sum()):,} of {values.size:,} n/a: too few samples)"
        lines.append(text)
    if N_USED_COLUMN in columns:
        target = md.get("target_stderr") if isinstance(md.get("target_stderr"), dict) else {}
        lines.append(f"      samples used (target stderr {sanitize(target.get('value'))} on the {sanitize(target.get('layer'))} "
                     f"layer): min {int(counts.min()):,}, median {int(np.median(counts)):,}, max {int(counts.max()):,}")
    return lines


def _layer_means(directory: "Path | DatasetDir", split: str, column: str = "all_layer_means"):
    """``split``'s ``column`` (``all_layer_means`` or ``all_layer_stderr``) as ``(n, depth, width)`` float32."""
    col = arrow_storage(read_table(directory, split, [column]).column(column))
    n = len(col)
    inner = col.flatten()
    depth = len(inner) // n if n else 0
    flat = inner.flatten().to_numpy(zero_copy_only=False).astype(np.float32)
    return flat.reshape(n, depth, -1) if n else np.zeros((0, 0, 0), np.float32)
