"""Schema 3.0: constants, HF features, name rules and ``validate_metadata``.

The layout and every key are format-compatible with whestbench 0.16 in both directions; our
additions (``sampler``, ``checksums``, ``bake_command``, ``seed_list_digest``, ...) are optional
keys that its loader ignores.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any, Mapping

from whestbench.compute.estimation import (CV_TARGET_RULE, ESTIMATOR_VERSION, ESTIMATORS, EXCEED_PROBABILITY,
                                           PILOT_SAMPLES, SEQUENTIAL_RULE, TARGET_RULE, is_cv_block)
from whestbench.errors import InvalidDatasetError, UsageError
from whestbench.format import command as recorded
from whestbench.text import scrub, show_value
from whestbench.values import is_int, is_one_of, is_positive_number
from whestbench.hubenv import import_hub

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
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")  # a file checksum's form too (reader)

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
        raise InvalidDatasetError(f"{what} name {name!r} is invalid: {_NAME_ADVICE[what]}")
    if what == "split" and not stored and "-" in name:
        raise InvalidDatasetError(
            f"split name {name!r} contains a hyphen, which the `datasets` library cannot load "
            f"(and whestbench 0.16 truncates at the hyphen); use {name.replace('-', '')!r} instead."
        )
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


def validate_metadata(md: Any, *, allow_partial: bool = False) -> None:
    """Raise InvalidDatasetError naming the first field at fault; return None if ``md`` is valid."""
    if not isinstance(md, dict):
        raise InvalidDatasetError("metadata.json must hold a JSON object.")
    if "schema_version" not in md:
        raise InvalidDatasetError(
            "metadata is missing 'schema_version'; this is not a WhestBench schema 3.0 dataset."
        )
    if md["schema_version"] != SCHEMA_VERSION:
        raise InvalidDatasetError(
            f"schema_version {md['schema_version']!r} is not supported (expected {SCHEMA_VERSION!r}); "
            "re-bake the dataset with this version of whestbench."
        )
    sp = md.get("seed_protocol")
    name, version = (sp.get("name"), sp.get("version")) if isinstance(sp, dict) else (None, None)
    if not is_one_of((name, version), PROTOCOLS):
        raise InvalidDatasetError(f"unknown seed_protocol name={show_value(name, max_len=60)} / "
                                  f"version={show_value(version, max_len=60)}.")
    if version == "4.0":
        src = sp.get("salt_source")
        if src not in ("metadata", "env"):
            raise InvalidDatasetError("seed_protocol 4.0 needs salt_source 'metadata' or 'env'.")
        if src == "metadata" and not (isinstance(sp.get("salt"), str) and sp.get("salt")):
            raise InvalidDatasetError("seed_protocol 4.0 with salt_source 'metadata' needs a hex 'salt'.")
        if src == "env" and "salt" in sp:
            raise InvalidDatasetError("seed_protocol 4.0 with salt_source 'env' must not store a 'salt'.")
        if "salt_digest" in sp and not isinstance(sp["salt_digest"], str):
            raise InvalidDatasetError("seed_protocol salt_digest must be a string.")
        if src == "env" and "salt_digest" not in sp:
            raise InvalidDatasetError("seed_protocol 4.0 with salt_source 'env' needs a salt_digest.")
    _validate_recipe(md)
    if PLAN_DIGEST in md and not (isinstance(md[PLAN_DIGEST], str) and DIGEST_RE.match(md[PLAN_DIGEST])):
        raise InvalidDatasetError(f"metadata '{PLAN_DIGEST}' is {md[PLAN_DIGEST]!r}; expected 'sha256:' and 64 "
                                  "lowercase hex digits (the completion marker a bake, merge or combine writes).")
    _validate_device_check(md.get(DEVICE_CHECK_KEY), md, where=DEVICE_CHECK_KEY)
    _validate_card(md.get(CARD_KEY))
    _validate_bake_command(md, where="bake_command")
    if "split" in md:
        check_name(md["split"], "split", stored=True)
    if "config" in md:
        check_name(md["config"], "config", stored=True)
    if "splits" in md:
        _validate_multi(md, version)
        return
    if "n_mlps" not in md:
        raise InvalidDatasetError("metadata is missing 'n_mlps'.")
    _check_seed_key(md, version, where="metadata")
    if md.get("is_partial") and not allow_partial:
        raise InvalidDatasetError(
            f"this is a partial dataset (mlp_range={md.get('mlp_range')}, "
            f"total_n_mlps={md.get('total_n_mlps')}). Run `whest dataset merge <partials> --output <dir>` first."
        )


def _check_seed_key(d: dict, version: str, *, where: str) -> None:
    if version == "2.0" and "seed" not in d:
        raise InvalidDatasetError(f"seed_protocol 2.0 requires a 'seed' in {where}.")
    if version != "2.0" and "seed" in d:
        raise InvalidDatasetError(
            f"'seed' is not allowed in {where} under seed_protocol {version} (seeds live in mlp_seed)."
        )


def _validate_multi(md: dict, version: str) -> None:
    splits = md["splits"]
    if not isinstance(splits, dict) or not splits:
        raise InvalidDatasetError("metadata 'splits' must be a non-empty object.")
    if md.get("is_partial"):
        raise InvalidDatasetError("a multi-split dataset cannot be partial (is_partial).")
    if "n_mlps" in md:
        raise InvalidDatasetError("a multi-split dataset keeps n_mlps per split, not at the top level.")
    if "seed" in md:
        raise InvalidDatasetError("a multi-split dataset must not have a top-level 'seed'.")
    ds = md.get("default_split")
    if ds is not None and (not isinstance(ds, str) or ds not in splits):
        raise InvalidDatasetError(f"default_split {ds!r} is not one of the splits {sorted(splits)}.")
    prepared = md.get("prepared_splits")
    if prepared is not None:
        if not isinstance(prepared, dict) or not set(prepared) <= set(splits):
            raise InvalidDatasetError("prepared_splits must map existing split names to entries.")
        for name, entry in prepared.items():
            if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
                raise InvalidDatasetError(f"prepared_splits[{name!r}] needs a string 'path'.")
            if "format" in entry and not isinstance(entry["format"], str):
                raise InvalidDatasetError(f"prepared_splits[{name!r}].format must be a string.")
            if ".." in entry["path"].split("/") or entry["path"].startswith("/"):
                raise InvalidDatasetError(
                    f"prepared_splits[{name!r}].path {entry['path']!r} escapes the dataset directory."
                )
    for name, entry in splits.items():
        check_name(name, "split", stored=True)
        if not isinstance(entry, dict):
            raise InvalidDatasetError(f"splits[{name!r}] must be an object.")
        if "n_mlps" not in entry:
            raise InvalidDatasetError(f"splits[{name!r}] is missing 'n_mlps'.")
        if "config" in entry:
            check_name(entry["config"], "config", stored=True)
        _check_seed_key(entry, version, where=f"splits[{name!r}]")
        _validate_device_check(entry.get(DEVICE_CHECK_KEY), md, where=f"splits[{name!r}].{DEVICE_CHECK_KEY}",
                               command=entry.get("bake_command"))
        _validate_bake_command(entry, where=f"splits[{name!r}].bake_command")


def _validate_bake_command(d: dict, *, where: str) -> None:
    """A recorded ``bake_command`` is published as the re-bake recipe: it must be ``whest dataset bake``
    with the bake's own flags only (``format/command.parse_bake``)."""
    if "bake_command" in d and recorded.parse_bake(d["bake_command"]) is None:
        raise InvalidDatasetError(
            f"metadata {where} {show_value(d['bake_command'], max_len=80)} is not a `whest dataset bake` command "
            "with known flags only (was metadata.json edited? restore the command the bake recorded, or delete "
            "the key: the card then rebuilds the recipe from the metadata).")


