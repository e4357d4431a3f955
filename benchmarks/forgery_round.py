"""The careful forger's cases of the adversarial round (issue 34): re-signed edits of the audit trail and of
the metadata's audit block, forgeries rewritten to match, and the spot check's and recompute's options
as a tired operator types them. ``hostile_round.cases()`` runs them with its own (group ``forgery``).

The fixtures (``fixture``, baked when a case first needs one): ``tr`` (plain, pcg64, 3 MLPs of 8×2, N = 32 sampler steps: 32 segments each) and
``trcv`` (the same, control variates). A forgery "rewritten to match" edits the segments and rebuilds every
column from them with the combination verify's trail check uses (``verify_power.forge``). Those that cost
the forger compute and keep every exact identity pass plain verify — docs/cli.md's forgery table says so
(verdict ``silent-doc``) — and are caught by a spot check that draws a forged segment; the cases that
name ``--spot-check S/mlp`` (every segment) must catch them every time.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable


def _hr():
    try:
        from benchmarks import hostile_round
    except ImportError:  # run as a script: benchmarks/ is on sys.path
        import hostile_round
    return hostile_round


def _vp():
    try:
        from benchmarks import verify_power
    except ImportError:
        import verify_power
    return verify_power


def fixture(root: Path, name: str) -> Path:
    """``root/name`` (``tr``: plain; ``trcv``: control variates), baked the first time a case needs it."""
    from whestbench.bake.pipeline import BakeConfig, bake
    from whestbench.compute.estimation import Estimation
    from whestbench.compute.pcg64 import chunk_rows

    if not (root / name).exists():
        est = {"tr": "plain", "trcv": "control-variate"}[name]
        bake(BakeConfig(n_mlps=3, seed=9, n_samples=32 * chunk_rows(8), width=8, depth=2, output=root / name,
                        estimation=Estimation(est)))
    return root / name


def forged(forgery: str, consistent: bool = True, src: str = "tr") -> Callable[[Path, Path], None]:
    def setup(root: Path, here: Path) -> None:
        _vp().forge(fixture(root, src), here / "ds", forgery, consistent, here)
    return setup


def trail_edit(fn: Callable, src: str = "tr", md_update: Callable | None = None) -> Callable[[Path, Path], None]:
    """Copy ``src`` to ``ds``, edit its trail table with ``fn(table) -> table`` (and its metadata with
    ``md_update(md)``), and re-sign it, as a forger with the file in hand would."""
    def setup(root: Path, here: Path) -> None:
        import pyarrow.parquet as pq

        shutil.copytree(fixture(root, src), here / "ds")
        path = here / "ds" / "audit" / "public.parquet"
        if fn is not None:
            table = fn(pq.read_table(path))
            if table is None:
                path.unlink()
            else:
                pq.write_table(table, path)
        if md_update is not None:
            p = here / "ds" / "metadata.json"
            md = json.loads(p.read_text())
            md_update(md)
            p.write_text(json.dumps(md))
        _hr().resign(here)
    return setup


def _rows_where(table, keep):
    import pyarrow as pa

    ids, segs = table.column("mlp_id").to_pylist(), table.column("segment").to_pylist()
    return table.filter(pa.array([keep(i, s) for i, s in zip(ids, segs)]))


def _set(table, name: str, fn):
    import pyarrow as pa

    col = table.column(name).to_pylist()
    col = fn(col)
    return table.set_column(table.schema.get_field_index(name), name, pa.array(col, table.schema.field(name).type))


def _drop_cv(table):
    return table.drop_columns(["cv_means", "cv_var"])


def _swap(i: int, j: int):
    def fn(col):
        col = list(col)
        col[i], col[j] = col[j], col[i]
        return col
    return fn


def _collapse(table, md):
    """One segment per MLP holding all its samples, claimed for N ×4 (error bars /2): the columns are
    left (the combination of one segment is itself)."""
    import numpy as np
    import pyarrow as pa

    md["audit"]["segments"] = 1
    md["n_samples"] = md["n_samples"] * 4
    rows = []
    for i in sorted(set(table.column("mlp_id").to_pylist())):
        t = _rows_where(table, lambda m, s, i=i: m == i)
        first = t.slice(0, 1).to_pylist()[0]
        first.update(segment=0, sample_start=0, sample_end=md["n_samples"])
        for name in ("means", "var"):
            first[name] = np.mean(np.array(t.column(name).to_pylist()), axis=0).tolist()
        rows.append(first)
    return pa.Table.from_pylist(rows, schema=table.schema)


def _md(**update) -> Callable[[dict], None]:
    def fn(md):
        for key, value in update.items():
            if value is None:
                md["audit"].pop(key, None)
            else:
                md["audit"][key] = value
    return fn


def _no_audit():
    """The audit block gone (the trail file with it: ``trail_edit(lambda t: None, ...)``)."""
    def fn(md):
        md.pop("audit", None)
    return fn


def inflate_without_trail(k: float) -> Callable[[Path, Path], None]:
    def setup(root: Path, here: Path) -> None:
        vp = _vp()
        src = here / "src"
        shutil.copytree(fixture(root, "tr"), src)
        shutil.rmtree(src / "audit")
        md = json.loads((src / "metadata.json").read_text())
        md.pop("audit")
        (src / "metadata.json").write_text(json.dumps(md))
        edit, upd = vp._inflate_n(md["n_samples"], k, False)
        vp.rewrite(src, here / "ds", edit, upd)
    return setup


def cases() -> list:
    hr = _hr()
    Case = hr.Case
    c: list = []
    add = c.append
    verify = ["dataset", "verify", "ds"]
    every = ["--spot-check", "32/mlp", "--no-cache"]
    # ------------------------------------------------------------- the metadata's audit block, re-signed
    for name, fn, want in (
            ("audit-version-99", _md(version="99"), "version"),
            ("audit-segments-16", _md(segments=16), "segment"),
            ("audit-step-half", _md(step_samples=8192), "segment|step"),
            ("audit-aligned-flip", _md(aligned=True), "segment|align"),
            ("audit-file-other", _md(file="audit/other.parquet"), "audit"),
            ("audit-file-dotdot", _md(file="../x.parquet"), "audit"),
            ("audit-values-missing", _md(values=["means"]), "var|values"),
            ("audit-segments-zero", _md(segments=0), "segment|audit"),
            ("audit-segments-huge", _md(segments=10**12), "segment|audit")):
        add(Case(f"forge-{name}", "forgery", f"metadata audit block edited ({name[6:]}), re-signed → verify",
                 setup=trail_edit(None, md_update=fn), argv=verify, rc=(1,), want=want))
    add(Case("forge-drop-cv-columns", "forgery", "control variates: the trail's cv_* columns dropped and audit.values "
             "edited to match, re-signed → verify", setup=trail_edit(_drop_cv, "trcv", _md(values=["means", "var",
                                                                                                    "pcg64_state"])),
             argv=verify, rc=(1,), want="cv_"))
    add(Case("forge-drop-cv-columns-only", "forgery", "control variates: the cv_* columns dropped, audit.values left, "
             "re-signed → verify", setup=trail_edit(_drop_cv, "trcv"), argv=verify, rc=(1,), want="cv_"))
    add(Case("forge-collapse-one-segment", "forgery", "trail collapsed to one segment per MLP, audit.segments 1, "
             "N ×4, re-signed → verify", setup=_collapse_setup(), argv=verify, rc=(1,), want="segment"))
    add(Case("forge-trail-file-gone", "forgery", "the trail file removed, the audit block kept, re-signed → verify",
             setup=trail_edit(lambda t: None), argv=verify, rc=(1,), want="missing|trail"))
    add(Case("forge-no-trail-no-block", "forgery", "the trail and the audit block both removed, re-signed → verify "
             "(the recipe keeps a trail)", setup=trail_edit(lambda t: None, md_update=_no_audit()), argv=verify,
             rc=(1,), want="trail"))
    for k in (1.1, 4.0):
        add(Case(f"forge-no-trail-N{k:g}", "forgery", f"no trail, no audit block; N ×{k:g}, every error bar /√{k:g}, "
                 "re-signed → verify", setup=inflate_without_trail(k), argv=verify, rc=(1,), want="."))
    # ------------------------------------------------------------- the trail's rows, re-signed
    for name, fn, want in (
            ("mlp-missing", lambda t: _rows_where(t, lambda m, s: m != 1), "MLP|mlp"),
            ("segment-missing", lambda t: _rows_where(t, lambda m, s: (m, s) != (1, 5)), "segment"),
            ("gap", lambda t: _set(t, "sample_start", lambda c: [v + 16 if i == 37 else v for i, v in enumerate(c)]),
             "segment|sample"),
            ("rows-swapped", lambda t: t.take([*range(3), 4, 3, *range(5, t.num_rows)]), "segment|trail"),
            ("segment-number-dup", lambda t: _set(t, "segment", lambda c: [4 if i == 5 else v for i, v in enumerate(c)]),
             "segment"),
            ("mlp-id-shifted", lambda t: _set(t, "mlp_id", lambda c: [v + 1 for v in c]), "mlp_id|MLP"),
            ("value-edited", lambda t: _set(t, "means", lambda c: [[x * 1.01 for x in v] if i == 40 else v
                                                                  for i, v in enumerate(c)]), "trail")):
        add(Case(f"forge-trail-{name}", "forgery", f"trail {name.replace('-', ' ')}, re-signed → verify",
                 setup=trail_edit(fn), argv=verify, rc=(1,), want=want))
    add(Case("forge-state-swap-spot", "forgery", "two segments' pcg64 states swapped, re-signed → verify --spot-check "
             "32/mlp", setup=trail_edit(lambda t: _set(t, "pcg64_state", _swap(3, 4))), argv=verify + every, rc=(1,),
             want="spot-check|state"))
    # ------------------------------------------------------------- forgeries rewritten to match (verify_power.forge)
    for forgery, src in (("segments copied", "tr"), ("one segment's variance /4", "tr"),
                         ("one segment's variance /4", "trcv")):
        slug = {"segments copied": "segments-copied", "one segment's variance /4": "segment-variance-quarter"}[forgery]
        add(Case(f"forge-{slug}-{src}", "forgery",
                 f"{forgery}, every column rebuilt from the trail ({src}), re-signed → verify",
                 setup=forged(forgery, src=src), argv=verify, rc=(1,), want="."))
    for forgery, src in (("N x2", "tr"), ("error bars x0.8", "trcv"), ("one neuron +20 SE", "tr"),
                         ("final layer +10 SE", "trcv")):
        slug = forgery.replace(" ", "").replace("+", "p").replace("/", "")
        add(Case(f"forge-{slug}-{src}", "forgery", f"{forgery} ({src}), the trail rewritten to match, re-signed → "
                 "verify (docs/cli.md: passes plain verify)", setup=forged(forgery, src=src), argv=verify, rc=(1,),
                 want=".", documented="a consistent forgery that costs compute: left to --spot-check"))
        add(Case(f"forge-{slug}-{src}-spot", "forgery", f"{forgery} ({src}), the trail rewritten to match → verify "
                 "--spot-check 32/mlp", setup=forged(forgery, src=src), argv=verify + every, rc=(1,),
                 want="spot-check"))
    # ------------------------------------------------------------- merge and combine sign nothing forged
    add(Case("forge-merge-cv-dropped", "forgery", "merge of partials, one with its trail's values edited, re-signed",
             setup=_partial_forged(), argv=["dataset", "merge", "p0", "p1", "--output", "m"], rc=(1, 2), want="trail"))
    # ------------------------------------------------------------- the options, as a tired operator types them
    for name, extra, rc, want in (
            ("budget-zero-per-mlp", ["--spot-check", "0/mlp"], (2,), "--spot-check"),
            ("budget-per-seg", ["--spot-check", "4/seg"], (2,), "K/mlp"),
            ("budget-empty", ["--spot-check", ""], (2,), "--spot-check"),
            ("seed-text", ["--spot-check", "2", "--spot-seed", "abc"], (2,), "spot-seed"),
            ("seed-alone", ["--spot-seed", "4"], (2,), "--spot-check"),
            ("recompute-seed-negative", ["--recompute", "1", "--recompute-seed", "-3"], (2,), "non-negative"),
            ("recompute-seed-alone", ["--recompute-seed", "3"], (2,), "--recompute"),
            ("budget-over-all", ["--spot-check", "1000000/mlp", "--no-cache"], (0,), "96 of 96 segments"),
            ("budget-over-all-dataset", ["--spot-check", "100000", "--no-cache"], (0,), "96 of 96 segments")):
        add(Case(f"spot-{name}", "forgery", f"verify {' '.join(extra)}", setup=_copy_as("tr"),
                 argv=verify + extra, rc=rc, want=want))
    return c


def _copy_as(src: str) -> Callable[[Path, Path], None]:
    def setup(root: Path, here: Path) -> None:
        shutil.copytree(fixture(root, src), here / "ds")
    return setup


def _collapse_setup() -> Callable[[Path, Path], None]:
    def setup(root: Path, here: Path) -> None:
        import pyarrow.parquet as pq

        shutil.copytree(fixture(root, "tr"), here / "ds")
        p = here / "ds" / "metadata.json"
        md = json.loads(p.read_text())
        path = here / "ds" / "audit" / "public.parquet"
        pq.write_table(_collapse(pq.read_table(path), md), path)
        p.write_text(json.dumps(md))
        _hr().resign(here)
    return setup


def _partial_forged() -> Callable[[Path, Path], None]:
    def setup(root: Path, here: Path) -> None:
        import pyarrow.parquet as pq

        for k in range(2):
            shutil.copytree(root / f"p{k}", here / f"p{k}")
        path = here / "p0" / "audit" / "public.parquet"
        if path.exists():
            t = pq.read_table(path)
            pq.write_table(_set(t, "means", lambda c: [[x * 1.05 for x in v] for v in c]), path)
        _hr().resign(here, "p0")
    return setup
