"""The dataset card states no false sentence (issue 35 found some).

Every unit of the card (each sentence of its prose, each list item, table row, badge and code block) must
match one rule of ``RULES``; a unit no rule knows fails the test, so a new sentence cannot slip in unchecked.
A rule's check holds what the sentence says to the data that is there, read independently of the code that
wrote the card: the Parquet rows (``whestbench.arrays``), the audit trail (each MLP's samples, sums and sums of
squares, segment by segment: ``Σ n_s`` is the N each MLP used), a fresh forward pass of the stored weights
(``FRESH`` inputs of numpy's own), ``datasets`` itself, and verify's checks where a claim is about a rule it
recomputes (the target's planned counts). The Quick start's Python is run with the dataset's directory in
place of the repository id, as the card says works, and what it prints is checked.

Rules whose ``check`` is None state no fact about this dataset (a heading, an instruction, a definition that
holds for every whestbench dataset); each says why it needs no check.

The datasets: plain, control-variate, a plain target bake (MLPs stopping at different counts and at the cap),
a control-variate target bake, a torch (philox) bake, a merged one, a combined one and a partial, each
rendered neutral, with a card of its own (authors, repository, badges) and with the organisers' preset.
``test_the_rebake_recipe_rebakes_the_same_numbers`` (slow) runs each card's re-bake commands.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable

import datasets
import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

import whestbench
from whestbench.bake.pipeline import create_dataset
from whestbench.format.card import TOOL_URL, render_card
from whestbench.format.schema import DatasetMeta

W, D = 8, 3
FRESH = 20_000  # inputs of the test's own forward pass (numpy, its own seed)
REPO, REV = "org/name", "v1"
OWN = {"pretty_name": "Ada's evaluation set", "license": "cc-by-4.0", "homepage": "https://example.org/ada",
       "repository": "https://github.com/ada/eval-set", "authors": ["Ada Lovelace", "Charles Babbage"],
       "badges": [{"label": "paper", "url": "https://example.org/ada/paper"}]}
VARIANTS = {"neutral": {}, "own": OWN, "organisers": {"preset": "whestbench-organisers"}}


# --- the datasets ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def private_hf_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path_factory.mktemp("hf-cache")))
        yield


def _bake_all(root: Path) -> dict[str, Path]:
    from whestbench.assemble.combine import combine_split_datasets
    from whestbench.assemble.merge import merge_datasets

    shape = dict(width=W, depth=D)
    out = {
        "plain": create_dataset(3, 40_000, seed=1, output_path=root / "plain", **shape),
        "cv": create_dataset(3, 200_000, seed=2, estimator="control-variate", output_path=root / "cv", **shape),
        # plain target: these MLPs stop at 32,768, 131,072 and at the cap, 200,000 (measured)
        "target": create_dataset(4, 200_000, seed=5, target_stderr=0.004, output_path=root / "target", **shape),
        "cv-target": create_dataset(2, 2_000_000, seed=3, estimator="control-variate", target_stderr=2e-3,
                                    output_path=root / "cv-target", **shape),
    }
    seeds = [11, 12, 13, 14]
    for k, rng in enumerate([(0, 2), (2, 4)]):
        create_dataset(4, 40_000, mlp_seeds=seeds, mlp_range=rng, output_path=root / f"part-{k}", **shape)
    out["partial"] = root / "part-0"
    out["merged"] = merge_datasets([root / "part-0", root / "part-1"], output_dir=root / "merged")
    hold = create_dataset(2, 40_000, seed=7, split="holdout", config="holdout", output_path=root / "hold", **shape)
    out["combined"] = combine_split_datasets([out["plain"], hold], output_dir=root / "combined",
                                             default_split="public")
    try:
        from whestbench.dataset_torch import create_dataset_torch
    except ImportError:
        pass
    else:
        import importlib.util

        if importlib.util.find_spec("torch") is not None:
            out["torch"] = create_dataset_torch(2, 40_000, seed=4, device="cpu", output_path=root / "torch", **shape)
    return {k: Path(v) for k, v in out.items()}


@pytest.fixture(scope="module")
def baked(tmp_path_factory) -> dict[str, Path]:
    return _bake_all(tmp_path_factory.mktemp("card-facts"))


NAMES = ["plain", "cv", "target", "cv-target", "torch", "merged", "combined", "partial"]


# --- the facts a card is checked against -------------------------------------------------------------------


@dataclass
class Facts:
    """One rendering of a card (``given``: its card fields) and what it is checked against (``Data``, shared by
    the renderings of one dataset)."""

    root: Path
    given: dict[str, Any]
    card: str
    front: dict[str, Any] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(_data(self.root), name)

    @property
    def fields(self) -> dict[str, Any]:
        """The card fields this rendering was given, over those the bake recorded (none here)."""
        return self.given

    @property
    def organisers(self) -> bool:
        return self.given.get("preset") == "whestbench-organisers"


_DATA: dict[Path, "Data"] = {}


def _data(root: Path) -> "Data":
    if root not in _DATA:
        _DATA[root] = Data(root)
    return _DATA[root]


class Data:
    """The data of one dataset, read once: its rows, trail, a fresh forward pass and verify's report."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @cached_property
    def md(self) -> dict[str, Any]:
        return json.loads((self.root / "metadata.json").read_text())

    @cached_property
    def meta(self) -> DatasetMeta:
        return DatasetMeta.of(self.md)

    @property
    def splits(self) -> list[str]:
        return list(self.meta.splits)

    @cached_property
    def a(self) -> dict[str, dict[str, np.ndarray]]:
        """Each split's columns, read by pyarrow (not by the code under test)."""
        out = {}
        for s in self.splits:
            files = sorted((self.root / "data").glob(f"{s}-*.parquet"))
            table = pq.read_table(files)
            cols = {}
            for name in table.column_names:
                values = table.column(name).to_pylist()
                cols[name] = (np.asarray(values) if name not in ("mlp_name", "sampling_budget_breakdown")
                              else values)
            cols["weights"] = cols["weights"].astype(np.float32)
            out[s] = cols
        return out

    def col(self, name: str) -> np.ndarray:
        """A numeric column of every split, concatenated."""
        return np.concatenate([np.asarray(self.a[s][name]) for s in self.splits])

    @cached_property
    def trail(self) -> dict[str, dict[int, dict[str, np.ndarray]]]:
        """Per split and mlp_id, from the audit trail: ``n`` (Σ n_s: the samples the MLP used), ``mean``
        (Σ n_s m_s / N), ``second`` (Σ n_s (v_s + m_s²) / N: the mean of h²), ``ss`` (Σ(y − mean)², the
        sum of squares around the mean), ``cv_mean`` and ``cv_ss`` (control variates: the batch-means
        sums of layers 2..)."""
        out = {}
        for s in self.splits:
            t = pq.read_table(self.root / "audit" / f"{s}.parquet").to_pydict()
            per: dict[int, dict[str, np.ndarray]] = {}
            for i in sorted(set(t["mlp_id"])):
                rows = [k for k, m in enumerate(t["mlp_id"]) if m == i]
                n_s = np.asarray([t["sample_end"][k] - t["sample_start"][k] for k in rows], dtype=np.float64)
                m = np.asarray([t["means"][k] for k in rows], dtype=np.float64)
                v = np.asarray([t["var"][k] for k in rows], dtype=np.float64)
                n = n_s.sum()
                mean = (n_s[:, None] * m).sum(0) / n
                rec = {"n": int(n), "mean": mean.reshape(D, W), "second": ((n_s[:, None] * (v + m * m)).sum(0) / n).reshape(D, W),
                       "ss": ((n_s[:, None] * v).sum(0) + (n_s[:, None] * (m - mean) ** 2).sum(0)).reshape(D, W),
                       "ss_tol": _rounding(n_s, m, v, mean).reshape(D, W),
                       "start": min(t["sample_start"][k] for k in rows), "end": max(t["sample_end"][k] for k in rows)}
                if "cv_means" in t:
                    cm = np.asarray([t["cv_means"][k] for k in rows], dtype=np.float64)
                    cvv = np.asarray([t["cv_var"][k] for k in rows], dtype=np.float64)
                    r = (n_s[:, None] * cm).sum(0) / n
                    rec["cv_mean"] = r.reshape(D - 1, W)
                    rec["cv_ss"] = ((n_s[:, None] * cvv).sum(0) + (n_s[:, None] * (cm - r) ** 2).sum(0)).reshape(D - 1, W)
                    rec["cv_tol"] = _rounding(n_s, cm, cvv, r).reshape(D - 1, W)
                per[i] = rec
            out[s] = per
        return out

    def n_used(self, split: str) -> np.ndarray:
        """The samples each row's means averaged, from the trail (not from any column or key)."""
        return np.asarray([self.trail[split][int(i)]["n"] for i in self.a[split]["mlp_id"]])

    @property
    def all_n(self) -> np.ndarray:
        return np.concatenate([self.n_used(s) for s in self.splits])

    @cached_property
    def report(self):
        from whestbench.verify.run import verify_dataset

        return verify_dataset(self.root)

    def verified(self, name: str) -> None:
        (check,) = [c for c in self.report.checks if c.name.split(": ")[-1] == name or c.name == name][:1] or [None]
        assert check is not None and check.ok and not check.skipped, (name, check)

    @property
    def target(self) -> dict[str, Any] | None:
        return self.md.get("target_stderr")

    @property
    def est(self) -> dict[str, Any]:
        return self.md.get("estimator") or {}

    @property
    def cv(self) -> bool:
        return self.est.get("name") == "control-variate"

    @cached_property
    def fresh(self) -> dict[str, dict[int, tuple[np.ndarray, np.ndarray]]]:
        """Each MLP's layer means and per-sample sds over FRESH inputs of the test's own generator, through
        ``h_l = relu(h_{l-1} @ W_l)`` in float64."""
        out = {}
        for s in self.splits:
            per = {}
            for k, (i, w) in enumerate(zip(self.a[s]["mlp_id"], self.a[s]["weights"])):
                h = np.random.default_rng([35, int(i), k]).standard_normal((FRESH, W))
                means, sds = [], []
                for layer in w.astype(np.float64):
                    h = np.maximum(h @ layer, 0.0)
                    means.append(h.mean(0))
                    sds.append(h.std(0))
                per[int(i)] = (np.asarray(means), np.asarray(sds))
            out[s] = per
        return out


