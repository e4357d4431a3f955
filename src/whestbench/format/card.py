"""The dataset card (README.md): YAML front matter for the Hub plus a prose body from a template.

The front matter is what the Hub and ``datasets.load_dataset`` read: its ``configs`` block maps
config names to ``data/<split>-*.parquet`` globs, which is what makes
``load_dataset(dir_or_repo, "holdout")`` work. Its keys, values and the ``configs`` rules are
whestbench 0.16's (so a card we write and one it writes agree). The body is ours, rendered from
``templates/dataset_card.md.j2`` with a context built here, so the template never has to guess.

The rendering (``card_fields``, ``front_matter``, ``card_context``, ``render_card``) is a pure function
of the metadata dict: missing optional keys never raise, so partial, merged, multi-split and legacy
(protocol 2.0) metadata all render. Not pure: ``_template`` reads the template and ``read_configs``
a written card's ``configs`` block. The card's rules and card files: ``card_rules``; verify's card
check: ``verify/card_check``; rewriting a card on a re-run: ``writer.restore_card``.
"""

from __future__ import annotations

import re
import shlex
from functools import lru_cache
from typing import Any, Mapping

import yaml

from whestbench.atomic import read_regular
from whestbench.compute.estimation import Estimation
from whestbench.format import command
from whestbench.format.card_facts import data_facts
from whestbench.format.checksums import checksums_block
from whestbench.format.reader import shard_glob
from whestbench.format.card_rules import (CARD_FIELDS, CARD_KEY, CARD_PRESETS, HOMEPAGE_RE, PRESET_OWNS, check_card,
                                          combine_card, hidden_char, load_yaml)
from whestbench.format.schema import DEFAULT_CONFIG, DatasetMeta
from whestbench.errors import InvalidDatasetError
from whestbench.text import format_count
from whestbench.values import is_int

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


README_MAX_BYTES = 1 << 20
"""A README.md we render is ~10 KiB (the citation at most 8,000 characters); one beyond 1 MiB is no card."""


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
    file) over them (``card_rules.combine_card``). ``preset`` ``whestbench-organisers``: the organisers'
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
    total = _total(md)
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


def _blocks(md: Any) -> dict[str, Mapping[str, Any]]:
    """``{split: its keys}`` in metadata order (``DatasetMeta.block``: the top level of a single-split
    dataset); an entry that is not an object has none."""
    meta = DatasetMeta.of(md)
    return {s: b if isinstance(b := meta.block(s), Mapping) else {} for s in meta.splits}


def _total(md: Any) -> int:
    """The rows the splits declare (a count that is not an integer counts none)."""
    meta = DatasetMeta.of(md)
    return sum(n for s in meta.splits if is_int(n := meta.n_mlps(s)))


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
    splits = _blocks(md)
    if not DatasetMeta.of(md).is_multi:
        (split, entry), = splits.items()
        config = entry.get("config") or DEFAULT_CONFIG
        return [] if config == DEFAULT_CONFIG else [_config(config, [split])]
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
    out = {name: DEFAULT_CONFIG for name in DatasetMeta.of(md).splits}
    for config in configs_block(md):
        for files in config["data_files"]:
            out[files["split"]] = config["config_name"]
    return out


def front_matter(md: dict[str, Any], fields: dict[str, str]) -> dict[str, Any]:
    """The card's YAML data (dumped with sorted keys, as the Hub's card tooling does); ``fields``: ``card_fields``'."""
    configs = configs_block(md)
    return {**({"configs": configs} if configs else {}),
            **({"repository": fields["repository"]} if fields.get("repository") else {}),
            "homepage": fields["homepage"], "language": ["code"], "license": fields["license"],
            "pretty_name": fields["pretty_name"], "size_categories": [card_size_category(_total(md))],
            "tags": TAGS + (["multi-split"] if DatasetMeta.of(md).is_multi else []), "task_categories": ["other"]}


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


