"""The dataset card (README.md): YAML front matter for the Hub plus a prose body from a template.

The front matter is what the Hub and ``datasets.load_dataset`` read: its ``configs`` block maps
config names to ``data/<split>-*.parquet`` globs, which is what makes
``load_dataset(dir_or_repo, "holdout")`` work. Its keys, values and the ``configs`` rules are
whestbench 0.16's (so a card we write and one it writes agree). The body is ours, rendered from
``templates/dataset_card.md.j2`` with a context built here, so the template never has to guess.

The rendering (``card_fields``, ``front_matter``, ``card_context``, ``render_card``) is a pure function
of the metadata dict: missing optional keys never raise, so partial, merged, multi-split and legacy
(protocol 2.0) metadata all render. The rest is not pure: ``read_card_file`` reads a card file,
``_template`` reads the template, and ``card_verdict`` loads the written card through ``datasets``.
"""

from __future__ import annotations

import os
import re
import shlex
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import yaml

from whestbench.atomic import read_regular, write_file_atomic
from whestbench.compute.estimation import Estimation, is_cv_block
from whestbench.format import command
from whestbench.format.card_facts import data_facts
from whestbench.format.reader import CARD_FILE, METADATA_FILE, checksums_block, data_files, metadata_bytes, shard_glob
from whestbench.format.schema import (CARD_FIELDS, CARD_KEY, CARD_PRESETS, DEFAULT_CONFIG, HOMEPAGE_RE, PRESET_OWNS,
                                      DatasetMeta, check_card, combine_card, hidden_char)
from whestbench.errors import FileTooLarge, InvalidDatasetError, UsageError
from whestbench.text import format_count
from whestbench.values import is_int
from whestbench.hubenv import import_hub

ORGANISERS = "whestbench-organisers"
"""The built-in card (``--card whestbench-organisers``) of the WhestBench organisers' own datasets."""
HOMEPAGE = "https://www.aicrowd.com/challenges/arc-white-box-estimation-challenge-2026"
REPOSITORY = "https://github.com/AIcrowd/whestbench"
DEFAULT_PRETTY_NAME = "WhestBench 2026: ARC White-Box Estimation Challenge"
"""The organisers' preset's title, homepage and repository."""
TOOL_URL = "https://pypi.org/project/whestbench/"
"""The tool that baked the data: the neutral card's homepage and repository when it is given none."""
LICENSE = "cc-by-4.0"
TAGS = ["whestbench", "alignment", "neural-network-statistics", "benchmark", "white-box"]
PLACEHOLDER_REPO = "<your-repo>"


def check_card_fields(*, pretty_name: str | None = None, license: str | None = None,
                      homepage: str | None = None, card_file: str | None = None) -> dict[str, Any]:
    """The card fields a user gave, checked before any work (UsageError, one line naming the fix):
    ``--card FILE`` (``read_card_file``) or ``--card PRESET`` (``CARD_PRESETS``: ``{"preset": NAME}``)
    and, over it, ``--pretty-name``, ``--license``, ``--homepage``. Only those given are returned."""
    if card_file is not None and card_file in CARD_PRESETS:
        out = {"preset": card_file}
    else:
        out = read_card_file(card_file) if card_file is not None else {}
    flags = {"pretty_name": pretty_name, "license": license, "homepage": homepage}
    out.update(check_card({k: v for k, v in flags.items() if v is not None}, None))
    return out


def given_card(card: Any) -> dict[str, Any]:
    """The card a request was given (``BakeConfig``, ``PushConfig``, ``merge_datasets``,
    ``combine_split_datasets``), checked by the rules the CLI's card flags follow, so the Python API
    and the CLI accept and refuse the same cards: None gives ``{}``; a string or path is what ``--card``
    takes (a built-in card's name, or a card file); a mapping holds card fields (``CARD_FIELDS``; a
    None value is a field not given, as an unset flag). Anything else is a UsageError, one line."""
    if card is None:
        return {}
    if isinstance(card, (str, os.PathLike)):
        return check_card_fields(card_file=os.fspath(card))
    if isinstance(card, Mapping):
        return check_card({k: v for k, v in card.items() if v is not None}, "card")
    raise UsageError(f"card must be a mapping of card fields ({', '.join(CARD_FIELDS)}), a built-in card's name "
                     f"({', '.join(CARD_PRESETS)}) or a card file's path; got {type(card).__name__}.")


CARD_FILE_MAX_BYTES = 64 * 1024
"""A card file holds a few fields (a citation of at most 8,000 characters, 20 badges, 100 authors): 64 KiB."""
README_MAX_BYTES = 1 << 20
"""A README.md we render is ~10 KiB (the citation at most 8,000 characters); one beyond 1 MiB is no card."""