def _rounding(n_s: np.ndarray, m: np.ndarray, v: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """How far the trail's float32 segment means ``m`` and variances ``v`` can move Σ n_s v_s + Σ n_s (m_s − M̂)²
    from the exact sum of squares (each value rounded once to float32, the stored standard error too):
    4·[2⁻²³(A + B) + 2⁻²³A + Σ n_s (2|d_s| e_s + e_s²)], e_s = 2⁻²³(|m_s| + |M̂|) (docs/error-bars.md)."""
    eps = 2.0 ** -23
    a = (n_s[:, None] * v).sum(0)
    d = m - mean
    b = (n_s[:, None] * d * d).sum(0)
    e = eps * (np.abs(m) + np.abs(mean))
    return 4 * (eps * (a + b) + eps * a + (n_s[:, None] * (2 * np.abs(d) * e + e * e)).sum(0)) + 1e-300


def _count(text: str) -> int:
    return int(text.replace(",", ""))


def _n_claim(f: Facts, text: str) -> None:
    """``N = X`` (every MLP used X samples) or ``N from A to B`` (the fewest and the most), against the trail."""
    n = f.all_n
    if m := re.fullmatch(r"N = ([\d,]+)", text):
        assert set(n.tolist()) == {_count(m[1])}, (text, n)
    elif m := re.fullmatch(r"N from ([\d,]+) to ([\d,]+)", text):
        assert (n.min(), n.max()) == (_count(m[1]), _count(m[2])) and n.min() < n.max(), (text, n)
    else:
        raise AssertionError(f"an N the checker does not know: {text!r}")


# --- the rules ---------------------------------------------------------------------------------------------


@dataclass
class Rule:
    pattern: re.Pattern
    check: Callable[[Facts, re.Match], None] | None
    why: str = ""


RULES: list[Rule] = []


def rule(template: str, why: str = "", *, regex: bool = False):
    """Register a rule for units equal to ``template``, where ``{name}`` matches any text (group ``name``)
    and ``{name:regex}`` that regex; the decorated function checks the match against the facts."""
    if regex:
        pattern = template
    else:
        parts = re.split(r"(\{\w+(?::[^{}]+)?\})", template)
        pattern = "".join(
            (f"(?P<{p[1:-1].split(':', 1)[0]}>{p[1:-1].split(':', 1)[1] if ':' in p else '.+?'})"
             if p.startswith("{") and p.endswith("}") and re.fullmatch(r"\{\w+(?::[^{}]+)?\}", p) else re.escape(p))
            for p in parts)

    def register(check):
        RULES.append(Rule(re.compile(pattern, re.S), check, why))
        return check

    return register


def known(template: str, why: str, *, regex: bool = False) -> None:
    """A unit that states no fact about the dataset (``why`` says what it is)."""
    rule(template, why, regex=regex)(None)


# headings and structure
for heading in ("## About", "## Quick start", "## Schema", "## How the ground truth was made", "## Dataset summary",
                "## Reproducibility", "## Provenance", "## Citation", "## License", "| Column | Type | Meaning |",
                "|---|---|---|", "| | |", "|---|---|", "<details>", "</details>",
                "<summary>Re-bake this dataset from its seeds</summary>"):
    known(heading, "structure")


@rule("# {title}")
def _title(f, m):
    n, (w, d) = len(f.col("mlp_id")), f.a[f.splits[0]]["weights"].shape[2:0:-1]
    from whestbench.format.card import DEFAULT_PRETTY_NAME, markdown_text

    want = (f.given.get("pretty_name") or (DEFAULT_PRETTY_NAME if f.organisers else
            f"Ground truth of {n:,} random ReLU MLP{'s' * (n != 1)} of width {w} and depth {d}"))
    assert m["title"] == markdown_text(want)


@rule("[![Hugging Face](https://img.shields.io/badge/%F0%9F%A4%97-View_on_the_Hub-ffd54f)]({url})")
@rule("Browse the files of this revision at <{url}>.")
def _hub_link(f, m):
    assert m["url"] == f"https://huggingface.co/datasets/{REPO}/tree/{REV}"


@rule("[![Baked with whestbench](https://img.shields.io/badge/baked_with-whestbench-181717)]({url})")
def _tool_badge(f, m):
    assert m["url"] == TOOL_URL and not f.organisers
    assert f.est, "whestbench writes an estimator block into every bake of its own"


@rule("[![Homepage](https://img.shields.io/badge/homepage-link-2b6cb0)]({url})")
def _homepage_badge(f, m):
    assert m["url"] == f.given["homepage"]


@rule("[![Code](https://img.shields.io/badge/code-repository-181717)]({url})")
def _repo_badge(f, m):
    assert m["url"] == f.given["repository"]


@rule("[![{label}]({image})]({url})")
def _own_badge(f, m):
    if m["label"] in ("Challenge", "Code"):  # the organisers' two badges
        assert f.organisers and m["url"] in ("https://www.aicrowd.com/challenges/arc-white-box-estimation-challenge-2026",
                                              "https://github.com/AIcrowd/whestbench")
        return
    assert {"label": m["label"], "url": m["url"]} in f.given.get("badges", []), m[0]


# About
@rule("Every row of this dataset is one randomly initialised ReLU network (a multi-layer perceptron with no biases) "
      "together with its **ground truth**: the average post-ReLU activation of every neuron in every layer when the "
      "network is fed standard-Gaussian inputs, estimated by Monte Carlo over **{n}** inputs per network{target:.*}.")
def _about(f, m):
    _n_claim(f, m["n"])
    assert bool(m["target"]) == bool(f.target)
    if m["target"]:
        assert m["target"] == (" (each network's own N is in the column `n_samples_used`: the target rule below "
                               "decided it)")
        assert f.col("n_samples_used").tolist() == f.all_n.tolist()
    _fresh_forward_pass(f)


def _fresh_forward_pass(f: Facts) -> None:
    """The stored means are the means of relu networks of the stored weights under N(0, I) inputs: each
    within 6 combined standard errors of the test's own forward pass (both estimates are unbiased)."""
    for s in f.splits:
        for k, i in enumerate(f.a[s]["mlp_id"]):
            means, sds = f.fresh[s][int(i)]
            stored, se = f.a[s]["all_layer_means"][k], f.a[s]["all_layer_stderr"][k]
            z = np.abs(stored - means) / np.sqrt(se.astype(np.float64) ** 2 + sds ** 2 / FRESH + 1e-12)
            assert z.max() < 6, (s, int(i), float(z.max()))


known("It is data for the WhestBench benchmark, where an estimator sees only the weights (and a FLOP budget) and "
      "must predict those averages.", "what the benchmark is")


@rule("This is the `{split}` split: {n} networks of width {w} and depth {d}.")
def _single(f, m):
    assert f.splits == [m["split"]] and len(f.a[m["split"]]["mlp_id"]) == _count(m["n"])
    assert f.a[m["split"]]["weights"].shape[1:] == (int(m["d"]), int(m["w"]), int(m["w"]))


@rule("The dataset holds {k} splits, {n} networks in all, every one of width {w} and depth {d}:")
def _multi(f, m):
    assert len(f.splits) == int(m["k"]) and len(f.col("mlp_id")) == _count(m["n"])
    assert all(f.a[s]["weights"].shape[1:] == (int(m["d"]), int(m["w"]), int(m["w"])) for s in f.splits)


@rule("`{split}`: {n} MLPs (config `{config}`)")
def _split_item(f, m):
    rows = datasets.load_dataset(str(f.root), m["config"], split=m["split"])
    assert len(rows) == _count(m["n"]) == len(f.a[m["split"]]["mlp_id"])


@rule("Loading without naming a config gives the `default` config: {splits}.")
def _default_config(f, m):
    got = datasets.load_dataset(str(f.root))
    assert sorted(got) == sorted(re.findall(r"`(\w+)`", m["splits"]))


@rule("`whest` commands that need one split and are given none use `{split}`.")
def _default_split(f, m):
    assert f.md.get("default_split") == m["split"]


@rule("**This is a partial bake** (MLPs {lo} to {hi} of {total}).")
def _partial(f, m):
    ids = f.col("mlp_id")
    assert f.md["is_partial"] and (ids.min(), ids.max()) == (int(m["lo"]), int(m["hi"]))
    assert f.md["total_n_mlps"] == _count(m["total"])


@rule("`whestbench.load_dataset` refuses partials: combine all slices with `whest dataset merge PARTIAL... "
      "--output DIR` first.")
def _partial_refused(f, m):
    with pytest.raises(whestbench.InvalidDatasetError, match="merge"):
        whestbench.load_dataset(f.root)


# Quick start
known("With nothing but the 🤗 `datasets` library:", "an introduction to the code below it")


@rule("A local copy works the same way: pass its directory in place of the repository id.")
def _local_copy(f, m):
    assert f.seen >= {"quick start"}, "the Quick start's code ran with the directory in place of the repo id"


@rule("With `whestbench` (`pip install 'whestbench>=0.17'`), which also checks the schema and the checksums and "
      "keeps the metadata at hand:")
def _whestbench_intro(f, m):
    major, minor = (int(x) for x in whestbench.__version__.split(".")[:2])
    assert (major, minor) >= (0, 17)
    if f.md.get("is_partial"):
        return
    md = whestbench.metadata(whestbench.load_dataset(f.root, split=f.splits[0]))
    assert md["n_samples"] == f.md["n_samples"]


@rule("`ds.to_pandas()` gives the array columns as object columns of nested arrays, and `ds.with_format(\"numpy\")` "
      "casts the float64 `avg_variance` to float32; `whestbench.arrays(ds)` keeps every stored dtype, and "
      "`whestbench.neuron_frame(ds)` is a numeric pandas frame with one row per (MLP, layer, neuron).")
def _pandas_routes(f, m):
    s = f.splits[0]
    ds = datasets.load_dataset(str(f.root), split=s) if f.md.get("is_partial") else whestbench.load_dataset(
        f.root, split=s)
    df = ds.to_pandas()
    assert df["final_means"].dtype == object and isinstance(df["final_means"][0], np.ndarray)
    assert ds.with_format("numpy")[:]["avg_variance"].dtype == np.float32
    assert pq.read_schema(sorted((f.root / "data").glob(f"{s}-*.parquet"))[0]).field("avg_variance").type == "double"
    a = whestbench.arrays(ds)
    assert a["avg_variance"].dtype == np.float64 and a["weights"].dtype == np.float32 and a["mlp_id"].dtype == np.int32
    frame = whestbench.neuron_frame(ds)
    assert len(frame) == len(ds) * D * W and all(t.kind in "iuf" for t in frame.dtypes)


@rule("The repository also carries Arrow copies of each split under `prepared/` (`Dataset.save_to_disk`), which "
      "whestbench 0.16's loader reads.")
def _prepared(f, m):
    for s in f.splits:
        copy = datasets.load_from_disk(str(f.root / "prepared" / s))
        assert copy["mlp_seed"] == f.a[s]["mlp_seed"].tolist()


@rule("`whestbench.load_dataset` reads the Parquet rows, and `whest dataset verify` checks that each copy holds "
      "exactly the rows of its split.")
def _prepared_checked(f, m):
    for s in f.splits:
        f.verified(f"{s}: prepared")


# Schema
@rule("One row per MLP, {k} columns.")
def _n_columns(f, m):
    words = {"eight": 8, "nine": 9, "ten": 10}
    assert words[m["k"]] == len(f.a[f.splits[0]]) == len(f.meta.columns)


known("`depth` and `width` are the sizes in the summary below.", "points to the summary table")

COLUMN_CHECKS: dict[str, Callable[[Facts, str], None]] = {}


def column(name: str, meaning: str):
    def register(check):
        COLUMN_CHECKS[name] = (meaning, check)
        return check

    return register


@rule("| `{name}` | `{type}` | {meaning} |")
def _column_row(f, m):
    name, kind = m["name"], m["type"]
    for s in f.splits:
        assert name in f.a[s], name
    assert list(f.a[f.splits[0]]).index(name) == [r for r in f.card_columns].index(name)
    dtype, _, dims = kind.partition("[")
    value = np.asarray(f.a[f.splits[0]][name]) if dtype != "string" else None
    if dtype == "string":
        assert all(isinstance(v, str) for v in f.a[f.splits[0]][name])
    else:
        shape = tuple({"depth": D, "width": W}[x.strip()] for x in dims.rstrip("]").split(",")) if dims else ()
        assert value.shape[1:] == shape, (name, value.shape)
        import pyarrow as pa

        stored = pq.read_schema(sorted((f.root / "data").glob("*.parquet"))[0]).field(name).type
        stored = stored.storage_type if isinstance(stored, pa.ExtensionType) else stored
        while hasattr(stored, "value_type"):
            stored = stored.value_type
        assert {"float": "float32", "double": "float64"}.get(str(stored), str(stored)) == dtype, (name, stored)
    want, check = COLUMN_CHECKS[name]
    assert re.fullmatch(want, m["meaning"]), (name, m["meaning"])
    check(f, m["meaning"])


Facts.card_columns = property(lambda f: re.findall(r"^\| `(\w+)` \|", f.card, re.M))  # type: ignore[attr-defined]


@column("mlp_id", re.escape("Position of the MLP in the whole dataset, from 0 (stable across sliced and merged bakes)."))
def _mlp_id(f, meaning):
    for s in f.splits:
        ids = f.a[s]["mlp_id"]
        start = f.md["mlp_range"][0] if f.md.get("is_partial") else 0
        assert ids.tolist() == list(range(start, start + len(ids)))
    if f.root.name == "merged":
        parts = [np.asarray(pq.read_table(f.root.parent / f"part-{k}" / "data").column("mlp_seed")) for k in (0, 1)]
        assert np.concatenate(parts).tolist() == f.a["public"]["mlp_seed"].tolist()


@column("mlp_name", re.escape("A readable label such as `mary-moore`, derived deterministically from the seeds; "
                              "unique within one bake."))
def _mlp_name(f, meaning):
    from whestbench.compute.naming import unique_names

    for s in f.splits:
        names, seeds = f.a[s]["mlp_name"], f.a[s]["mlp_seed"]
        assert len(set(names)) == len(names) and all(re.fullmatch(r"[a-z]+(-[a-z0-9]+)+", n) for n in names)
        name_seeds = [int(np.random.SeedSequence(int(x)).spawn(3)[2].generate_state(1)[0]) for x in seeds]
        start = f.md["mlp_range"][0] if f.md.get("is_partial") else 0
        if not start:
            assert unique_names(name_seeds) == names  # from the seeds alone


@column("mlp_seed", re.escape("The MLP's input seed. Weights, inputs and the estimator seed (`MLP.seed`) are all "
                              "derived from it."))
def _mlp_seed(f, meaning):
    _seeds_give_weights(f)


def _seeds_give_weights(f: Facts) -> None:
    """weights = float32(N(0,1)·sqrt(2/w)) per layer from SeedSequence(seed).spawn(3)[0] (numpy, here), and
    MLP.seed = spawn(3)[2].generate_state(1)[0]."""
    for s in f.splits:
        for seed, w in zip(f.a[s]["mlp_seed"], f.a[s]["weights"]):
            ss = np.random.SeedSequence(int(seed)).spawn(3)
            rng = np.random.default_rng(ss[0])
            want = np.stack([(rng.standard_normal((W, W)) * math.sqrt(2.0 / W)).astype(np.float32) for _ in range(D)])
            assert w.tobytes() == want.tobytes()
    if not f.md.get("is_partial"):
        s = f.splits[0]
        first = whestbench.mlp_at(whestbench.load_dataset(f.root, split=s), 0)
        assert first.seed == int(np.random.SeedSequence(int(f.a[s]["mlp_seed"][0])).spawn(3)[2].generate_state(1)[0])


@column("weights", re.escape("Layer matrices `W_1 … W_depth`, indexed (input, output)."))
def _weights(f, meaning):
    # indexed (input, output): layer 1's output j has the exact mean ‖W_1[:, j]‖ / sqrt(2π) (a column norm)
    for s in f.splits:
        exact = np.linalg.norm(f.a[s]["weights"][:, 0].astype(np.float64), axis=1) / math.sqrt(2 * math.pi)
        z = np.abs(f.a[s]["all_layer_means"][:, 0] - exact) / np.maximum(f.a[s]["all_layer_stderr"][:, 0], 1e-7)
        assert z.max() < 6, float(z.max())


@column("all_layer_means", re.escape("Ground truth: row `l-1` is the Monte-Carlo estimate of the mean of every "
                                     "neuron's output at layer `l`."))
def _all_layer_means(f, meaning):
    _fresh_forward_pass(f)


@column("final_means", re.escape("The last row of `all_layer_means`, stored separately because scoring uses it."))
def _final_means(f, meaning):
    for s in f.splits:
        assert f.a[s]["final_means"].tobytes() == f.a[s]["all_layer_means"][:, -1].tobytes()


@column("avg_variance", re.escape("Mean over output neurons of the final layer's activation variance (definition "
                                  "below)."))
def _avg_variance_column(f, meaning):
    _avg_variance_formula(f)


@column("sampling_budget_breakdown", r"JSON kept for compatibility with whestbench 0\.16\.2: .*")
def _breakdown(f, meaning):
    from whestbench.format.breakdown import operation_counts

    torch = f.md.get("backend") == "torch"
    n = "`n_samples_used`" if f.target else "N"
    if torch:
        assert meaning.startswith("JSON kept for compatibility with whestbench 0.16.2: its closed-form FLOP model of "
                                  f"a numpy sampling loop over this MLP's {n} samples (operations named after "
                                  "numpy's: `random.Generator.standard_normal`, `matmul`, ...), labelled "
                                  "`closed-form` in the row's `provenance`; it does not describe the torch kernels "
                                  "that ran. ")
    else:
        assert meaning.startswith("JSON kept for compatibility with whestbench 0.16.2: the FLOP counts its CPU path "
                                  f"measured with flopscope for the numpy sampling loop over this MLP's {n} samples, "
                                  "here computed in closed form (equal counts). ")
    rest = ("`wall_time_s` is the seconds the work units that computed this MLP took in the run that finished them "
            "(shared among the MLPs of a unit). Unrelated to an estimator's budget.")
    rest += " The control variates' pilot and extra sums are not in the counts." if f.cv else ""
    assert meaning.endswith(rest)
    for s in f.splits:
        for k, text in enumerate(f.a[s]["sampling_budget_breakdown"]):
            row = json.loads(text)
            ops = row["by_namespace"]["sampling.sample_layer_statistics"]["operations"]
            chunk = row["provenance"]["chunk_size"] if torch else f.meta.sampler(s)["block_size"]
            want = operation_counts(int(f.n_used(s)[k]), W, D, chunk)
            assert {op: (v["flop_cost"], v["calls"]) for op, v in ops.items()} == want
            assert row["flops_used"] == sum(c for c, _ in want.values()) and row["wall_time_s"] > 0
            assert "random.Generator.standard_normal" in ops and "matmul" in ops
            if torch:
                assert row["provenance"]["method"] == "closed-form"


@column("all_layer_stderr", re.escape("The standard error of every entry of `all_layer_means`, by the dataset's "
                                      "estimator (below)."))
def _stderr_column(f, meaning):
    _stderr_identity(f)


@column("n_samples_used", re.escape("The samples this MLP used: the count its own pilot planned for the target "
                                    "standard error, at most the cap `n_samples`."))
def _n_used_column(f, meaning):
    assert f.col("n_samples_used").tolist() == f.all_n.tolist() and f.all_n.max() <= f.md["n_samples"]
    f.verified("target")  # verify re-runs every MLP's pilot and recomputes its planned count


def _stderr_identity(f: Facts) -> None:
    """The stored standard errors from the trail's sums: plain se²·N·(N − 1) = Σ(y − mean)²; control variates
    layer 1 is 0 and later layers se²·N·(k − 1) = the batch-means sum, k the MLP's batches."""
    for s in f.splits:
        for k, i in enumerate(f.a[s]["mlp_id"]):
            t, se = f.trail[s][int(i)], f.a[s]["all_layer_stderr"][k].astype(np.float64)
            n = t["n"]
            if f.cv:
                batches = -(-n // f.est["batch_samples"])
                assert not se[0].any()
                gap, tol = np.abs(se[1:] ** 2 * n * (batches - 1) - t["cv_ss"]), t["cv_tol"]
            else:
                gap, tol = np.abs(se ** 2 * n * (n - 1) - t["ss"]), t["ss_tol"]
            assert (gap <= tol).all(), (s, int(i), float((gap / tol).max()))


def _avg_variance_formula(f: Facts) -> None:
    for s in f.splits:
        for k, i in enumerate(f.a[s]["mlp_id"]):
            t = f.trail[s][int(i)]
            m = f.a[s]["final_means"][k].astype(np.float64)
            want = np.mean(t["second"][-1] - m * m)
            assert abs(f.a[s]["avg_variance"][k] - want) <= 1e-5 * abs(want), (f.a[s]["avg_variance"][k], want)


# How the ground truth was made
@rule("**Network.** Each layer matrix has entries drawn independently from `N(0, 2/width)` (He initialisation) and "
      "stored as float32.")
def _he(f, m):
    w = f.col("weights")
    assert w.dtype == np.float32
    assert abs(w.std() / math.sqrt(2 / W) - 1) < 0.15 and abs(w.mean()) < 4 * math.sqrt(2 / W / w.size)
    _seeds_give_weights(f)


@rule("With row vectors, `h_0 = x` and `h_l = relu(h_{l-1} @ W_l)` for `l = 1 … depth`: there are no biases, and a "
      "ReLU follows every layer, the last one included.")
def _forward(f, m):
    _fresh_forward_pass(f)


@rule("**Inputs.** Each MLP gets its own {n} inputs `x_n ~ N(0, I)` (float32).")
def _inputs(f, m):
    _n_claim(f, m["n"])
    _fresh_forward_pass(f)  # layer 1's means match N(0, I) inputs


known("Every input is pushed through all layers, so all rows of `all_layer_means` share the same draws.",
      "how every whestbench sampler works (docs/samplers.md); one sample stream per MLP")


@rule("**Means.** For layer `l` and neuron `j`:")
def _means_intro(f, m):
    assert not f.cv


@rule("{arithmetic:The matrix products run in .*?}; the sums over n are accumulated in {acc:float(32|64)}, divided by "
      "N and rounded to float32 at the end.")
def _arithmetic(f, m):
    kernel = f.md.get("kernel") or {}
    if f.md.get("backend") == "torch":
        assert m["arithmetic"] == (f"The matrix products run in float32 (torch, matmul precision "
                                   f"`{kernel['matmul_precision']}`, TF32 {'allowed' if kernel['allow_tf32'] else 'off'})")
        assert m["acc"] == kernel["accumulation"]
    else:
        assert m["arithmetic"] == "The matrix products run in float32 (BLAS sgemm)" and m["acc"] == "float64"
        assert f.meta.sampler(f.splits[0])["name"] == "pcg64"
    for s in f.splits:  # rounded to float32 from float64 sums: the stored means are the trail's, rounded
        for k, i in enumerate(f.a[s]["mlp_id"]):
            stored = f.a[s]["all_layer_means"][k].astype(np.float64)
            want = f.trail[s][int(i)]["mean"]
            if f.cv:
                stored, want = stored[1:], f.trail[s][int(i)]["cv_mean"]
            np.testing.assert_allclose(stored, want, rtol=1e-6, atol=1e-7)


known("Samples are processed in chunks so memory does not grow with N.", "how the samplers work (docs/samplers.md)")


@rule("**Means: control variates** (estimator `control-variate` version {version}).")
def _cv_title(f, m):
    assert f.cv and f.est["version"] == m["version"]


@rule("Layer 1's means are exact: `E[relu(x @ W_1)_j] = ‖W_1[:, j]‖ / sqrt(2π)`.")
def _layer1_exact(f, m):
    for s in f.splits:
        exact = np.linalg.norm(f.a[s]["weights"][:, 0].astype(np.float64), axis=1) / math.sqrt(2 * math.pi)
        np.testing.assert_allclose(f.a[s]["all_layer_means"][:, 0], exact, rtol=2e-7, atol=0)


@rule("For every later layer, each neuron's output `y` is estimated as `mean_n(y_n − φ_n · B) + E[φ] · B`, where the "
      "controls `φ` are {controls}, and the coefficients `B` were fitted on the MLP's own pilot stream ({pilot} inputs "
      "of `{stream}`), never on the samples they correct, so the estimate is unbiased.")
def _cv_controls(f, m):
    assert m["controls"] == f.est["controls"] and _count(m["pilot"]) == f.est["pilot_samples"]
    assert m["stream"] == f.est["pilot_stream"] == "SeedSequence(mlp_seed).spawn(4)[3]"
    _fresh_forward_pass(f)  # unbiased: within the errors of an independent estimate


@rule("**Variance.** With `m_j = final_means[j]` (the float32 value, widened back to float64){target:.*}:")
def _variance_intro(f, m):
    assert m["target"] == (" and N the row's `n_samples_used`" if f.target else "")


@rule("computed in float64: the final layer's activation variance, averaged over its neurons.")
def _variance_dtype(f, m):
    assert f.col("avg_variance").dtype == np.float64
    _avg_variance_formula(f)


# Accuracy
@rule("**Accuracy.** `all_layer_stderr` holds the standard error of every stored mean: `sqrt(s² / N)` per neuron, "
      "with `s²` the sample variance (divided by N − 1) from float64 sums of squares.")
def _plain_stderr(f, m):
    assert not f.cv
    _stderr_identity(f)


@rule("A 95 % interval is about ±1.96·stderr.")
def _plain_interval(f, m):
    assert not f.cv and f.all_n.min() >= 1000  # the normal quantile needs many samples


@rule("On the final layer, `avg_variance / N` is the mean of `all_layer_stderr[-1]²` times (N − 1) / N: the mean "
      "squared Monte-Carlo error of `final_means`.")
def _plain_avg_variance(f, m):
    assert not f.cv
    for s in f.splits:
        n = f.n_used(s).astype(np.float64)
        se = f.a[s]["all_layer_stderr"][:, -1].astype(np.float64)
        np.testing.assert_allclose(f.a[s]["avg_variance"] / n, (se ** 2).mean(1) * (n - 1) / n, rtol=1e-5)


@rule("**Accuracy.** `all_layer_stderr` holds the standard error of every stored mean, by batch means: from the "
      "spread of the residual means over the MLP's batches of {batch} samples (layer 1 is exact: its standard error "
      "is 0).")
def _cv_stderr(f, m):
    assert f.cv and _count(m["batch"]) == f.est["batch_samples"]
    _stderr_identity(f)


@rule("It rests on batches − 1 degrees of freedom, so a 95 % interval is ±t·stderr with Student's t quantile on them "
      "(2.04 at 32 batches, 1.98 at 128), not ±1.96.")
def _cv_t(f, m):
    assert f.cv
    assert _t975(31) == pytest.approx(2.04, abs=0.005) and _t975(127) == pytest.approx(1.98, abs=0.005)


def _t975(dof: int) -> float:
    """Student's t quantile at 0.975 by bisection on its cdf, integrated numerically (no scipy)."""
    def cdf(x):
        grid = np.linspace(0.0, x, 20001)
        pdf = math.gamma((dof + 1) / 2) / (math.sqrt(dof * math.pi) * math.gamma(dof / 2)) * (1 + grid ** 2 / dof) ** (
            -(dof + 1) / 2)
        return 0.5 + np.trapezoid(pdf, grid)

    lo, hi = 1.5, 3.0
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < 0.975 else (lo, mid)
    return lo


@rule("Here N = {n} makes {k} batches ({dof} degrees of freedom), so t = {t}.")
@rule("Here N from {lo} to {hi} makes {k} batches ({dof} degrees of freedom), so t = {t}.")
@rule("Here N from {lo} to {hi} makes {klo} to {khi} batches per MLP, so t is {tlo} to {thi}.")
def _cv_batches(f, m):
    n, batch = f.all_n, f.est["batch_samples"]
    k = -(-n // batch)
    groups = m.groupdict()
    if "n" in groups:
        assert set(n.tolist()) == {_count(m["n"])}
    else:
        assert (n.min(), n.max()) == (_count(m["lo"]), _count(m["hi"]))
    if "k" in groups:
        assert set(k.tolist()) == {int(m["k"])} and int(m["dof"]) == int(m["k"]) - 1
        assert m["t"] == f"{_t975(int(m['dof'])):.2f}"
    else:
        assert (k.min(), k.max()) == (int(m["klo"]), int(m["khi"]))
        assert (m["tlo"], m["thi"]) == (f"{_t975(k.min() - 1):.2f}", f"{_t975(k.max() - 1):.2f}")


@rule("`avg_variance` is not the accuracy of these means: `avg_variance / N` is about the mean squared error that "
      "the plain sample mean of the same N inputs would have had.")
def _cv_avg_variance(f, m):
    """avg_variance / N = Var(y)/N averaged over the final layer: the plain mean's MSE. The trail's sums give
    the plain sample variance of the same inputs; the two agree up to (mean − cv mean)² and rounding."""
    assert f.cv
    for s in f.splits:
        for k, i in enumerate(f.a[s]["mlp_id"]):
            t = f.trail[s][int(i)]
            n, plain, m = t["n"], t["mean"][-1], f.a[s]["final_means"][k].astype(np.float64)
            plain_var = np.mean(t["ss"][-1] / n)  # Var(y) of these inputs: N times the plain mean's squared error
            # E_N[y²] − m² with m the control-variate mean, not the plain one: they differ by mean(plain² − m²)
            np.testing.assert_allclose(f.a[s]["avg_variance"][k] - plain_var, np.mean(plain ** 2 - m ** 2),
                                       atol=1e-6 * plain_var)
            assert f.a[s]["avg_variance"][k] == pytest.approx(plain_var, rel=0.02)  # "about"


@rule("The stored final means' own is estimated by the mean of `all_layer_stderr[-1]²`, which the control variates "
      "make smaller.")
def _cv_smaller(f, m):
    assert f.cv
    for s in f.splits:
        se2 = (f.a[s]["all_layer_stderr"][:, -1].astype(np.float64) ** 2).mean(1)
        assert (se2 < f.a[s]["avg_variance"] / f.n_used(s)).all(), (se2, f.a[s]["avg_variance"] / f.n_used(s))


# Target
_RULE_TEXT = {
    "pilot-planned": ": before sampling, the MLP's own pilot stream estimates the per-sample standard deviation σ̂ and "
                     "the MLP samples to the first check point ({check_points}) at or past `σ̂² / E²`, so the count "
                     "does not depend on the samples it averages and the estimate stays unbiased; the stored standard "
                     "errors therefore come out at about E or below (the check points overshoot), not at most E",
    "pilot-planned-exceed": ": before sampling, the MLP's own pilot stream estimates the per-sample standard deviation "
                            "σ̂ of the control-variate residuals, and the MLP samples to the first check point "
                            "({check_points}, never fewer than 32 batches) where the chance that any chosen neuron's "
                            "stored standard error exceeds E is at most 5 %, allowing for the batch-means standard "
                            "error's own spread (χ² on batches − 1 degrees of freedom) and the pilot's; the count does "
                            "not depend on the samples it averages, so the estimate stays unbiased",
}


@rule("**Target standard error.** Each MLP's N was chosen to bring the standard error of {layer} to about {value}, "
      "by the rule `{rule}`{text}.")
def _target(f, m):
    t = f.target
    assert m["layer"] == ("every layer" if t["layer"] == "all" else "the last layer")
    assert float(m["value"]) == t["value"] and m["rule"] == t["rule"]
    assert m["text"] == _RULE_TEXT[t["rule"]].format(check_points=t["check_points"])
    f.verified("target")  # every MLP's count is what its own pilot plans, at a check point
    n, cap = f.all_n, f.md["n_samples"]
    se = f.col("all_layer_stderr")[:, -1 if t["layer"] != "all" else slice(None)]
    largest = se.reshape(len(n), -1).max(1) / t["value"]
    if t["rule"] == "pilot-planned":  # about E or below, where the cap did not stop it
        assert (largest[n < cap] <= 1.05).all(), largest
    else:
        assert (n[n < cap] >= 32 * f.est["batch_samples"]).all()


@rule("N was capped at {cap} (`n_samples` in the metadata); the column `n_samples_used` holds each MLP's own N.")
def _target_cap(f, m):
    assert _count(m["cap"]) == f.md["n_samples"] >= f.all_n.max()
    assert f.col("n_samples_used").tolist() == f.all_n.tolist()


@rule("**Sampler.** `{name}`{version:( version `[^`]+`)?}{extras:( \\(.*\\))?}.")
@rule("- Sampler: `{name}`{version:( \\S+)?}", regex=False)
def _sampler(f, m):
    for s in f.splits:
        sampler = f.meta.sampler(s)
        assert sampler["name"] == m["name"]
        version = (m["version"] or "").strip().strip("`").removeprefix("version `").strip("`")
        assert version == str(sampler.get("version", ""))
        if m.groupdict().get("extras"):
            extras = ", ".join(f"{k}={v}" for k, v in sampler.items() if k not in ("name", "version"))
            assert m["extras"] == f" ({extras})"
        want = "pcg64" if f.md["backend"] == "flopscope" else "philox"
        assert sampler["name"] == want
        if want == "pcg64":  # block_size: the pcg64 chunk, max(1024, min(16384, 2**20 // width)) rows
            assert sampler["block_size"] == max(1024, min(16384, 2 ** 20 // W))


# Summary
@rule("| Splits | {splits} |")
def _sum_splits(f, m):
    assert re.findall(r"`(\w+)`", m["splits"]) == f.splits


@rule("| MLPs | {n} |")
def _sum_mlps(f, m):
    total = len(f.col("mlp_id"))
    if len(f.splits) == 1:
        assert m["n"] == f"{total:,}"
    else:
        assert m["n"] == f"{total:,} (" + ", ".join(f"{s}: {len(f.a[s]['mlp_id']):,}" for s in f.splits) + ")"


@rule("| Width | {w} |")
def _sum_width(f, m):
    assert f.col("weights").shape[-1] == int(m["w"])


@rule("| Depth | {d} |")
def _sum_depth(f, m):
    assert f.col("weights").shape[1] == int(m["d"])


@rule("| Samples per MLP (N) | {n} |")
def _sum_n(f, m):
    n = f.all_n
    if f.target:
        lo, hi = f"{n.min():,}", f"{n.max():,}"
        span = lo if lo == hi else f"{lo} to {hi}"
        assert m["n"] == f"{span} per MLP (column `n_samples_used`; cap {f.md['n_samples']:,})"
    else:
        assert set(n.tolist()) == {_count(m["n"])}


@rule("| Estimator | `{name}` |")
def _sum_est(f, m):
    assert m["name"] == f.est["name"] == ("control-variate" if f.cv else "plain")


@rule("| Target standard error | {value} ({layer}; rule `{rule}`) |")
def _sum_target(f, m):
    assert float(m["value"]) == f.target["value"] and m["rule"] == f.target["rule"]


@rule("| Schema version | {v} |")
def _sum_schema(f, m):
    assert m["v"] == f.md["schema_version"] == whestbench.SCHEMA_VERSION


@rule("| Seed protocol | `{name}` {version} |")
@rule("- Seed protocol: `{name}` version {version}")
def _protocol(f, m):
    assert f.md["seed_protocol"] == {"name": m["name"], "version": m["version"]}
    _seeds_give_weights(f)


# Reproducibility
@rule("- Backend: `{backend}`{device:( on device `\\w+`)?}")
def _backend(f, m):
    assert m["backend"] == f.md["backend"]
    if f.md["backend"] == "torch":
        assert m["device"] == f" on device `{f.md['device']}`"


@rule("- torch: `{v}`")
def _torch_version(f, m):
    import torch

    assert m["v"] == f.md["torch_version"] == torch.__version__


@rule("- whestbench: `{v}`")
def _whestbench_version(f, m):
    assert m["v"] == f.md["whestbench_version"] == whestbench.__version__


@rule("- BLAS: `{v}`")
def _blas(f, m):
    blas = f.md["blas"]
    assert m["v"] == f"{blas['library']} {blas['version']}, kernel {blas['kernel']}"


@rule("- Created (UTC): `{t}`")
def _created(f, m):
    stamps = [f.md.get("created_at_utc")] + [f.meta.entry(s).get("created_at_utc") for s in f.splits]
    assert m["t"] == min(x for x in stamps if x)


@rule("- Merged (UTC): `{t}` from {k} partial bakes")
def _merged(f, m):
    assert m["t"] == f.md["merged_at_utc"] and int(m["k"]) == f.md["partials_count"] == 2


@rule("- Device check before the bake: passed (the device's arithmetic matched the checks before the bake)")
def _device_check(f, m):
    dc = f.md["device_check"]
    assert dc["passed"] and not dc["skipped"] and all(c["passed"] for c in dc["checks"])


@rule("- `metadata.json` records a SHA-256 checksum of every data file; `whest dataset verify DIR` checks them.")
def _checksums(f, m):
    import hashlib

    listed = f.md["checksums"]
    files = {str(p.relative_to(f.root)) for p in f.root.rglob("*") if p.is_file()
             and p.parts[len(f.root.parts)] in ("data", "audit", "prepared")}
    assert set(listed) == files
    for name, digest in listed.items():
        assert digest == "sha256:" + hashlib.sha256((f.root / name).read_bytes()).hexdigest()
    f.verified("checksums")


@rule("Every MLP's input seed is in the `mlp_seed` column.")
@rule("From it, `SeedSequence(mlp_seed).spawn(3)` gives three independent streams: the weights, the Monte-Carlo "
      "inputs, and the estimator seed `MLP.seed`.")
def _seed_streams(f, m):
    _seeds_give_weights(f)


@rule("So the data alone is enough to bake these MLPs again.")
@rule("**Bake** with the same shape and seeds:")
def _rebake_intro(f, m):
    assert "rebake" in f.seen, "the re-bake command block was checked"


known("**Seeds file.** The `mlp_seed` column in `mlp_id` order, as a JSON array:", "introduces the code checked below")
known("**Combine** the splits into one dataset:", "introduces the command checked below")
known("Weights, names and seeds come out byte-identical.", "run by test_the_rebake_recipe_rebakes_the_same_numbers")
known("With the same sampler the means agree to float32 rounding (bit for bit with the same kernels and BLAS build).",
      "run by test_the_rebake_recipe_rebakes_the_same_numbers")
known("`whest dataset verify REBAKE --against ORIGINAL` compares the two.",
      "run by test_the_rebake_recipe_rebakes_the_same_numbers")
known("For this partial bake, the seeds file must list the seeds of **all** {n} MLPs of the whole dataset (the file "
      "every slice was baked from), not only the rows stored here.", "what --mlp-range needs (docs/cli.md)")


# Provenance
@rule("- Single-host bake on `{host}` ({detail})")
@rule("- {detail:CPU `.*}")
def _provenance(f, m):
    fps = [f.md.get("hardware")] if "hardware_fingerprints" not in f.md else f.md["hardware_fingerprints"]
    fps += [fp for s in f.splits for fp in f.meta.entry(s).get("hardware_fingerprints", []) if f.meta.is_multi]
    labels = {"cpu_brand": "CPU", "machine": "arch", "os": "OS", "cpu_count_logical": "logical CPUs",
              "python_version": "Python", "numpy_version": "numpy", "torch_version": "torch",
              "whestbench_version": "whestbench", "mlp_count": "partial bakes"}
    found = dict(re.findall(r"([\w ]+?) `([^`]+)`", m["detail"]))
    assert any(all(str(fp.get(k)) == found[label.strip()] for k, label in labels.items() if label in found)
               for fp in fps), (m["detail"], fps)
    if m.groupdict().get("host"):
        assert m["host"] == f.md["hardware"]["cpu_brand"]


@rule("`{split}`:")
def _provenance_split(f, m):
    assert f.meta.is_multi and m["split"] in f.splits


# License
@rule("The data is released under the Creative Commons Attribution 4.0 license (CC-BY-4.0): you may share and adapt "
      "it for any purpose, {credit}.")
def _license(f, m):
    assert f.front["license"] == "cc-by-4.0"
    if f.organisers:
        assert m["credit"] == "with credit to the WhestBench organisers"
    elif f.given.get("authors"):
        assert m["credit"] == f"with credit to its authors ({', '.join(f.given['authors'])})"
    else:  # no authors given: the card names none and claims none
        assert m["credit"] == "under the license's terms (https://creativecommons.org/licenses/by/4.0/)"


@rule("The data is released under the license `{license}` (its terms: https://huggingface.co/docs/hub/"
      "repositories-licenses).")
def _other_license(f, m):
    assert m["license"] == f.front["license"] == f.given["license"]


# --- code blocks ---------------------------------------------------------------------------------------------


def _check_code(f: Facts, lang: str, text: str) -> None:
    if lang == "python":
        _run_python(f, text)
    elif lang == "bash":
        _check_bash(f, text)
    elif lang == "bibtex":
        _check_bibtex(f, text)
    elif lang == "" and text == "all_layer_means[l-1, j] = (1/N) Σ_n relu(h_{l-1}(x_n) @ W_l)_j":
        assert not f.cv
        _arithmetic(f, re.fullmatch(r"(?P<arithmetic>.*); (?P<acc>.*)", _arith_text(f)))
    elif lang == "" and text == "avg_variance = mean_j( (1/N) Σ_n h_depth(x_n)_j² − m_j² )":
        _avg_variance_formula(f)
    else:
        raise AssertionError(f"a code block the checker does not know ({lang!r}):\n{text}")


def _arith_text(f: Facts) -> str:
    (line,) = [u for u in f.units if u[0] == "sentence" and u[1].startswith("The matrix products run in")]
    return line[1].removesuffix(", divided by N and rounded to float32 at the end.").replace(
        "the sums over n are accumulated in ", "")


def _run_python(f: Facts, text: str) -> None:
    """Run a Quick start block with the dataset's directory in place of the repository id; check what it
    printed and the comments' claims against the data."""
    code = text.replace(f'"{REPO}"', repr(str(f.root)))
    assert code != text, "the block loads the repository"
    if f.md.get("is_partial") and "import whestbench" in code:  # whestbench refuses a partial, as the card says
        with pytest.raises(whestbench.InvalidDatasetError, match="merge"):
            exec(compile(code, "<card>", "exec"), {})
        f.seen.add("quick start")
        return
    out, ns = io.StringIO(), {}
    with contextlib.redirect_stdout(out):
        exec(compile(code, "<card>", "exec"), ns)
    printed = out.getvalue().splitlines()
    s = f.splits[0]
    if "json.dump(seeds" in code:  # the seeds file for --mlp-seeds: one per split, in the splits' order
        files = re.findall(r'open\("([^"]+)", "w"\)', code)
        assert len(files) == len(f.splits)
        for split, name in zip(f.splits, files):
            path = Path(name)
            assert json.loads(path.read_text()) == f.a[split]["mlp_seed"].tolist()
            path.unlink()
        f.seen.add("seeds file")
        return
    f.seen.add("quick start")
    if "whestbench.iter_mlps" not in code:  # datasets only
        row = 0
        assert printed[0] == f"{f.a[s]['mlp_name'][row]} {f.a[s]['final_means'][row][:4].tolist()}"
        if f.target:
            assert "# this MLP's N (metadata.json's n_samples is only the cap)" in code
            assert printed[1] == str(f.n_used(s)[row]) and int(printed[1]) <= f.md["n_samples"]
        assert len(printed) == 1 + bool(f.target)
        return
    assert printed[0] == str(f.md["n_samples"])
    if f.target:
        assert "# the cap: no MLP used more; each used its own N" in code and f.all_n.max() <= f.md["n_samples"]
    else:
        assert "# N: every MLP used this many samples" in code and set(f.n_used(s).tolist()) == {f.md["n_samples"]}
    assert "# mlp.weights: depth float32 (width, width) matrices; mlp.means, mlp.stderr: (depth, width) float32" in code
    mlp = ns["mlp"]
    assert len(mlp.weights) == D and all(w.dtype == np.float32 and w.shape == (W, W) for w in mlp.weights)
    assert mlp.means.shape == mlp.stderr.shape == (D, W) and mlp.stderr.dtype == mlp.means.dtype == np.float32
    assert "# its N, its largest final-layer standard error" in code
    for k, line in enumerate(printed[1:1 + len(f.a[s]["mlp_id"])]):
        se = f.a[s]["all_layer_stderr"][k][-1].max()
        assert line == f"{f.a[s]['mlp_name'][k]} {f.n_used(s)[k]} {str(np.float32(se))}"
    assert "# every column as one ndarray in its stored dtype and shape" in code
    assert "# (MLPs, depth, width, width) float64" in code
    assert printed[-1] == f"{(len(f.a[s]['mlp_id']), D, W, W)} float64"
    assert len(printed) == 2 + len(f.a[s]["mlp_id"])


def _check_bash(f: Facts, text: str) -> None:
    """A re-bake command: the recorded bake command with a fresh --output (and no slice flags unless the
    dataset is a partial); or the combine-splits of the re-baked splits."""
    from whestbench.format import command

    argv = shlex.split(text.replace("\\\n", " "))
    if argv[:3] == ["whest", "dataset", "combine-splits"]:
        assert argv[3:-2 - 2 * ("--default-split" in argv)] == [f"./rebake-{s}" for s in f.splits]
        assert command.flag_value(argv, "--default-split") == f.md.get("default_split")
        return
    assert command.parse_bake(" ".join(shlex.quote(a) for a in argv)) is not None
    split = command.flag_value(argv, "--split") or "public"
    assert split in f.splits and command.flag_value(argv, "--output") == f"./rebake-{split}"
    recorded = command.parse_bake(f.meta.entry(split).get("bake_command"))
    shape = {flag: command.flag_value(argv, flag) for flag in ("--n-samples", "--width", "--depth", "--estimator",
                                                               "--target-stderr", "--seed", "--mlp-seeds")}
    if recorded is not None:  # the command that baked it, as recorded
        assert shape == {flag: command.flag_value(recorded, flag) for flag in shape}
    else:  # an API bake records none: the command is built from the metadata and the seeds file
        assert "seeds file" in f.seen and shape["--mlp-seeds"] is not None
        assert shape["--estimator"] == (f.est["name"] if f.cv else None)
        assert (shape["--target-stderr"] is None) == (f.target is None)
    assert int(shape["--width"]) == W and int(shape["--depth"]) == D
    assert int(float(shape["--n-samples"])) == f.md["n_samples"]
    if f.md.get("is_partial"):
        lo, hi = f.md["mlp_range"]
        assert command.flag_value(argv, "--mlp-range") == f"{lo}-{hi - 1}"
    n_mlps = int(command.flag_value(argv, "--n-mlps"))
    assert n_mlps == (f.md["total_n_mlps"] if f.md.get("is_partial") else len(f.a[split]["mlp_id"]))
    if shape["--seed"] is not None:  # the seeds derive from it: check the first
        from whestbench.compute.seeds import derived_seeds

        assert derived_seeds(int(shape["--seed"]), n_mlps)[:len(f.a[split]["mlp_seed"])] == f.a[split]["mlp_seed"].tolist()
    f.seen.add("rebake")


def _check_bibtex(f: Facts, text: str) -> None:
    from whestbench.format.card import bibtex_text

    fields = dict(re.findall(r"^\s+(\w+)\s+= \{(.*)\},$", text, re.M))
    title = f.given.get("pretty_name") or f.front["pretty_name"]
    assert fields.pop("title") == "{" + bibtex_text(title) + "}"
    if f.organisers:
        assert fields == {"author": "{Alignment Research Center} and {AIcrowd}", "year": "2026",
                          "howpublished": f"\\url{{{f.front['homepage']}}}"}
        return
    year = fields.pop("year")
    assert year == min(x for x in [f.md.get("created_at_utc")] + [f.meta.entry(s).get("created_at_utc")
                                                                   for s in f.splits] if x)[:4]
    if f.given.get("authors"):
        assert fields.pop("author") == " and ".join("{" + a + "}" for a in f.given["authors"])
    if f.given.get("homepage"):
        assert fields.pop("howpublished") == f"\\url{{{f.given['homepage']}}}"
    version = f.md.get("whestbench_version")
    assert fields == {"note": "Baked with whestbench" + (f" {version}" if version else "")}
    assert version is None or version == whestbench.__version__


# --- the checker -------------------------------------------------------------------------------------------------

SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`*(<\[])")


_LINE_KINDS = (("#", "heading"), ("|", "row"), ("- ", "item"), ("<", "html"), ("[![", "badge"))


def card_units(body: str) -> list[tuple]:
    """The card's units: ``("sentence", text)`` for prose (a paragraph's or a blockquote's), ``("item", ...)``
    for a list item (its leading ``- `` kept), ``("row", ...)`` a table row, ``("badge", ...)``, ``("html", ...)``,
    ``("heading", ...)`` and ``("code", lang, text)``."""
    out: list[tuple] = []
    para: list[str] = []

    def flush():
        if para:
            out.extend(("sentence", s) for s in SENTENCE_END.split(" ".join(x.strip() for x in para)))
            para.clear()

    lines = body.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            flush()
            lang, block = line[3:], []
            i += 1
            while not lines[i].startswith("```"):
                block.append(lines[i])
                i += 1
            out.append(("code", lang, "\n".join(block)))
        elif not line.strip():
            flush()
        elif line.startswith("> "):
            para.append(line[2:])
        elif kind := next((k for start, k in _LINE_KINDS if line.startswith(start)), None):
            flush()
            out.append((kind, line))
        else:
            para.append(line)
        i += 1
    flush()
    return out


def check_card(root: Path, given: dict[str, Any]) -> Facts:
    from whestbench.format.card_rules import check_card_fields  # noqa: F401  (the fields below pass its checks)

    text = render_card(json.loads((root / "metadata.json").read_text()), repo_id=REPO, revision=REV, **given)
    head, sep, body = text[4:].partition("\n---\n\n")
    assert text.startswith("---\n") and sep
    f = Facts(root=root, given=given, card=text, front=yaml.safe_load(head))
    _check_front_matter(f)
    f.units = card_units(body)
    unknown = []
    # code first: the prose refers to what the code showed (the Quick start ran, the re-bake parsed)
    for unit in [u for u in f.units if u[0] == "code"] + [u for u in f.units if u[0] != "code"]:
        if unit[0] == "code":
            _check_code(f, unit[1], unit[2])
            continue
        text = unit[1].removeprefix("- ") if unit[0] == "item" and not unit[1].startswith("- Sampler") else unit[1]
        for candidate in (text, unit[1]):
            hits = [(r, m) for r in RULES if (m := r.pattern.fullmatch(candidate))]
            if hits:
                break
        if not hits:
            unknown.append(unit[1])
            continue
        r, m = hits[0]
        if r.check is not None:
            try:
                r.check(f, m)
            except AssertionError as e:
                raise AssertionError(f"{root.name}: a false sentence: {unit[1]!r}: {e}") from e
    assert not unknown, f"{root.name}: sentences the checker does not know (add a rule that checks them):\n" + \
        "\n".join(unknown)
    return f


def _check_front_matter(f: Facts) -> None:
    fm = f.front
    n = len(f.col("mlp_id"))
    assert fm["size_categories"] == ["n<1K"] and n < 1000
    assert fm["license"] == f.given.get("license", "cc-by-4.0")
    if f.organisers:
        assert fm["repository"] == "https://github.com/AIcrowd/whestbench"
    elif f.given.get("repository"):
        assert fm["repository"] == f.given["repository"]
    else:
        assert "repository" not in fm, "a repository only where one was given"
    assert fm["homepage"] == f.given.get("homepage") or fm["homepage"] in (
        TOOL_URL, "https://www.aicrowd.com/challenges/arc-white-box-estimation-challenge-2026")
    assert ("multi-split" in fm["tags"]) == f.meta.is_multi


# --- the tests -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("name", NAMES)
def test_every_sentence_of_the_card_is_true_of_its_data(baked, name, variant):
    if name not in baked:
        pytest.skip("the torch extra is not installed")
    f = check_card(baked[name], VARIANTS[variant])
    assert {"rebake", "quick start"} <= f.seen


def test_the_card_on_disk_is_the_one_checked(baked):
    for name, root in baked.items():
        md = json.loads((root / "metadata.json").read_text())
        assert (root / "README.md").read_text() == render_card(md), name


def test_another_license_names_itself_and_credits_no_one(baked):
    check_card(baked["plain"], {**OWN, "license": "mit"})


def test_the_checker_refuses_a_false_or_unknown_sentence(baked, monkeypatch):
    """The old card's sentence on a control-variate dataset, and any sentence it does not know, fail."""
    import whestbench.format.card as card

    real = card.render_card

    def old(md, **kw):
        return real(md, **kw).replace(
            "**Accuracy.** `all_layer_stderr`",
            "`avg_variance / N` estimates the mean squared error of the ground truth itself. "
            "**Accuracy.** `all_layer_stderr`")

    monkeypatch.setattr(sys.modules[__name__], "render_card", old)
    with pytest.raises(AssertionError, match="does not know"):
        check_card(baked["cv"], {})
    monkeypatch.setattr(sys.modules[__name__], "render_card",
                        lambda md, **kw: real(md, **kw).replace("N = 200,000", "N = 200,001"))
    with pytest.raises(AssertionError, match="a false sentence"):
        check_card(baked["cv"], {})


@pytest.mark.slow
@pytest.mark.parametrize("name", ["plain", "cv", "target", "torch", "merged", "combined"])
def test_the_rebake_recipe_rebakes_the_same_numbers(baked, name, tmp_path):
    """The card's "Re-bake" block, run as written in an empty directory (sizes as baked), then its own
    `whest dataset verify REBAKE --against ORIGINAL`: weights, names and seeds byte-identical and the means
    bit for bit on this machine."""
    if name not in baked:
        pytest.skip("the torch extra is not installed")
    root = baked[name]
    card = render_card(json.loads((root / "metadata.json").read_text()), repo_id=str(root))
    rebake = card[card.index("<summary>Re-bake"):card.index("</details>")]
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "HOME": str(tmp_path), "HF_HOME": str(tmp_path / "hf")}
    whest = tmp_path / "bin" / "whest"
    whest.parent.mkdir()
    whest.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m whestbench "$@"\n')
    whest.chmod(0o755)
    env["PATH"] = f"{whest.parent}:{env['PATH']}"
    work = tmp_path / "work"
    work.mkdir()
    for code in re.findall(r"```python\n(.*?)```", rebake, re.S):  # the seeds file, written where the bake runs
        proc = subprocess.run([sys.executable, "-c", code], cwd=work, env=env, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
    script = "\n".join(re.findall(r"```bash\n(.*?)```", rebake, re.S))
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=work, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = work / ("rebake" if "combine-splits" in script else f"rebake-{DatasetMeta.of(json.loads((root / 'metadata.json').read_text())).splits[0]}")
    proc = subprocess.run(["whest", "dataset", "verify", str(out), "--against", str(root)], cwd=work, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "bit for bit" in proc.stdout or "identical" in proc.stdout, proc.stdout