def rebake_argv(md: dict[str, Any], split: str, *, seeds_file: str = "seeds.json") -> list[str]:
    """The ``whest dataset bake`` argv that re-creates ``split``.

    A recorded ``bake_command`` (top level for one split, per split entry when combined) wins,
    minus any slice flags unless the dataset itself is a partial, minus ``--card FILE``, with
    ``--output ./rebake-<split>``. Otherwise it is rebuilt from the metadata with ``--mlp-seeds seeds_file``. Reference torch bakes (no ``sampler``
    block) also pin ``--chunk-size``/``--mlps-per-batch``, because their sums depend on chunking.
    """
    entry = _blocks(md).get(split, {})
    recorded = command.parse_bake(entry.get("bake_command"))  # None (so the command is rebuilt) when unusable
    partial = not DatasetMeta.of(md).is_multi and bool(md.get("is_partial"))
    output = f"./rebake-{split}"
    if recorded is not None:  # a built-in card stays; a --card file is on the baker's machine (its fields are recorded)
        drop = () if partial else command.RANGE_FLAGS
        return command.bake_argv(recorded, output, drop=drop + (
            () if command.flag_value(recorded, "--card") in CARD_PRESETS else ("--card",)))
    rng, torch = md.get("mlp_range"), md.get("backend") == "torch"
    sliced = partial and isinstance(rng, list) and len(rng) == 2 and all(isinstance(v, int) for v in rng)
    pins = torch and "sampler" not in md
    return command.bake_argv([
        *command.BAKE_PREFIX,
        ("--n-mlps", _arg(md.get("total_n_mlps"), "<total_n_mlps>") if sliced else _arg(entry.get("n_mlps"), "<n_mlps>")),
        ("--mlp-range", sliced and f"{rng[0]}-{rng[1] - 1}"),  # the same slice of the whole (CLI ranges are inclusive)
        ("--n-samples", _arg(md.get("n_samples"), "<n_samples>")),
        ("--width", _arg(md.get("width"), "<width>")),
        ("--depth", _arg(md.get("depth"), "<depth>")),
        ("--mlp-seeds", seeds_file),
        ("--split", split),
        ("--config", entry.get("config") or DEFAULT_CONFIG),
        ("--torch", torch),
        ("--device", md["device"] if torch and isinstance(md.get("device"), str) else None),
        ("--chunk-size", md["chunk_size"] if pins and isinstance(md.get("chunk_size"), int) else None),
        ("--mlps-per-batch", md["mlps_per_batch"] if pins and isinstance(md.get("mlps_per_batch"), int) else None),
        *Estimation.from_metadata(md).flags(),
    ], output)


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


_HW_FIELDS = (("cuda_device_name", "GPU"), ("cpu_brand", "CPU"), ("machine", "arch"), ("os", "OS"),
              ("cpu_count_logical", "logical CPUs"), ("python_version", "Python"), ("numpy_version", "numpy"),
              ("torch_version", "torch"), ("whestbench_version", "whestbench"), ("mlp_count", "partial bakes"))


def _hw_line(hw: Any) -> str:
    hw = hw if isinstance(hw, dict) else {}
    return ", ".join(f"{label} `{hw[k]}`" for k, label in _HW_FIELDS if hw.get(k) not in (None, "", []))


def _provenance(md: dict[str, Any]) -> list[dict[str, Any]]:
    """One block per split: its hardware fingerprints, or the single host that baked it."""
    blocks = []
    for name, entry in _blocks(md).items():
        fps = entry.get("hardware_fingerprints")
        lines = [line for line in (_hw_line(fp) for fp in fps or []) if line] if isinstance(fps, list) else []
        if not lines:
            hw = md.get("hardware") if isinstance(md.get("hardware"), dict) else {}
            host = hw.get("cuda_device_name") or hw.get("cpu_brand") or md.get("cuda_device_name") or "unspecified host"
            detail = _hw_line(hw)
            lines = [f"Single-host bake on `{host}`" + (f" ({detail})" if detail else "")]
        blocks.append({"split": name, "lines": lines})
    return blocks


def card_context(md: dict[str, Any], *, repo_id: str, revision: str, fields: dict[str, str],
                 given: dict[str, str]) -> dict[str, Any]:
    """Every value the template shows, already formatted (the template holds prose only).

    The WhestBench organisers' text (their challenge badge, their names in the citation, credit to
    them in the license) is the preset ``whestbench-organisers`` only (recorded in metadata ``card``
    or given); any other card credits its authors, when it names them, and whestbench as the tool
    that baked it, and no organisation."""
    own = own_card(md, given)
    organisers = own.get("preset") == ORGANISERS
    multi = DatasetMeta.of(md).is_multi
    protocol = _protocol(md)
    configs = split_configs(md)
    splits = []
    for name, entry in _blocks(md).items():
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
    total, samplers = _total(md), _samplers(md)
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
        **{key: format_count(md.get(key), "unknown") for key in ("width", "depth", "n_samples", "total_n_mlps")},
        "schema_version": str(md.get("schema_version", "unknown")),
        "protocol": protocol,
        "sampler": samplers[0],
        "split_samplers": ([{"split": s["name"], **x} for s, x in zip(splits, samplers)]
                           if len({str(x) for x in samplers}) > 1 else []),
        "backend": str(md.get("backend", "unknown")),
        **{key: md.get(key) for key in ("device", "torch_version", "cuda_device_name", "whestbench_version",
                                        "created_at_utc", "merged_at_utc", "partials_count")},
        "is_partial": bool(md.get("is_partial")),
        "partial_range": _partial_range(md),
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
# The card read back: its configs block decides what `datasets` loads (verify/card_check.py, writer.restore_card)


UNREADABLE = (OSError, UnicodeDecodeError, yaml.YAMLError, ValueError, RecursionError)  # a card whose front matter cannot be read


def read_configs(readme: Any) -> Any:
    """The ``configs`` block of the card file ``readme`` (``[]`` when it has none); raises ``UNREADABLE``."""
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
