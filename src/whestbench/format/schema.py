"""Schema 3.0: constants, HF features, name rules, ``DatasetMeta`` and ``validate_metadata`` (the card
and device_check blocks by ``card_rules``' rules).

The layout and every key are format-compatible with whestbench 0.16 in both directions; our
additions (``sampler``, ``checksums``, ``bake_command``, ``seed_list_digest``, ...) are optional
keys that its loader ignores.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from functools import partial
from typing import Any, Mapping

from whestbench.compute import pcg64
from whestbench.compute.estimation import (CV_TARGET_RULE, ESTIMATOR_VERSION, ESTIMATORS, EXCEED_PROBABILITY,
                                           PILOT_SAMPLES, SEQUENTIAL_RULE, TARGET_RULE, is_cv_block)
from whestbench.compute.estimators import CV_BATCH
from whestbench.compute.pcg64 import chunk_rows
from whestbench.compute.philox import spec as philox
from whestbench.errors import REDO, InvalidDatasetError, UsageError, bad_value
from whestbench.format import command as recorded
from whestbench.format.card_rules import CARD_KEY, EDITED, check_card_block, check_device_check, refuse_if
from whestbench.hubenv import import_hub
from whestbench.text import show_value
from whestbench.values import is_int, is_one_of, is_positive_number

SCHEMA_VERSION = "3.0"
FORMAT = "hf-datasets-parquet"
DEFAULT_SPLIT = "public"
DEFAULT_CONFIG = "default"
BACKEND_CPU = "flopscope"  # the default CPU path, named as whestbench 0.16 names it
BACKEND_TORCH = "torch"

PROTOCOLS = {
    ("whestbench_seedsequence_hierarchy", "2.0"),
    ("whestbench_explicit_per_mlp_seeds", "3.0"),
    ("whestbench_kdf_per_mlp_seeds", "4.0"),
}

COLUMNS = (
    "mlp_id",
    "mlp_name",
    "mlp_seed",
    "weights",
    "all_layer_means",
    "final_means",
    "avg_variance",
    "sampling_budget_breakdown",
)
# Ours, after the reference's eight (its loader ignores them): the standard error of every stored
# mean (bakes that record an ``estimator``), and the samples each MLP used (``target_stderr`` bakes).
STDERR_COLUMN = "all_layer_stderr"
N_USED_COLUMN = "n_samples_used"

COLUMN_DOCS: dict[str, tuple[str, str]] = {
    "mlp_id": ("int32", "Position of the MLP in the whole dataset, from 0 (stable across sliced and merged bakes)."),
    "mlp_name": ("string", "A readable label such as `mary-moore`, derived deterministically from the seeds; "
                           "unique within one bake."),
    "mlp_seed": ("int64", "The MLP's input seed. Weights, inputs and the estimator seed (`MLP.seed`) are all "
                          "derived from it."),
    "weights": ("float32[depth, width, width]", "Layer matrices `W_1 … W_depth`, indexed (input, output)."),
    "all_layer_means": ("float32[depth, width]", "Ground truth: row `l-1` is the Monte-Carlo estimate of the mean "
                                                 "of every neuron's output at layer `l`."),
    "final_means": ("float32[width]", "The last row of `all_layer_means`, stored separately because scoring uses it."),
    "avg_variance": ("float64", "Mean over output neurons of the final layer's activation variance "
                                "(definition below)."),
    "sampling_budget_breakdown": ("string", "JSON: FLOP accounting of the bake for this row (total, per operation, "
                                            "wall time). Provenance only; it is unrelated to an estimator's budget."),
    STDERR_COLUMN: ("float32[depth, width]", "The standard error of every entry of `all_layer_means`, by the "
                                             "dataset's estimator (below)."),
    N_USED_COLUMN: ("int64", "The samples this MLP used: the count its own pilot planned for the target standard "
                             "error, at most the cap `n_samples`."),
}
"""Each column's type and meaning: the one column schema. The card (``format.card``) and docs/format.md
show it; ``hf_features`` (and from it ``make_features`` and the writer's Arrow schema) reads its types:
a dtype, then ``[width]`` for a list, ``[depth, width]`` or ``[depth, width, width]`` for an array."""


def column_type(name: str, width: int, depth: int) -> tuple[str, list[int]]:
    """``(dtype, shape)`` of column ``name`` at this width and depth (``shape`` [] for a scalar)."""
    dtype, _, dims = COLUMN_DOCS[name][0].partition("[")
    return dtype, [{"depth": depth, "width": width}[d.strip()] for d in dims.rstrip("]").split(",")] if dims else []


def hf_features(width: int, depth: int, columns: tuple[str, ...] = COLUMNS) -> dict[str, Any]:
    """The ``huggingface`` features of ``columns``, as ``datasets`` (>= 4) writes them: key order
    matters, it is the text in every shard's schema metadata."""
    out: dict[str, Any] = {}
    for name in columns:
        dtype, shape = column_type(name, width, depth)
        value = {"dtype": dtype, "_type": "Value"}
        out[name] = (value if not shape else {"feature": value, "length": shape[0], "_type": "List"} if len(shape) == 1
                     else {"shape": shape, "dtype": dtype, "_type": f"Array{len(shape)}D"})
    return out


def columns_for(md: dict[str, Any]) -> tuple[str, ...]:
    """The columns a dataset with metadata ``md`` holds: the reference's eight, then ours."""
    extra = (STDERR_COLUMN,) if isinstance(md.get("estimator"), dict) else ()
    if isinstance(md.get("target_stderr"), dict):
        extra += (N_USED_COLUMN,)
    return COLUMNS + extra

# Ours: the completion marker, the digest of the identity of the plan that made the dataset (a bake's,
# a merge's or a combine's: format/finished.py). Absent from 0.16 and earlier 0.17 datasets.
PLAN_DIGEST = "plan_digest"
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")  # a file checksum's form too (checksums)

# whestbench 0.16's rule: lowercase words joined by single hyphens.
NAME_RE = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


_NAME_ADVICE = {"split": "use lowercase letters and digits, starting with a letter (for example 'public', 'holdout', "
                         "'round1').",
                "config": "use lowercase letters, digits and single hyphens, starting with a letter (for example "
                          "'default', 'holdout')."}


def check_name(name: object, what: str = "split", *, stored: bool = False) -> str:
    """Return ``name`` if it is a usable split or config name, else raise InvalidDatasetError: the one
    name check, for flags, inputs and metadata alike.

    Guards against names the ``datasets`` library cannot load, uppercase, and path tricks (``..``,
    ``/``) that would escape the dataset directory. A split name given to whestbench has no hyphen
    (``datasets`` wants ``\\w+``, whestbench 0.16 truncates at it); one ``stored`` in metadata may.
    """
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise InvalidDatasetError(f"{what} name {name!r} is invalid:", fix=_NAME_ADVICE[what])
    if what == "split" and not stored and "-" in name:
        raise InvalidDatasetError(f"split name {name!r} contains a hyphen, which the `datasets` library cannot load "
                                  "(and whestbench 0.16 truncates at the hyphen);",
                                  fix=f"use {name.replace('-', '')!r} instead.")
    return name


def make_features(width: int, depth: int, columns: tuple[str, ...] = COLUMNS):
    """HF ``Features`` of ``columns`` (the reference's eight by default, with the exact types
    whestbench 0.16 writes; ``all_layer_stderr`` is typed as ``all_layer_means``)."""
    Features = import_hub("datasets").Features

    return Features.from_dict(hf_features(width, depth, columns))


@dataclass(frozen=True)
class DatasetMeta:
    """A read-only view of ``metadata.json``: the one place that tells a multi-split dataset (a
    ``splits`` object) from a single-split one and finds a split's keys. ``validated`` goes
    through ``validate_metadata``; ``of`` wraps what a caller has and never raises (metadata that is
    not an object answers empty). The dict is neither copied nor changed."""

    md: Mapping[str, Any]

    @classmethod
    def of(cls, md: Any) -> DatasetMeta:
        return md if isinstance(md, DatasetMeta) else cls(md if isinstance(md, Mapping) else {})

    @classmethod
    def validated(cls, md: Any, *, allow_partial: bool = False) -> DatasetMeta:
        validate_metadata(md, allow_partial=allow_partial)
        return cls(md)

    @property
    def is_multi(self) -> bool:
        return isinstance(self.md.get("splits"), dict)

    @property
    def blocks(self) -> dict[str, Any]:
        """The ``splits`` object (name -> entry, as written); ``{}`` for a single-split dataset."""
        return self.md["splits"] if self.is_multi else {}

    @property
    def splits(self) -> list[str]:
        """The split names in metadata order; a single-split dataset without ``split`` is ``public``."""
        split = self.md.get("split")
        return list(self.blocks) if self.is_multi else [split if isinstance(split, str) else DEFAULT_SPLIT]

    def block(self, split: str) -> Any:
        """Where ``split``'s own keys are: its entry in ``splits`` (None if absent), or the top level."""
        return self.blocks.get(split) if self.is_multi else self.md

    def n_mlps(self, split: str) -> Any:
        """The rows ``split`` declares (as written; None when its block has no ``n_mlps``)."""
        block = self.block(split)
        return block.get("n_mlps") if isinstance(block, Mapping) else None

    def entry(self, split: str) -> dict[str, Any]:
        """``split`` as a single-split dataset's metadata (a deep copy): the top level without
        ``splits``, the split's entry over it."""
        out = {k: copy.deepcopy(v) for k, v in self.md.items() if k != "splits"}
        out.update(copy.deepcopy(self.md["splits"][split]) if self.is_multi else {})
        return out

    def sampler(self, split: str) -> dict[str, Any]:
        """The sampler block that applies to ``split`` (combine-splits keeps it per split); {} when none
        is recorded (whestbench 0.16)."""
        return self.entry(split).get("sampler") or {}

    def declared_rows(self, split: str) -> tuple[int, int, Any]:
        """``(start, end, n_mlps)``: the mlp_id range ``split`` must hold (a partial's ``mlp_range``)."""
        n, rng = self.n_mlps(split), self.md.get("mlp_range")
        if self.md.get("is_partial") and isinstance(rng, list) and len(rng) == 2 and all(isinstance(v, int) for v in rng):
            return rng[0], rng[1], n
        return 0, n if isinstance(n, int) else -1, n

    @property
    def estimator(self) -> dict[str, Any]:
        """The ``estimator`` block as recorded, ``{}`` when there is none (``Estimation.from_metadata``
        reads it typed, once the metadata is validated)."""
        est = self.md.get("estimator")
        return est if isinstance(est, dict) else {}

    @property
    def columns(self) -> tuple[str, ...]:
        return columns_for(self.md)


def protocol_version(md: dict[str, Any]) -> str:
    sp = md.get("seed_protocol") or {}
    return str(sp.get("version", "2.0")) if isinstance(sp, dict) else "2.0"


def infer_sampler(md: dict[str, Any]) -> str:
    """The sampler that drew a dataset's inputs; whestbench 0.16 datasets do not record it.

    0.16's CPU path ("flopscope") is our pcg64 sampler; its torch path drew with ``torch.randn``.
    combine-splits keeps the block per split (one backend, so one sampler): a split's names it.
    """
    blocks = [md.get("sampler"), *(e.get("sampler") for e in DatasetMeta.of(md).blocks.values() if isinstance(e, dict))]
    for s in blocks:
        if isinstance(s, dict) and isinstance(s.get("name"), str):
            return s["name"]
    if md.get("backend") == "torch":
        return "torch-randn"
    return "pcg64"


_refuse = partial(refuse_if, fix=REDO)  # a rule of the layout: its breach is a damaged dataset


def validate_metadata(md: Any, *, allow_partial: bool = False) -> None:
    """Raise InvalidDatasetError naming the first field at fault; return None if ``md`` is valid."""
    _refuse(not isinstance(md, dict), "metadata.json must hold a JSON object.")
    _refuse("schema_version" not in md,
            "metadata is missing 'schema_version'; this is not a WhestBench schema 3.0 dataset.")
    refuse_if(md["schema_version"] != SCHEMA_VERSION, f"schema_version {md['schema_version']!r} is not supported "
              f"(expected {SCHEMA_VERSION!r});", fix="re-bake the dataset with this version of whestbench.")
    sp = md.get("seed_protocol")
    name, version = (sp.get("name"), sp.get("version")) if isinstance(sp, dict) else (None, None)
    _refuse(not is_one_of((name, version), PROTOCOLS),
            f"unknown seed_protocol name={show_value(name, max_len=60)} / version={show_value(version, max_len=60)}.")
    if version == "4.0":
        src = sp.get("salt_source")
        _refuse(src not in ("metadata", "env"), "seed_protocol 4.0 needs salt_source 'metadata' or 'env'.")
        _refuse(src == "metadata" and not (isinstance(sp.get("salt"), str) and sp.get("salt")),
                "seed_protocol 4.0 with salt_source 'metadata' needs a hex 'salt'.")
        _refuse(src == "env" and "salt" in sp, "seed_protocol 4.0 with salt_source 'env' must not store a 'salt'.")
        _refuse("salt_digest" in sp and not isinstance(sp["salt_digest"], str),
                "seed_protocol salt_digest must be a string.")
        _refuse(src == "env" and "salt_digest" not in sp,
                "seed_protocol 4.0 with salt_source 'env' needs a salt_digest.")
    _validate_recipe(md)
    _refuse(PLAN_DIGEST in md and not (isinstance(md[PLAN_DIGEST], str) and DIGEST_RE.match(md[PLAN_DIGEST])),
            f"metadata '{PLAN_DIGEST}' is {md.get(PLAN_DIGEST)!r}; expected 'sha256:' and 64 lowercase hex digits (the "
            "completion marker a bake, merge or combine writes).")
    _check_device_check(md, md, where=DEVICE_CHECK_KEY)
    check_card_block(md.get(CARD_KEY))
    _validate_bake_command(md, where="bake_command")
    for key in ("split", "config"):
        if key in md:
            check_name(md[key], key, stored=True)
    if "splits" in md:
        return _validate_multi(md, version)
    _refuse("n_mlps" not in md, "metadata is missing 'n_mlps'.")
    _check_seed_key(md, version, where="metadata")
    refuse_if(md.get("is_partial") and not allow_partial, f"this is a partial dataset (mlp_range="
              f"{md.get('mlp_range')}, total_n_mlps={md.get('total_n_mlps')}).",
              fix="Run `whest dataset merge <partials> --output <dir>` first.")


def _check_seed_key(d: dict, version: str, *, where: str) -> None:
    _refuse(version == "2.0" and "seed" not in d, f"seed_protocol 2.0 requires a 'seed' in {where}.")
    _refuse(version != "2.0" and "seed" in d,
            f"'seed' is not allowed in {where} under seed_protocol {version} (seeds live in mlp_seed).")


def _validate_multi(md: dict, version: str) -> None:
    splits = md["splits"]
    _refuse(not isinstance(splits, dict) or not splits, "metadata 'splits' must be a non-empty object.")
    _refuse(md.get("is_partial"), "a multi-split dataset cannot be partial (is_partial).")
    _refuse("n_mlps" in md, "a multi-split dataset keeps n_mlps per split, not at the top level.")
    _refuse("seed" in md, "a multi-split dataset must not have a top-level 'seed'.")
    ds = md.get("default_split")
    if ds is not None and (not isinstance(ds, str) or ds not in splits):
        raise InvalidDatasetError(f"default_split {ds!r} is not one of the splits {sorted(splits)}.", fix=REDO)
    prepared = md.get("prepared_splits")
    if prepared is not None:
        _refuse(not isinstance(prepared, dict) or not set(prepared) <= set(splits),
                "prepared_splits must map existing split names to entries.")
        for name, entry in prepared.items():
            _refuse(not isinstance(entry, dict) or not isinstance(entry.get("path"), str),
                    f"prepared_splits[{name!r}] needs a string 'path'.")
            _refuse("format" in entry and not isinstance(entry["format"], str),
                    f"prepared_splits[{name!r}].format must be a string.")
            _refuse(".." in entry["path"].split("/") or entry["path"].startswith("/"),
                    f"prepared_splits[{name!r}].path {entry['path']!r} escapes the dataset directory.")
    for name, entry in splits.items():
        check_name(name, "split", stored=True)
        _refuse(not isinstance(entry, dict), f"splits[{name!r}] must be an object.")
        _refuse("n_mlps" not in entry, f"splits[{name!r}] is missing 'n_mlps'.")
        if "config" in entry:
            check_name(entry["config"], "config", stored=True)
        _check_seed_key(entry, version, where=f"splits[{name!r}]")
        _check_device_check(entry, md, where=f"splits[{name!r}].{DEVICE_CHECK_KEY}")
        _validate_bake_command(entry, where=f"splits[{name!r}].bake_command")


def _validate_bake_command(d: dict, *, where: str) -> None:
    """A recorded ``bake_command`` is published as the re-bake recipe: it must be ``whest dataset bake``
    with the bake's own flags only (``format/command.parse_bake``)."""
    if "bake_command" in d and recorded.parse_bake(d["bake_command"]) is None:
        raise bad_value(InvalidDatasetError, f"metadata {where}", d["bake_command"], "is not a `whest dataset bake` "
                        "command with known flags only", max_len=80, fix="(was metadata.json edited? restore the "
                        "command the bake recorded, or delete the key: the card then rebuilds the recipe from the "
                        "metadata).")


def _check_device_check(d: dict, md: dict, *, where: str) -> None:
    """``d``'s ``device_check`` block (the top level's or a split's) by ``card_rules.check_device_check``,
    on a torch bake only, against ``d``'s recorded bake command (else the top level's)."""
    block = d.get(DEVICE_CHECK_KEY)
    if block is None:
        return
    refuse_if(md.get("backend") != BACKEND_TORCH, f"metadata {where} is present but backend is "
              f"{show_value(md.get('backend'), max_len=60)}: only torch bakes check their device")
    command = d.get("bake_command")
    check_device_check(block, where=where, command=command if command is not None else md.get("bake_command"))


DEVICE_CHECK_KEY = "device_check"
"""A torch bake's record of its device check (``work/device_check.DeviceCheck.record``)."""


def device_check_state(block: Any) -> str | None:
    """``"passed"``, ``"accepted"`` (a failed check the bake was told to accept), ``"skipped"``, or None
    when there is no block. For a block ``validate_metadata`` has passed."""
    if not isinstance(block, dict):
        return None
    if block.get("skipped"):
        return "skipped"
    return "accepted" if block.get("accepted") else "passed"


MAX_SAMPLES = 2**63 - 1  # counts and metadata are int64; philox counters are 64-bit
MAX_MLPS = 2**31 - 1  # mlp_id is an int32 column (schema 3.0)


def is_positive_int(v: Any, limit: float = MAX_SAMPLES) -> bool:
    """An int (not a bool) in ``1..limit``."""
    return is_int(v, 1, limit)


def positive_int(md: Mapping[str, Any], key: str) -> int | None:
    """``md[key]`` when it is a positive int (not a bool), else None."""
    v = md.get(key)
    return v if is_positive_int(v) else None


def check_positive_int(flag: str, value: Any) -> None:
    """A flag's value must be a positive int (of any size: the caller says its own limit); else the
    one-line UsageError."""
    if not is_positive_int(value, float("inf")):
        raise UsageError(f"{flag} must be a positive integer; got {value!r}.", fix=f"Pass {flag} 1 or more.")


def _validate_recipe(md: dict) -> None:
    """The keys that say how the numbers were made: the format, the shape, the sampler, the estimator
    and a target. Every reader (load, verify, push, merge, combine, inspect) calls this through
    ``validate_metadata``, so a dataset one of them refuses the others refuse with the same words."""
    _refuse_value("format" in md and md["format"] != FORMAT, "format", md.get("format"), f"is not {FORMAT!r}")
    for key, limit in (("width", MAX_MLPS), ("depth", MAX_MLPS), ("n_samples", MAX_SAMPLES), ("n_mlps", MAX_MLPS),
                       ("total_n_mlps", MAX_MLPS)):
        _refuse_value(key in md and not is_positive_int(md[key], limit), key, md.get(key),
                      f"is not a positive integer (at most {limit:,})")
    samplers = [(md.get("sampler"), "sampler")] if "sampler" in md else []
    for name, entry in DatasetMeta.of(md).blocks.items():
        entry = entry if isinstance(entry, dict) else {}
        _refuse_value("n_mlps" in entry and not is_positive_int(entry["n_mlps"], MAX_MLPS), f"splits[{name!r}].n_mlps",
                      entry.get("n_mlps"), "is not a positive integer")
        if "sampler" in entry:
            samplers.append((entry["sampler"], f"splits[{name!r}].sampler"))
    if md.get("is_partial"):
        rng, total = md.get("mlp_range"), md.get("total_n_mlps")
        refuse_if(not (isinstance(rng, list) and len(rng) == 2 and all(is_int(v) for v in rng)
                       and is_positive_int(total, MAX_MLPS) and 0 <= rng[0] < rng[1] <= total),
                  f"metadata of a partial needs mlp_range [start, end) within total_n_mlps; got mlp_range "
                  f"{show_value(rng, max_len=60)}, total_n_mlps {show_value(total, max_len=60)}")
    for sampler, where in samplers:
        _check_sampler(sampler, where, md)
    refuse_if("estimator" in md and not samplers, "metadata has an estimator block but no sampler block")
    if "estimator" in md:
        est = md["estimator"]
        name, version = (est.get("name"), est.get("version")) if isinstance(est, dict) else (est, None)
        refuse_if(name not in ESTIMATORS or version != ESTIMATOR_VERSION, f"metadata estimator "
                  f"{show_value(name, max_len=60)} version {show_value(version, max_len=60)} is not one this "
                  f"whestbench knows ({', '.join(ESTIMATORS)} version {ESTIMATOR_VERSION})")
        if is_cv_block(est):
            want = {_cv_batch(s) for s, _ in samplers}
            _refuse_value(not is_one_of(est.get("batch_samples"), want) or None in want, "estimator batch_samples",
                          est.get("batch_samples"),
                          f"is not what its sampler gives ({', '.join(map(str, sorted(w for w in want if w)))})")
            _refuse_value("pilot_samples" in est and est["pilot_samples"] != PILOT_SAMPLES, "estimator pilot_samples",
                          est.get("pilot_samples"), f"is not {PILOT_SAMPLES}")
    if "target_stderr" in md:
        t = md["target_stderr"]
        value = t.get("value") if isinstance(t, dict) else None
        _refuse_value(not (is_positive_number(value) and t.get("layer") in ("last", "all")), "target_stderr", t,
                      "needs a positive finite value and layer 'last' or 'all'")
        refuse_if("estimator" not in md, "metadata has a target_stderr but no estimator block")
        refuse_if("rule" not in t,
                  "metadata target_stderr has no 'rule', so nothing says how each MLP's sample count was decided",
                  fix=f"{EDITED[:-1]}; a target bake of whestbench 0.17.0 (its first target bakes) wrote none: add "
                      f"\"rule\": \"{SEQUENTIAL_RULE}\" to its target_stderr block and verify it again.")
        _refuse_value(t["rule"] not in (TARGET_RULE, CV_TARGET_RULE, SEQUENTIAL_RULE), "target_stderr rule", t["rule"],
                      f"is not {TARGET_RULE!r}, {CV_TARGET_RULE!r} (or {SEQUENTIAL_RULE!r}, whestbench 0.17.0's)")
        est = md["estimator"]
        refuse_if(t["rule"] == CV_TARGET_RULE and (not is_cv_block(est)
                                                   or t.get("exceed_probability") != EXCEED_PROBABILITY),
                  f"metadata target_stderr rule {CV_TARGET_RULE!r} needs the control-variate estimator and "
                  f"exceed_probability {EXCEED_PROBABILITY}; got "
                  f"{show_value(est.get('name') if isinstance(est, dict) else est, max_len=40)} and "
                  f"{show_value(t.get('exceed_probability'), max_len=40)}")
        steps = {s.get("block_size") for s, _ in samplers if isinstance(s, dict)}
        _refuse_value("step_samples" in t and not is_one_of(t["step_samples"], steps), "target_stderr step_samples",
                      t.get("step_samples"), "is not the sampler's block_size")


def _refuse_value(bad: Any, what: str, value: Any, rest: str) -> None:
    """``errors.bad_value``'s refusal of metadata ``what`` when ``bad``: a recorded key a bake wrote."""
    if bad:
        raise bad_value(InvalidDatasetError, f"metadata {what}", value, rest, fix=EDITED)


_SAMPLERS = {pcg64.SAMPLER_NAME: pcg64.SAMPLER_VERSION, philox.SAMPLER_NAME: philox.SAMPLER_VERSION}


def _check_sampler(sampler: Any, where: str, md: dict) -> None:
    name = sampler.get("name") if isinstance(sampler, dict) else sampler
    _refuse_value(not isinstance(sampler, dict) or not is_one_of(name, _SAMPLERS), where, name,
                  f"is not one this whestbench knows ({', '.join(sorted(_SAMPLERS))})")
    _refuse_value(sampler.get("version") != _SAMPLERS[name], f"{where} {name} version", sampler.get("version"),
                  f"is not {_SAMPLERS[name]!r}")
    block, backend = sampler.get("block_size"), md.get("backend")
    _refuse_value(not is_positive_int(block), f"{where} block_size", block, "is not a positive integer")
    if name == "pcg64" and is_positive_int(md.get("width")):
        _refuse_value(block != chunk_rows(md["width"]), f"{where} block_size", block,
                      f"is not the pcg64 chunk of width {md['width']} ({chunk_rows(md['width'])})")
    _refuse_value(name == "philox" and block & (block - 1), f"{where} block_size", block,
                  "is not a power of two (philox)")
    _refuse_value((name == "philox") != (backend == BACKEND_TORCH), f"{where} {name} does not go with backend", backend,
                  "(philox is the torch backend's sampler, pcg64 the CPU path's)")


def _cv_batch(sampler: Any) -> int | None:
    """The control-variate batch a sampler block implies: the pcg64 chunk, or min(CV_BATCH, block)."""
    if not isinstance(sampler, dict) or not is_positive_int(sampler.get("block_size")):
        return None
    block = sampler["block_size"]
    return block if sampler.get("name") == "pcg64" else min(CV_BATCH, block)