CARD_KEY = "card"
"""metadata.json's optional ``card`` block: the card fields (``CARD_FIELDS``) a bake was given by
``--card FILE`` and the card flags. ``check_card`` holds the rules the flags, a card file and this
block share, so ``validate_metadata`` refuses a block the flags would refuse."""
CARD_FIELDS = ("pretty_name", "license", "homepage", "repository", "authors", "citation", "badges", "preset")
"""The keys of a card file (``--card FILE``) and of metadata's ``card`` block."""
CARD_PRESETS = {"whestbench-organisers": "the WhestBench organisers' card: the ARC White-Box Estimation Challenge "
                                         "title and page, the AIcrowd/whestbench repository, the ARC/AIcrowd citation"}
"""Built-in cards, chosen by ``--card NAME`` (or ``preset: NAME`` in a card file) and recorded as the
``preset`` field; without one the card is neutral (it credits no organisation)."""
PRESET_OWNS = ("repository", "authors", "citation", "badges")
"""The fields a preset brings itself: given with a preset, they are refused (the title, license and
homepage may still be set over it)."""


def combine_card(base: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """``given`` card fields over ``base``'s: a preset given displaces the fields it owns
    (``PRESET_OWNS``), and any of those fields given displaces a preset, so the result is a card
    ``check_card`` accepts when both parts are."""
    out = dict(base)
    if "preset" in given:
        for key in PRESET_OWNS:
            out.pop(key, None)
    elif any(key in given for key in PRESET_OWNS):
        out.pop("preset", None)
    out.update(given)
    return out
HUB_LICENSES = frozenset((
    "apache-2.0", "mit", "openrail", "bigscience-openrail-m", "creativeml-openrail-m", "bigscience-bloom-rail-1.0",
    "bigcode-openrail-m", "afl-3.0", "artistic-2.0", "bsl-1.0", "bsd", "bsd-2-clause", "bsd-3-clause",
    "bsd-3-clause-clear", "c-uda", "cc", "cc0-1.0", "cc-by-2.0", "cc-by-2.5", "cc-by-3.0", "cc-by-4.0",
    "cc-by-sa-3.0", "cc-by-sa-4.0", "cc-by-nc-2.0", "cc-by-nc-3.0", "cc-by-nc-4.0", "cc-by-nd-4.0",
    "cc-by-nc-nd-3.0", "cc-by-nc-nd-4.0", "cc-by-nc-sa-2.0", "cc-by-nc-sa-3.0", "cc-by-nc-sa-4.0",
    "cdla-sharing-1.0", "cdla-permissive-1.0", "cdla-permissive-2.0", "wtfpl", "ecl-2.0", "epl-1.0", "epl-2.0",
    "etalab-2.0", "eupl-1.1", "eupl-1.2", "agpl-3.0", "gfdl", "gpl", "gpl-2.0", "gpl-3.0", "lgpl", "lgpl-2.1",
    "lgpl-3.0", "isc", "h-research", "intel-research", "lppl-1.3c", "ms-pl", "apple-ascl", "apple-amlr", "mpl-2.0",
    "odc-by", "odbl", "openrail++", "osl-3.0", "postgresql", "ofl-1.1", "ncsa", "unlicense", "zlib", "pddl",
    "lgpl-lr", "deepfloyd-if-license", "fair-noncommercial-research-license", "llama2", "llama3", "llama3.1",
    "llama3.2", "llama3.3", "llama4", "gemma", "unknown", "other",
))
"""The Hugging Face Hub's license identifiers (huggingface.co/docs/hub/repositories-licenses, kept
here so a card is checked offline): any other licence is ``other``, named in the card's prose."""
HOMEPAGE_RE = re.compile(r"^https?://[^\s<>\"'`()\[\]{}\\|^]+$")
_BIDI = {0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}


def hidden_char(c: str) -> bool:
    """A control character (C0 with newline and tab, DEL, C1) or a bidirectional mark/override/isolate:
    text that does not show what it says (U+202E reverses what follows it)."""
    o = ord(c)
    return o < 32 or 0x7f <= o < 0xa0 or o in _BIDI


def _is_line(value: Any, limit: int) -> bool:
    return isinstance(value, str) and 0 < len(value.strip()) <= limit and not any(hidden_char(c) for c in value)


def _is_url(value: Any) -> bool:
    """A plain http(s) URL without credentials: a ``user:pass@`` (or a token as the user) would be
    published in the card for anyone to read."""
    return (isinstance(value, str) and len(value) <= 500 and bool(HOMEPAGE_RE.match(value))
            and "@" not in value.split("://", 1)[1].split("/", 1)[0])


def _credential(value: Any) -> bool:
    """Whether a card value (a string, or the strings in a list or mapping) holds what ``text.scrub`` masks
    as a credential: a card is published, and ``push --dry-run`` shows it scrubbed, so it must need no
    scrubbing to show exactly what push sends."""
    if isinstance(value, str):
        return scrub(value) != value
    if isinstance(value, dict):
        return any(_credential(v) for v in value.values())
    return isinstance(value, list) and any(_credential(v) for v in value)


def check_card(data: dict[str, Any], where: str | None) -> dict[str, Any]:
    """Each card field of ``data`` checked, UsageError naming the field: ``where`` is the card file
    (``--card PATH``), ``"metadata card"`` for the metadata block, or None for the flags."""
    def name(key: str) -> str:
        if where is None:
            return "--" + key.replace("_", "-")
        return f"{where}.{key}" if where.startswith("metadata") else f"{where}: {key}"

    def bad(key: str, want: str, value: Any) -> UsageError:
        return UsageError(f"{name(key)} must be {want}; got {show_value(value, max_len=120)}.")

    unknown = [k for k in data if k not in CARD_FIELDS]
    if unknown:
        raise UsageError(f"{where}: unknown field {show_value(unknown[0], max_len=60)}; a card's fields are "
                         f"{', '.join(CARD_FIELDS)}.")
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key == "preset":
            continue  # below, with the fields it rules out
        if _credential(value):
            raise UsageError(f"{name(key)} holds what looks like a credential (a token, a password in a URL, a "
                             "credential-named query parameter); a card is published for anyone to read: leave "
                             "it out.")
        if key == "pretty_name":
            if not _is_line(value, 200):
                raise bad(key, "one line of 1 to 200 printable characters, without control or "
                               "bidirectional-override characters", value)
            out[key] = value.strip()
        elif key == "license":
            if not is_one_of(value, HUB_LICENSES):
                raise bad(key, "a Hugging Face Hub license id such as cc-by-4.0, mit, apache-2.0 or cc0-1.0 ('other' "
                               "for any other licence; the Hub's list: huggingface.co/docs/hub/repositories-licenses)",
                          value)
            out[key] = value
        elif key in ("homepage", "repository"):
            if not _is_url(value):
                raise bad(key, "an http(s) URL without credentials, spaces, quotes, brackets or braces", value)
            out[key] = value
        elif key == "authors":
            if (not isinstance(value, list) or not 1 <= len(value) <= 100
                    or not all(_is_line(a, 200) for a in value)):
                raise bad(key, "a list of 1 to 100 names, each one line of printable characters", value)
            out[key] = [a.strip() for a in value]
        elif key == "citation":
            if (not isinstance(value, str) or not value.strip() or len(value) > 8000 or "```" in value
                    or any(hidden_char(c) and c not in "\n\t" for c in value)):
                raise bad(key, "BibTeX text of at most 8,000 characters (lines and tabs allowed; no other "
                               "control or bidirectional characters, no ```)", value)
            out[key] = value.strip()
        else:  # badges
            if (not isinstance(value, list) or len(value) > 20
                    or not all(isinstance(b, dict) and set(b) == {"label", "url"} and _is_line(b["label"], 60)
                               and _is_url(b["url"]) for b in value)):
                raise bad(key, "a list of at most 20 {label, url} mappings (a label of 1 to 60 printable "
                               "characters, an http(s) URL)", value)
            out[key] = [{"label": b["label"].strip(), "url": b["url"]} for b in value]
    if "preset" in data:
        value = data["preset"]
        if not isinstance(value, str) or value not in CARD_PRESETS:
            raise bad("preset", f"a built-in card ({', '.join(CARD_PRESETS)})", value)
        owned = [k for k in PRESET_OWNS if k in data]
        if owned:
            raise UsageError(f"{name('preset')} {value} brings its own {', '.join(PRESET_OWNS)}; drop "
                             f"{', '.join(repr(k) for k in owned)} or the preset.")
        out["preset"] = value
    return out


_EDITED = "(was metadata.json edited? re-bake, or restore the file the bake wrote)"
"""The advice closing every refusal of a recorded block a bake wrote (recipe, device check)."""


def _validate_card(block: Any) -> None:
    """The metadata ``card`` block, by the rules the card flags and ``--card FILE`` follow."""
    if block is None:
        return
    fix = "(was metadata.json edited? restore it, or delete the key: push's card flags set the published card without it)"
    if not isinstance(block, dict):
        raise InvalidDatasetError(f"metadata {CARD_KEY} must be an object, not {show_value(block, max_len=60)} {fix}.")
    try:
        check_card(block, f"metadata {CARD_KEY}")
    except UsageError as e:
        raise InvalidDatasetError.from_error(e, fix="Was metadata.json edited? Restore it, or delete the key: push's "
                                             "card flags set the published card without it.") from None


DEVICE_CHECK_KEY = "device_check"
"""A torch bake's record of its device check (``work/device_check.DeviceCheck.record``)."""
SKIP_DEVICE_CHECK_FLAG = "--skip-device-check"
ACCEPT_NON_INVARIANT_FLAG = "--accept-non-invariant"


def device_check_state(block: Any) -> str | None:
    """``"passed"``, ``"accepted"`` (a failed check the bake was told to accept), ``"skipped"``, or None
    when there is no block. For a block ``validate_metadata`` has passed."""
    if not isinstance(block, dict):
        return None
    if block.get("skipped"):
        return "skipped"
    return "accepted" if block.get("accepted") else "passed"


def _validate_device_check(block: Any, md: dict, *, where: str, command: Any = None) -> None:
    """The ``device_check`` block says what the bake's device check found, consistently: a verdict
    that agrees with its checks, each of the three checks once, a skip without checks, and only the
    failures the bake may accept (row-invariance, with ``--accept-non-invariant``); a recorded bake
    command must carry the flag a skip or an acceptance needs. Torch bakes only."""
    from whestbench.compute.device_check import BLOCK_SUMS, PHILOX_WORDS, ROW_INVARIANCE

    if block is None:
        return
    fix = _EDITED
    bad = f"metadata {where}"
    if md.get("backend") != BACKEND_TORCH:
        raise InvalidDatasetError(f"{bad} is present but backend is {show_value(md.get('backend'), max_len=60)}: only torch bakes "
                                  f"check their device {fix}.")
    if not isinstance(block, dict):
        raise InvalidDatasetError(f"{bad} must be an object, not {show_value(block, max_len=60)} {fix}.")
    for key in ("passed", "skipped"):
        if not isinstance(block.get(key), bool):
            raise InvalidDatasetError(f"{bad}.{key} must be true or false, not {show_value(block.get(key), max_len=60)} {fix}.")
    checks = block.get("checks", [])
    if not isinstance(checks, list) or not all(
            isinstance(c, dict) and isinstance(c.get("passed"), bool) and isinstance(c.get("name"), str) for c in checks):
        raise InvalidDatasetError(f"{bad}.checks must be a list of {{name, passed: true|false}} objects {fix}.")
    names = [c["name"] for c in checks]
    accepted = block.get("accepted", [])
    if not isinstance(accepted, list) or not all(isinstance(a, str) for a in accepted):
        raise InvalidDatasetError(f"{bad}.accepted must be a list of check names {fix}.")
    if block["skipped"]:
        if block["passed"] or checks or accepted:
            raise InvalidDatasetError(f"{bad} says skipped, so it cannot pass, hold checks or accept any {fix}.")
    else:
        want = (PHILOX_WORDS, BLOCK_SUMS, ROW_INVARIANCE)
        if not names or len(set(names)) != len(names) or not set(names) <= set(want):
            raise InvalidDatasetError(f"{bad}.checks are {show_value(names, max_len=60)}; a device check runs {', '.join(want)}, "
                                      f"each once {fix}.")
        failed = [c["name"] for c in checks if not c["passed"]]
        if block["passed"] != (not failed):
            raise InvalidDatasetError(
                f"{bad}.passed is {str(block['passed']).lower()} but "
                + (f"the check(s) {', '.join(failed)} failed" if failed else "every check passed") + f" {fix}.")
        if sorted(accepted) != sorted(failed) or not set(accepted) <= {ROW_INVARIANCE}:
            raise InvalidDatasetError(
                f"{bad} accepts {accepted or 'no check'} while {failed or 'no check'} failed: a bake accepts only a "
                f"failed {ROW_INVARIANCE} ({ACCEPT_NON_INVARIANT_FLAG}) and refuses every other failure {fix}.")
    argv = recorded.parse(command if command is not None else md.get("bake_command"))
    if argv is not None and argv[:3] == ["whest", "dataset", "bake"]:
        need = SKIP_DEVICE_CHECK_FLAG if block["skipped"] else ACCEPT_NON_INVARIANT_FLAG if accepted else None
        if need is not None and need not in argv:
            raise InvalidDatasetError(f"{bad} says {'skipped' if block['skipped'] else 'accepted'}, but the recorded "
                                      f"bake_command has no {need} {fix}.")


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
        raise UsageError(f"{flag} must be a positive integer; got {value!r}.")


def _validate_recipe(md: dict) -> None:
    """The keys that say how the numbers were made: the format, the shape, the sampler, the estimator
    and a target. Every reader (load, verify, push, merge, combine, inspect) calls this through
    ``validate_metadata``, so a dataset one of them refuses the others refuse with the same words."""
    fix = _EDITED
    if "format" in md and md["format"] != FORMAT:
        raise InvalidDatasetError(f"metadata format {show_value(md['format'], max_len=60)} is not {FORMAT!r} {fix}.")
    for key, limit in (("width", MAX_MLPS), ("depth", MAX_MLPS), ("n_samples", MAX_SAMPLES), ("n_mlps", MAX_MLPS),
                       ("total_n_mlps", MAX_MLPS)):
        if key in md and not is_positive_int(md[key], limit):
            raise InvalidDatasetError(f"metadata {key} {show_value(md[key], max_len=60)} is not a positive integer (at most {limit:,}) {fix}.")
    samplers = [(md.get("sampler"), "sampler")] if "sampler" in md else []
    for name, entry in DatasetMeta.of(md).blocks.items():
        if isinstance(entry, dict) and "n_mlps" in entry and not is_positive_int(entry["n_mlps"], MAX_MLPS):
            raise InvalidDatasetError(f"metadata splits[{name!r}].n_mlps {show_value(entry['n_mlps'], max_len=60)} is not a positive "
                                      f"integer {fix}.")
        if isinstance(entry, dict) and "sampler" in entry:
            samplers.append((entry["sampler"], f"splits[{name!r}].sampler"))
    if md.get("is_partial"):
        rng, total = md.get("mlp_range"), md.get("total_n_mlps")
        if not (isinstance(rng, list) and len(rng) == 2 and all(is_int(v) for v in rng)
                and is_positive_int(total, MAX_MLPS) and 0 <= rng[0] < rng[1] <= total):
            raise InvalidDatasetError(f"metadata of a partial needs mlp_range [start, end) within total_n_mlps; got "
                                      f"mlp_range {show_value(rng, max_len=60)}, total_n_mlps {show_value(total, max_len=60)} {fix}.")
    for sampler, where in samplers:
        _check_sampler(sampler, where, md, fix)
    if "estimator" in md and not samplers:
        raise InvalidDatasetError(f"metadata has an estimator block but no sampler block {fix}.")
    if "estimator" in md:
        est = md["estimator"]
        name, version = (est.get("name"), est.get("version")) if isinstance(est, dict) else (est, None)
        if name not in ESTIMATORS or version != ESTIMATOR_VERSION:
            raise InvalidDatasetError(f"metadata estimator {show_value(name, max_len=60)} version {show_value(version, max_len=60)} is not one this "
                                      f"whestbench knows ({', '.join(ESTIMATORS)} version {ESTIMATOR_VERSION}) {fix}.")
        if is_cv_block(est):
            want = {_cv_batch(s) for s, _ in samplers}
            if not is_one_of(est.get("batch_samples"), want) or None in want:
                raise InvalidDatasetError(f"metadata estimator batch_samples {show_value(est.get('batch_samples'), max_len=60)} is not "
                                          f"what its sampler gives ({', '.join(map(str, sorted(w for w in want if w)))}) {fix}.")
            if "pilot_samples" in est and est["pilot_samples"] != PILOT_SAMPLES:
                raise InvalidDatasetError(f"metadata estimator pilot_samples {show_value(est['pilot_samples'], max_len=60)} is not "
                                          f"{PILOT_SAMPLES} {fix}.")
    if "target_stderr" in md:
        t = md["target_stderr"]
        value = t.get("value") if isinstance(t, dict) else None
        ok = is_positive_number(value) and t.get("layer") in ("last", "all")
        if not ok:
            raise InvalidDatasetError(f"metadata target_stderr {show_value(t, max_len=60)} needs a positive finite value and layer "
                                      f"'last' or 'all' {fix}.")
        if "estimator" not in md:
            raise InvalidDatasetError(f"metadata has a target_stderr but no estimator block {fix}.")
        if "rule" not in t:
            raise InvalidDatasetError(
                f"metadata target_stderr has no 'rule', so nothing says how each MLP's sample count was decided "
                f"{fix}; a target bake of whestbench 0.17.0 (its first target bakes) wrote none: add "
                f"\"rule\": \"{SEQUENTIAL_RULE}\" to its target_stderr block and verify it again.")
        if t["rule"] not in (TARGET_RULE, CV_TARGET_RULE, SEQUENTIAL_RULE):
            raise InvalidDatasetError(f"metadata target_stderr rule {show_value(t['rule'], max_len=60)} is not {TARGET_RULE!r}, "
                                      f"{CV_TARGET_RULE!r} (or {SEQUENTIAL_RULE!r}, whestbench 0.17.0's) {fix}.")
        if t["rule"] == CV_TARGET_RULE and (not is_cv_block(md["estimator"])
                                            or t.get("exceed_probability") != EXCEED_PROBABILITY):
            raise InvalidDatasetError(f"metadata target_stderr rule {CV_TARGET_RULE!r} needs the control-variate estimator "
                                      f"and exceed_probability {EXCEED_PROBABILITY}; got {show_value(md['estimator'].get('name') if isinstance(md['estimator'], dict) else md['estimator'], max_len=40)} "
                                      f"and {show_value(t.get('exceed_probability'), max_len=40)} {fix}.")
        steps = {s.get("block_size") for s, _ in samplers if isinstance(s, dict)}
        if "step_samples" in t and not is_one_of(t["step_samples"], steps):
            raise InvalidDatasetError(f"metadata target_stderr step_samples {show_value(t['step_samples'], max_len=60)} is not the "
                                      f"sampler's block_size {fix}.")


def _check_sampler(sampler: Any, where: str, md: dict, fix: str) -> None:
    known = _known_samplers()
    if not isinstance(sampler, dict) or not is_one_of(sampler.get("name"), known):
        name = sampler.get("name") if isinstance(sampler, dict) else sampler
        raise InvalidDatasetError(f"metadata {where} {show_value(name, max_len=60)} is not one this whestbench knows "
                                  f"({', '.join(sorted(known))}) {fix}.")
    if sampler.get("version") != known[sampler["name"]]:
        raise InvalidDatasetError(f"metadata {where} {sampler['name']} version {show_value(sampler.get('version'), max_len=60)} "
                                  f"is not {known[sampler['name']]!r} {fix}.")
    block = sampler.get("block_size")
    if not is_positive_int(block):
        raise InvalidDatasetError(f"metadata {where} block_size {show_value(block, max_len=60)} is not a positive integer {fix}.")
    if sampler["name"] == "pcg64" and is_positive_int(md.get("width")):
        from whestbench.compute.pcg64 import chunk_rows

        if block != chunk_rows(md["width"]):
            raise InvalidDatasetError(f"metadata {where} block_size {block} is not the pcg64 chunk of width "
                                      f"{md['width']} ({chunk_rows(md['width'])}) {fix}.")
    if sampler["name"] == "philox" and block & (block - 1):
        raise InvalidDatasetError(f"metadata {where} block_size {block} is not a power of two (philox) {fix}.")
    backend = md.get("backend")
    if (sampler["name"] == "philox") != (backend == BACKEND_TORCH):
        raise InvalidDatasetError(f"metadata {where} {sampler['name']} does not go with backend {show_value(backend, max_len=60)} "
                                  f"(philox is the torch backend's sampler, pcg64 the CPU path's) {fix}.")


def _cv_batch(sampler: Any) -> int | None:
    """The control-variate batch a sampler block implies: the pcg64 chunk, or min(CV_BATCH, block)."""
    from whestbench.compute.estimators import CV_BATCH

    if not isinstance(sampler, dict) or not is_positive_int(sampler.get("block_size")):
        return None
    block = sampler["block_size"]
    return block if sampler.get("name") == "pcg64" else min(CV_BATCH, block)


def _known_samplers() -> dict[str, str]:
    from whestbench.compute import pcg64
    from whestbench.compute.philox import spec as philox

    return {pcg64.SAMPLER_NAME: pcg64.SAMPLER_VERSION, philox.SAMPLER_NAME: philox.SAMPLER_VERSION}