class _NoAliasLoader(yaml.SafeLoader):
    """PyYAML's safe loader refusing aliases (``*name``) before they expand: a 331-byte card file of nested
    aliases took 36 s and 1.17 GB to refuse. No card field needs one."""

    def compose_node(self, parent, index):  # noqa: ANN001  (PyYAML's signature)
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(None, None, "YAML aliases (*name) are not accepted in a card", mark)
        return super().compose_node(parent, index)


def load_yaml(text: str) -> Any:
    """``text`` as YAML, safely and without aliases (``_NoAliasLoader``): a card file or a card's front matter."""
    return yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506  (a SafeLoader subclass)


def read_card_file(path: str) -> dict[str, Any]:
    """``--card FILE``: a YAML or JSON mapping of ``CARD_FIELDS`` (docs/hub.md, "The card"), checked:
    unknown keys, wrong types, control or bidirectional characters, URLs that are not plain http(s) or
    carry credentials, YAML aliases and files over ``CARD_FILE_MAX_BYTES`` are a UsageError naming the
    key and the fix."""
    import errno

    try:
        raw = read_regular(path, CARD_FILE_MAX_BYTES, "card file")
    except FileTooLarge as e:
        raise UsageError.from_error(e, where="--card", fix=f"A card file holds a few fields ({', '.join(CARD_FIELDS)}).") from None
    except OSError as e:
        if isinstance(e, FileNotFoundError) and os.sep not in path and not path.endswith((".yaml", ".yml", ".json")):
            raise UsageError(f"--card {path!r}: no such card file, and no built-in card of that name; give a YAML "
                             f"or JSON card file or one of {', '.join(CARD_PRESETS)}.") from None
        if e.errno == errno.EINVAL and not isinstance(e, FileNotFoundError):
            raise UsageError(f"--card {path!r} is not a regular file; give a YAML or JSON card file.") from None
        raise UsageError(f"--card {path!r}: cannot open it ({e.strerror or e}); give a YAML or JSON card file.") from None
    try:
        data = load_yaml(raw.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError, RecursionError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if isinstance(e, yaml.composer.ComposerError) and "aliases" in str(e):
            first = "YAML aliases (*name) are not accepted in a card"
        raise UsageError(f"--card {path!r} is not UTF-8 YAML or JSON ({first}); fix the file.") from None
    if not isinstance(data, dict) or not data:
        raise UsageError(f"--card {path!r} must hold a mapping of card fields ({', '.join(CARD_FIELDS)}); "
                         f"got {type(data).__name__}.")
    return check_card(data, f"--card {path}")


def markdown_text(text: str) -> str:
    """``text`` as literal Markdown/HTML inline text: HTML's ``& < >`` as entities, Markdown's
    punctuation backslash-escaped, hidden characters dropped (a title cannot inject a link, an
    image or a tag)."""
    text = "".join(c for c in text if not hidden_char(c))
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return re.sub(r"([\\`*_{}\[\]()#+!|~])", r"\\\1", text)


# BibTeX counts every brace, a backslash before it or not (its matching is not TeX's): a brace is
# written as a command whose own braces pair up, so a field's braces always balance
_BIBTEX = {"\\": r"\textbackslash{}", "{": r"\textbraceleft{}", "}": r"\textbraceright{}", "%": r"\%", "&": r"\&",
           "#": r"\#", "$": r"\$", "_": r"\_", "^": r"\^{}", "~": r"\~{}"}


def bibtex_text(text: str) -> str:
    """``text`` as a BibTeX field value's literal text (braces and TeX specials escaped: a title
    cannot close the field and add its own)."""
    return "".join(_BIBTEX.get(c, c) for c in text if not hidden_char(c))


def own_card(md: dict[str, Any], given: dict[str, Any] | None = None) -> dict[str, Any]:
    """The dataset's own card fields: those the bake recorded (metadata ``card``; a field edited by
    hand into something ``--card`` would refuse is left out), with ``given`` (push's flags or card
    file) over them (``schema.combine_card``). ``preset`` ``whestbench-organisers``: the organisers'
    card; empty: the neutral card, which credits no organisation."""
    recorded = md.get(CARD_KEY) if isinstance(md, dict) and isinstance(md.get(CARD_KEY), dict) else {}
    out: dict[str, Any] = {}
    for key, value in recorded.items():
        try:
            out.update(check_card({key: value}, f"metadata {CARD_KEY}"))
        except Exception:  # UsageError: never rendered
            continue
    if "preset" in out and any(k in out for k in PRESET_OWNS):
        out.pop("preset")  # edited by hand into what check_card refuses: the fields win, never both
    return combine_card(out, {k: v for k, v in (given or {}).items() if v})


def neutral_title(md: dict[str, Any]) -> str:
    """The neutral card's title: what the data is, from the metadata."""
    total = sum(_n_mlps(e) for e in _splits(md).values()) if isinstance(md, dict) else 0
    shape = (f" of width {md['width']} and depth {md['depth']}"
             if is_int(md.get("width")) and is_int(md.get("depth")) else "")
    return f"Ground truth of {format_count(total, 'unknown')} random ReLU MLP{'' if total == 1 else 's'}{shape}"


def card_fields(md: dict[str, Any], **given: Any) -> dict[str, Any]:
    """``pretty_name``, ``license``, ``homepage`` and ``repository`` for the card: as given (push's
    flags), else as the bake recorded them (metadata ``card``; 0.16's ``pretty_name``), else the
    defaults: the organisers' preset's (challenge title and page, AIcrowd/whestbench) or the
    neutral card's (a title from the data, whestbench's package page as the homepage, and no
    ``repository``: the card names one only where it was given)."""
    own = own_card(md, given)
    organisers = own.get("preset") == ORGANISERS
    link = HOMEPAGE if organisers else TOOL_URL
    defaults = {"pretty_name": md.get("pretty_name") or (DEFAULT_PRETTY_NAME if organisers else neutral_title(md)),
                "license": LICENSE, "homepage": link, "repository": REPOSITORY if organisers else None}
    out = {}
    for key, default in defaults.items():
        value = own.get(key)
        out[key] = value if isinstance(value, str) and value else default
    if out["repository"] is None:  # a repository only where one was given: never the tool's package page
        del out["repository"]
    if not HOMEPAGE_RE.match(out["homepage"]):  # metadata edited by hand: never a javascript: link
        out["homepage"] = link
    return out


def card_size_category(n: int) -> str:
    """The Hub's ``size_categories`` bucket for ``n`` rows (whestbench 0.16's four buckets)."""
    for limit, bucket in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K")):
        if n < limit:
            return bucket
    return "100K<n<1M"


def _is_multi(md: dict[str, Any]) -> bool:
    return bool(DatasetMeta.of(md).blocks)


def _splits(md: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{split: entry}`` in metadata order; a single-split dataset is one entry built from the top level."""
    if _is_multi(md):
        return {name: (e if isinstance(e, dict) else {}) for name, e in DatasetMeta.of(md).blocks.items()}
    entry = {k: md[k] for k in ("n_mlps", "config", "seed", "created_at_utc") if k in md}
    return {DatasetMeta.of(md).splits[0]: entry}


def _n_mlps(entry: dict[str, Any]) -> int:
    n = entry.get("n_mlps")
    return n if is_int(n) else 0


def _config(name: str, splits: Any) -> dict[str, Any]:
    """One entry of the ``configs`` block: config ``name`` holding ``splits``' shards."""
    return {"config_name": name, "data_files": [{"split": s, "path": shard_glob(s)} for s in splits]}


def configs_block(md: dict[str, Any]) -> list[dict[str, Any]]:
    """The front matter's ``configs`` list ([] means: no block).

    * single split, config ``default``: none (the Hub's automatic layout already works);
    * single split, other config C: one config C holding that split;
    * several splits declaring more than one distinct config (a missing one counts as
      ``default``): one config per name, in order of first appearance, ``default`` first;
    * otherwise, with a ``default_split`` that exists: ``default`` holds it, and each other
      split gets a config named after itself;
    * otherwise: one ``default`` config listing every split.
    """
    splits = _splits(md)
    if not _is_multi(md):
        (split, entry), = splits.items()
        config = entry.get("config") or DEFAULT_CONFIG
        if config == DEFAULT_CONFIG:
            return []
        return [_config(config, [split])]
    declared = {name: (e.get("config") or DEFAULT_CONFIG) for name, e in splits.items()}
    if len(set(declared.values())) > 1:
        groups: dict[str, list[str]] = {}
        for name, config in declared.items():
            groups.setdefault(config, []).append(name)
        order = sorted(groups, key=lambda c: c != DEFAULT_CONFIG)  # stable: default first
        return [_config(c, groups[c]) for c in order]
    default_split = md.get("default_split")
    if isinstance(default_split, str) and default_split in splits:
        return [_config(DEFAULT_CONFIG, [default_split])] + [_config(s, [s]) for s in splits if s != default_split]
    return [_config(DEFAULT_CONFIG, splits)]


def split_configs(md: dict[str, Any]) -> dict[str, str]:
    """``{split: config name to pass to datasets.load_dataset}`` under this card's ``configs`` block."""
    out = {name: DEFAULT_CONFIG for name in _splits(md)}
    for config in configs_block(md):
        for files in config["data_files"]:
            out[files["split"]] = config["config_name"]
    return out


def front_matter(md: dict[str, Any], fields: dict[str, str] | None = None) -> dict[str, Any]:
    """The card's YAML data (dumped with sorted keys, as the Hub's card tooling does)."""
    fields = fields or card_fields(md)
    size = sum(_n_mlps(e) for e in _splits(md).values())
    data: dict[str, Any] = {}
    configs = configs_block(md)
    if configs:
        data["configs"] = configs
    data.update(
        {
            **({"repository": fields["repository"]} if fields.get("repository") else {}),
            "homepage": fields["homepage"],
            "language": ["code"],
            "license": fields["license"],
            "pretty_name": fields["pretty_name"],
            "size_categories": [card_size_category(size)],
            "tags": TAGS + (["multi-split"] if _is_multi(md) else []),
            "task_categories": ["other"],
        }
    )
    return data


def render_card(md: dict[str, Any], *, repo_id: str = PLACEHOLDER_REPO, revision: str = "main",
                **given: Any) -> str:
    """README.md text for a dataset with metadata ``md``, as published at ``repo_id@revision``;
    ``given`` card fields (``CARD_FIELDS``: push's flags and ``--card`` file, checked by
    ``check_card_fields``) override what the bake recorded (``own_card``)."""
    unknown = set(given) - set(CARD_FIELDS)
    if unknown:
        raise TypeError(f"render_card() got unexpected card fields {sorted(unknown)}")
    given = {k: v for k, v in given.items() if v}
    fields = card_fields(md, **given)
    head = yaml.dump(front_matter(md, fields), default_flow_style=False, allow_unicode=True, sort_keys=True)
    body = _template().render(**card_context(md, repo_id=repo_id, revision=revision, fields=fields, given=given))
    return "---\n" + head + "---\n\n" + body


def prepare() -> None:
    """Import jinja2 and compile the template now (~60 ms), so that the first ``render_card`` is
    quick: a bake calls this on its prefetch thread while its units compute."""
    _template()


@lru_cache(maxsize=1)
def _template():
    from importlib.resources import files

    import jinja2

    text = (files("whestbench") / "templates" / "dataset_card.md.j2").read_text(encoding="utf-8")
    env = jinja2.Environment(
        undefined=jinja2.StrictUndefined,  # a typo in the template fails the tests, not silently
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,  # markdown, not HTML
    )
    return env.from_string(text)


def _arg(v: Any, placeholder: str) -> str:
    return str(v) if is_int(v) else placeholder


def _recorded_argv(md: dict[str, Any], split: str) -> list[str] | None:
    """The recorded ``bake_command`` of ``split``; None (so the command is rebuilt) when unusable."""
    entry = _splits(md).get(split, {})
    return command.parse_bake(entry.get("bake_command") if _is_multi(md) else md.get("bake_command"))


def rebake_argv(md: dict[str, Any], split: str, *, seeds_file: str = "seeds.json") -> list[str]:
    """The ``whest dataset bake`` argv that re-creates ``split``.

    A recorded ``bake_command`` (top level for one split, per split entry when combined) wins,
    minus any slice flags unless the dataset itself is a partial, minus ``--card FILE`` (the
    baker's file: its fields are recorded), and with ``--output`` set to
    ``./rebake-<split>``. Otherwise the command is rebuilt
    from the metadata with ``--mlp-seeds seeds_file``. Reference torch bakes (no ``sampler``
    block) also pin ``--chunk-size``/``--mlps-per-batch``, because their sums depend on chunking.
    """
    recorded = _recorded_argv(md, split)
    partial = not _is_multi(md) and bool(md.get("is_partial"))
    if recorded is not None:
        argv = recorded if partial else command.drop_flags(recorded, command.RANGE_FLAGS)
        if command.flag_value(argv, "--card") not in CARD_PRESETS:  # a built-in card stays in the command
            argv = command.drop_flags(argv, ("--card",))  # a file on the baker's machine; its fields are in the metadata
        return command.set_flag(argv, "--output", f"./rebake-{split}")
    entry = _splits(md).get(split, {})
    argv = ["whest", "dataset", "bake", "--n-mlps", _arg(entry.get("n_mlps"), "<n_mlps>")]
    rng = md.get("mlp_range")
    if partial and isinstance(rng, list) and len(rng) == 2 and all(isinstance(v, int) for v in rng):
        # A slice is re-baked as the same slice of the whole dataset (CLI ranges are inclusive).
        argv[-1] = _arg(md.get("total_n_mlps"), "<total_n_mlps>")
        argv += ["--mlp-range", f"{rng[0]}-{rng[1] - 1}"]
    argv += [
        "--n-samples", _arg(md.get("n_samples"), "<n_samples>"),
        "--width", _arg(md.get("width"), "<width>"),
        "--depth", _arg(md.get("depth"), "<depth>"),
        "--mlp-seeds", seeds_file,
        "--split", split,
        "--config", entry.get("config") or DEFAULT_CONFIG,
    ]
    if md.get("backend") == "torch":
        argv.append("--torch")
        if isinstance(md.get("device"), str):
            argv += ["--device", md["device"]]
        if "sampler" not in md:
            for key, flag in (("chunk_size", "--chunk-size"), ("mlps_per_batch", "--mlps-per-batch")):
                if isinstance(md.get(key), int):
                    argv += [flag, str(md[key])]
    argv += Estimation.from_metadata(md).flags()
    return argv + ["--output", f"./rebake-{split}"]


def format_command(argv: list[str]) -> str:
    """Shell text of ``argv`` with one flag (and its value) per continuation line."""
    lines: list[list[str]] = [[]]
    for token in argv:
        if token.startswith("-") and lines[-1]:
            lines.append([])
        lines[-1].append(shlex.quote(token))
    return " \\\n    ".join(" ".join(line) for line in lines)


def _protocol(md: dict[str, Any]) -> dict[str, str]:
    sp = md.get("seed_protocol") if isinstance(md.get("seed_protocol"), dict) else {}
    # Only the public identity of the protocol: a 4.0 salt must never reach the card.
    return {"name": str(sp.get("name", "unknown")), "version": str(sp.get("version", "2.0"))}


def _samplers(md: dict[str, Any]) -> list[dict[str, Any]]:
    """Each split's sampler (``DatasetMeta.sampler``: combine-splits keeps it per split), in split order."""
    meta = DatasetMeta.of(md)
    return [_sampler({**md, "sampler": meta.sampler(s)}) for s in meta.splits] or [_sampler(md)]


def _sampler(md: dict[str, Any]) -> dict[str, Any]:
    s = md.get("sampler")
    if isinstance(s, dict) and s.get("name"):
        extras = ", ".join(f"{k}={v}" for k, v in s.items() if k not in ("name", "version"))
        return {"name": str(s["name"]), "version": str(s.get("version", "")), "extras": extras}
    if md.get("backend") == "torch":
        return {"name": "torch.randn", "version": "", "extras": "one torch.Generator per MLP, as whestbench 0.16's torch backend"}
    return {"name": "numpy PCG64", "version": "", "extras": "float32 ziggurat draws, as whestbench 0.16's CPU backend"}


_HW_FIELDS = (
    ("cuda_device_name", "GPU"),
    ("cpu_brand", "CPU"),
    ("machine", "arch"),
    ("os", "OS"),
    ("cpu_count_logical", "logical CPUs"),
    ("python_version", "Python"),
    ("numpy_version", "numpy"),
    ("torch_version", "torch"),
    ("whestbench_version", "whestbench"),
    ("mlp_count", "partial bakes"),
)


def _hw_line(hw: Any) -> str:
    if not isinstance(hw, dict):
        return ""
    parts = [f"{label} `{hw[k]}`" for k, label in _HW_FIELDS if hw.get(k) not in (None, "", [])]
    return ", ".join(parts)


def _provenance(md: dict[str, Any]) -> list[dict[str, Any]]:
    """One block per split: its hardware fingerprints, or the single host that baked it."""
    blocks = []
    for name, entry in _splits(md).items():
        fps = entry.get("hardware_fingerprints") if _is_multi(md) else md.get("hardware_fingerprints")
        lines = [line for line in (_hw_line(fp) for fp in fps or []) if line] if isinstance(fps, list) else []
        if not lines:
            hw = md.get("hardware") if isinstance(md.get("hardware"), dict) else {}
            host = hw.get("cuda_device_name") or hw.get("cpu_brand") or md.get("cuda_device_name")
            host = host or "unspecified host"
            detail = _hw_line(hw)
            lines = [f"Single-host bake on `{host}`" + (f" ({detail})" if detail else "")]
        blocks.append({"split": name, "lines": lines})
    return blocks


def card_context(md: dict[str, Any], *, repo_id: str, revision: str,
                 fields: dict[str, str] | None = None, given: dict[str, str] | None = None) -> dict[str, Any]:
    """Every value the template shows, already formatted (the template holds prose only).

    The WhestBench organisers' text (their challenge badge, their names in the citation, credit to
    them in the license) is the preset ``whestbench-organisers`` only (recorded in metadata ``card``
    or given); any other card credits its authors, when it names them, and whestbench as the tool
    that baked it, and no organisation."""
    md = md if isinstance(md, dict) else {}
    fields = fields or card_fields(md, **(given or {}))
    own = own_card(md, given)
    organisers = own.get("preset") == ORGANISERS
    multi = _is_multi(md)
    protocol = _protocol(md)
    configs = split_configs(md)
    splits = []
    for name, entry in _splits(md).items():
        config = configs[name]
        argv = rebake_argv(md, name, seeds_file=f"{name}-seeds.json")
        load_args = f'"{repo_id}"' + (f', "{config}"' if config != DEFAULT_CONFIG else "")
        splits.append(
            {
                "name": name,
                "n_mlps": format_count(entry.get("n_mlps"), "unknown"),
                "config": config,
                "declared_config": entry.get("config") or DEFAULT_CONFIG,
                "created_at_utc": str(entry.get("created_at_utc") or md.get("created_at_utc") or "unknown"),
                "seed": entry.get("seed"),
                "load_args": load_args,
                "seeds_file": command.flag_value(argv, "--mlp-seeds"),
                "rebake": format_command(argv),
                "output": shlex.quote(command.flag_value(argv, "--output") or ""),
            }
        )
    total = sum(_n_mlps(e) for e in _splits(md).values())
    return {
        "title": markdown_text(fields["pretty_name"]),
        "repo_id": repo_id,
        "revision": revision,
        "hub_url": f"https://huggingface.co/datasets/{repo_id}/tree/{revision}",
        "homepage": fields["homepage"],
        "license": fields["license"],
        "repository": REPOSITORY,
        "tool_url": TOOL_URL,
        "multi": multi,
        "splits": splits,
        "first": splits[0],
        "default_split": md.get("default_split") if multi else splits[0]["name"],
        "total_mlps": format_count(total, "unknown"),
        "width": format_count(md.get("width"), "unknown"),
        "depth": format_count(md.get("depth"), "unknown"),
        "n_samples": format_count(md.get("n_samples"), "unknown"),
        "schema_version": str(md.get("schema_version", "unknown")),
        "protocol": protocol,
        "sampler": _samplers(md)[0],
        "split_samplers": ([{"split": s["name"], **x} for s, x in zip(splits, _samplers(md))]
                           if len({str(x) for x in _samplers(md)}) > 1 else []),
        "backend": str(md.get("backend", "unknown")),
        "device": md.get("device"),
        "torch_version": md.get("torch_version"),
        "cuda_device_name": md.get("cuda_device_name"),
        "whestbench_version": md.get("whestbench_version"),
        "created_at_utc": md.get("created_at_utc"),
        "merged_at_utc": md.get("merged_at_utc"),
        "partials_count": md.get("partials_count"),
        "is_partial": bool(md.get("is_partial")),
        "partial_range": _partial_range(md),
        "total_n_mlps": format_count(md.get("total_n_mlps"), "unknown"),
        "default_config_splits": [
            f["split"] for c in configs_block(md) if c["config_name"] == DEFAULT_CONFIG for f in c["data_files"]
        ],
        "blas": _blas(md.get("blas")),
        "has_checksums": _has_checksums(md),
        "has_prepared": multi and isinstance(md.get("prepared_splits"), dict) and bool(md.get("prepared_splits")),
        "provenance": _provenance(md),
        "citation": _citation(fields["pretty_name"], fields["homepage"]) if organisers else own.get("citation") or
        _own_citation(fields["pretty_name"], own.get("homepage"), md, own.get("authors") or []),
        "organisers": organisers,
        "own_homepage": own.get("homepage"),
        "own_repository": own.get("repository"),
        "authors": ", ".join(markdown_text(a) for a in own.get("authors") or []),
        "badges": [{"label": markdown_text(b["label"]), "image": _badge_image(b["label"]), "url": b["url"]}
                   for b in own.get("badges") or []],
        **data_facts(md, protocol),
    }


def _has_checksums(md: dict[str, Any]) -> bool:
    """Whether checksums vouch for the files (not when absent, stale, malformed or edited away)."""
    try:
        return bool(checksums_block(md))
    except InvalidDatasetError:
        return False


def _partial_range(md: dict[str, Any]) -> str:
    rng = md.get("mlp_range")
    if isinstance(rng, list) and len(rng) == 2 and all(isinstance(v, int) for v in rng):
        return f"MLPs {rng[0]} to {rng[1] - 1}"
    return "a slice of the MLPs"


def _blas(blas: Any) -> str:
    if not isinstance(blas, dict) or not blas.get("library"):
        return ""
    text = str(blas["library"]) + (f" {blas['version']}" if blas.get("version") else "")
    return text + (f", kernel {blas['kernel']}" if blas.get("kernel") else "")


def _badge_image(label: str) -> str:
    """A shields.io badge showing ``label`` (its ``-`` and ``_`` doubled, as shields spells them)."""
    from urllib.parse import quote

    text = label.replace("-", "--").replace("_", "__").replace(" ", "_")
    return f"https://img.shields.io/badge/{quote(text, safe='')}-link-2b6cb0"


def _own_citation(title: str, homepage: str | None, md: dict[str, Any], authors: list[str]) -> str:
    """The citation of a dataset with a card of its own: its authors (when given), title, year and
    homepage, and the tool that baked it."""
    year = str(md.get("created_at_utc") or "")[:4]
    slug = re.sub(r"[^a-z0-9]+", "", title.lower())[:24] or "dataset"
    lines = [f"@misc{{{slug}{year if year.isdigit() else ''},", f"  title        = {{{{{bibtex_text(title)}}}}},"]
    if authors:
        lines.append(f"  author       = {{{' and '.join('{' + bibtex_text(a) + '}' for a in authors)}}},")
    if year.isdigit():
        lines.append(f"  year         = {{{year}}},")
    if homepage and HOMEPAGE_RE.match(homepage):
        lines.append(f"  howpublished = {{\\url{{{homepage}}}}},")
    version = md.get("whestbench_version")
    lines.append(f"  note         = {{Baked with whestbench{(' ' + bibtex_text(str(version))) if version else ''}}},")
    return "\n".join(lines) + "\n}"


def _citation(title: str, homepage: str = HOMEPAGE) -> str:
    title, homepage = bibtex_text(title), homepage if HOMEPAGE_RE.match(homepage) else HOMEPAGE
    return (
        "@misc{whestbench2026,\n"
        f"  title        = {{{{{title}}}}},\n"
        "  author       = {{Alignment Research Center} and {AIcrowd}},\n"
        "  year         = {2026},\n"
        f"  howpublished = {{\\url{{{homepage}}}}},\n"
        "}"
    )


# ---------------------------------------------------------------------------------------------
# The card is data: its configs block decides what `datasets` loads


def card_verdict(root: Any, md: dict[str, Any]) -> tuple[bool, str]:
    """``(ok, detail)``: README.md's ``configs`` block, when it has one, is the one ``md`` implies
    (``configs_block``), a dataset that needs one has a README.md, and plain ``datasets`` resolves
    every split under the config the card gives it to that split's shards (``load_dataset_builder``
    offline: files are matched, no row is read; a 0.16 card without a block passes when the automatic
    layout finds every split). Never raises on a damaged dataset."""
    import tempfile

    handle, root = root, Path(root)  # an open DatasetDir lists each split's shards once
    want = configs_block(md)
    fix = "re-run the bake, merge or combine-splits that made it: a re-run rewrites the card"
    readme = root / CARD_FILE
    got: Any = []
    if readme.is_file():
        try:
            got = _configs_of(readme)
        except _UNREADABLE as e:
            return False, f"README.md's front matter cannot be read ({type(e).__name__}: {e}); {fix}"
    elif readme.exists() or readme.is_symlink():
        return False, f"README.md is not a regular file; {fix}"
    if got != want and (got or readme.is_file() is False and bool(want)):
        where = "README.md is missing" if not readme.is_file() else "README.md's configs block is not the one metadata.json implies"
        return False, f"{where} (it has {_show_configs(got)}, the splits need {_show_configs(want)}); {fix}"
    datasets = import_hub("datasets")

    loaded = []
    was = os.environ.get("HF_DATASETS_OFFLINE")
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    try:
        with tempfile.TemporaryDirectory(prefix="whest-card-") as cache:
            for split, config in split_configs(md).items():
                try:
                    files = sorted(p.name for p in data_files(handle, split))
                    # absolute: datasets takes a relative name that is a split word ("eval", "test") for a file pattern
                    builder = datasets.load_dataset_builder(str(root.resolve()), name=config, cache_dir=cache)
                    resolved = sorted(Path(str(f)).name for f in (builder.config.data_files or {}).get(split, []))
                except Exception as e:  # datasets' own words, on one line: what a user of plain datasets would get
                    return False, (f"datasets.load_dataset({str(root)!r}, {config!r}, split={split!r}) fails: "
                                   f"{type(e).__name__}: {' '.join(str(e).split())[:300]}; {fix}")
                if resolved != files:
                    return False, (f"datasets resolves split {split!r} of config {config!r} to {resolved or 'no file'}, "
                                   f"not to its shards {files}; {fix}")
                loaded.append(f"{split} (config {config!r})")
    finally:
        if was is None:
            os.environ.pop("HF_DATASETS_OFFLINE", None)
        else:
            os.environ["HF_DATASETS_OFFLINE"] = was
    block = ("README.md's configs block matches metadata.json" if got else
             "no configs block (datasets' automatic layout)" if want else "no configs block needed")
    return True, f"{block}; datasets.load_dataset finds {', '.join(loaded)}"


def restore_card(root: Any, md: dict[str, Any]) -> bool:
    """Rewrite ``root``'s README.md (atomically) when it is missing or its ``configs`` block is not the
    one ``md`` implies; True when it did. A re-run of a bake, merge or combine calls this: the card
    decides which configs ``datasets`` can load, and it is no part of the checksummed numbers."""
    readme = Path(root) / CARD_FILE
    if readme.is_file() and not readme.is_symlink():
        try:
            if _configs_of(readme) == configs_block(md):
                return False
        except _UNREADABLE:
            pass
    elif readme.exists() or readme.is_symlink():
        raise InvalidDatasetError(f"{readme} is not a regular file; move it aside and re-run to write the card.")
    write_file_atomic(readme, render_card(md).encode("utf-8"))
    return True


def update_card(root: Any, md: dict[str, Any], given: dict[str, Any] | None) -> dict[str, tuple[Any, Any]]:
    """A re-run (bake, merge, combine-splits) given card fields (``given``: ``--card FILE`` and the card
    flags, checked) that differ from the recorded ``card`` block: record them and rewrite README.md
    (both atomically; the card is no part of the numbers, the checksums or the completion marker).
    Returns ``{field: (old, new)}`` for each field changed (new None: a field the given ones displace,
    ``schema.combine_card``); empty when nothing was. README.md is
    written first, so a stop between the two writes leaves metadata.json's old card, and the next
    re-run finds the difference again."""
    recorded = md.get(CARD_KEY) if isinstance(md.get(CARD_KEY), dict) else {}
    card = combine_card(recorded, given or {})
    changed = {k: (recorded.get(k), card.get(k)) for k in sorted({*recorded, *card}) if recorded.get(k) != card.get(k)}
    if not changed:
        return {}
    new_md = {**md, CARD_KEY: card}
    write_file_atomic(Path(root) / CARD_FILE, render_card(new_md).encode("utf-8"))
    write_file_atomic(Path(root) / METADATA_FILE, metadata_bytes(new_md))
    md.clear()
    md.update(new_md)
    return changed


_UNREADABLE = (OSError, UnicodeDecodeError, yaml.YAMLError, ValueError, RecursionError)  # a card whose front matter cannot be read


def _configs_of(readme: Any) -> Any:
    """The ``configs`` block of the card file ``readme`` (``[]`` when it has none); raises ``_UNREADABLE``."""
    text = read_regular(readme, README_MAX_BYTES, "README.md").decode("utf-8")
    return (_front_matter_of(text) or {}).get("configs", [])


def _front_matter_of(text: str) -> dict[str, Any] | None:
    """The YAML front matter of a card (None when it has none)."""
    if not text.startswith("---\n"):
        return None
    end = text.find("\n---", 4)
    if end < 0:
        raise ValueError("the front matter has no closing '---'")
    data = load_yaml(text[4:end + 1])
    if data is not None and not isinstance(data, dict):
        raise ValueError("the front matter is not a mapping")
    return data


def _show_configs(configs: Any) -> str:
    if not configs:
        return "no configs block"
    if not isinstance(configs, list):
        return "a configs entry that is not a list"
    shown = []
    for c in configs:
        if isinstance(c, dict):
            files = c.get("data_files") if isinstance(c.get("data_files"), list) else []
            splits = [f.get("split") for f in files if isinstance(f, dict)]
            shown.append(f"{c.get('config_name')!s}: {', '.join(map(str, splits))}")
        else:
            shown.append(repr(c))
    return "[" + "; ".join(shown) + "]"
