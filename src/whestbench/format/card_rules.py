"""The card's rules: which card fields a user may give (``--card FILE``, ``--card PRESET``, the card
flags, the Python API's ``card=``), how a card file is read, and the rules of the two blocks a bake
records for the card to report (metadata ``card`` and ``device_check``).

The flags, a card file, the API and metadata's ``card`` block share ``check_card``, so what one
refuses the others refuse with the same words; ``validate_metadata`` (``format/schema.py``) calls
``check_card_block`` and ``check_device_check``.
"""

from __future__ import annotations

import errno
import os
import re
from typing import Any, Callable, Mapping

import yaml

from whestbench.atomic import read_regular
from whestbench.compute.device_check import BLOCK_SUMS, PHILOX_WORDS, ROW_INVARIANCE
from whestbench.errors import FileTooLarge, InvalidDatasetError, UsageError
from whestbench.format import command as recorded
from whestbench.text import scrub, show_value
from whestbench.values import is_one_of

CARD_KEY = "card"
"""metadata.json's optional ``card`` block: the card fields (``CARD_FIELDS``) a bake was given by
``--card FILE`` and the card flags."""
CARD_FIELDS = ("pretty_name", "license", "homepage", "repository", "authors", "citation", "badges", "preset")
"""The keys of a card file (``--card FILE``) and of metadata's ``card`` block."""
CARD_PRESETS = {"whestbench-organisers": "the WhestBench organisers' card: the ARC White-Box Estimation Challenge "
                                         "title and page, the AIcrowd/whestbench repository, the ARC/AIcrowd citation"}
"""Built-in cards, chosen by ``--card NAME`` (or ``preset: NAME`` in a card file) and recorded as the
``preset`` field; without one the card is neutral (it credits no organisation)."""
PRESET_OWNS = ("repository", "authors", "citation", "badges")
"""The fields a preset brings itself: given with a preset, they are refused (the title, license and
homepage may still be set over it)."""
CARD_FILE_MAX_BYTES = 64 * 1024
"""A card file holds a few fields (a citation of at most 8,000 characters, 20 badges, 100 authors): 64 KiB."""
EDITED = "(was metadata.json edited? re-bake, or restore the file the bake wrote)."
"""The advice closing every refusal of a recorded block a bake wrote (recipe, device check)."""
_SEE_DOCS = 'See docs/hub.md, "The card".'
_CARD_EDITED = ("Was metadata.json edited? Restore it, or delete the key: push's card flags set the published card "
                "without it.")
SKIP_DEVICE_CHECK_FLAG = "--skip-device-check"
ACCEPT_NON_INVARIANT_FLAG = "--accept-non-invariant"


def refuse_if(bad: Any, problem: str, fix: str = EDITED) -> None:
    """``InvalidDatasetError(problem, fix=fix)`` when ``bad``: one metadata rule a line (``schema``'s too)."""
    if bad:
        raise InvalidDatasetError(problem, fix=fix)


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


_URL = (_is_url, "an http(s) URL without credentials, spaces, quotes, brackets or braces", lambda v: v)
_FIELDS: dict[str, tuple[Callable[[Any], bool], str, Callable[[Any], Any]]] = {
    "pretty_name": (lambda v: _is_line(v, 200), "one line of 1 to 200 printable characters, without control or "
                    "bidirectional-override characters", str.strip),
    "license": (lambda v: is_one_of(v, HUB_LICENSES), "a Hugging Face Hub license id such as cc-by-4.0, mit, "
                "apache-2.0 or cc0-1.0 ('other' for any other licence; the Hub's list: "
                "huggingface.co/docs/hub/repositories-licenses)", lambda v: v),
    "homepage": _URL,
    "repository": _URL,
    "authors": (lambda v: isinstance(v, list) and 1 <= len(v) <= 100 and all(_is_line(a, 200) for a in v),
                "a list of 1 to 100 names, each one line of printable characters", lambda v: [a.strip() for a in v]),
    "citation": (lambda v: isinstance(v, str) and bool(v.strip()) and len(v) <= 8000 and "```" not in v
                 and not any(hidden_char(c) and c not in "\n\t" for c in v), "BibTeX text of at most 8,000 characters "
                 "(lines and tabs allowed; no other control or bidirectional characters, no ```)", str.strip),
    "badges": (lambda v: isinstance(v, list) and len(v) <= 20 and all(isinstance(b, dict) and set(b) == {"label", "url"}
               and _is_line(b["label"], 60) and _is_url(b["url"]) for b in v), "a list of at most 20 {label, url} "
               "mappings (a label of 1 to 60 printable characters, an http(s) URL)",
               lambda v: [{"label": b["label"].strip(), "url": b["url"]} for b in v]),
}
"""Each card field but ``preset``: whether a value is good, what it must be (the refusal's words), and
the value kept."""


def check_card(data: dict[str, Any], where: str | None) -> dict[str, Any]:
    """Each card field of ``data`` checked, UsageError naming the field: ``where`` is the card file
    (``--card PATH``), ``"metadata card"`` for the metadata block, or None for the flags."""
    def name(key: str) -> str:
        if where is None:
            return "--" + key.replace("_", "-")
        return f"{where}.{key}" if where.startswith("metadata") else f"{where}: {key}"

    def bad(key: str, want: str, value: Any) -> UsageError:
        return UsageError(f"{name(key)} must be {want}; got {show_value(value, max_len=120)}.", fix=_SEE_DOCS)

    unknown = [k for k in data if k not in CARD_FIELDS]
    if unknown:
        raise UsageError(f"unknown field {show_value(unknown[0], max_len=60)};", where=where,
                         fix=f"a card's fields are {', '.join(CARD_FIELDS)}.")
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key == "preset":
            continue  # below, with the fields it rules out
        if _credential(value):
            raise UsageError(f"{name(key)} holds what looks like a credential (a token, a password in a URL, a "
                             "credential-named query parameter); a card is published for anyone to read:",
                             fix="leave it out.")
        good, want, kept = _FIELDS[key]
        if not good(value):
            raise bad(key, want, value)
        out[key] = kept(value)
    if "preset" in data:
        value = data["preset"]
        if not isinstance(value, str) or value not in CARD_PRESETS:
            raise bad("preset", f"a built-in card ({', '.join(CARD_PRESETS)})", value)
        owned = [k for k in PRESET_OWNS if k in data]
        if owned:
            raise UsageError(f"{name('preset')} {value} brings its own {', '.join(PRESET_OWNS)};",
                             fix=f"drop {', '.join(repr(k) for k in owned)} or the preset.")
        out["preset"] = value
    return out


def check_card_block(block: Any) -> None:
    """The metadata ``card`` block, by the rules the card flags and ``--card FILE`` follow."""
    if block is None:
        return
    refuse_if(not isinstance(block, dict), f"metadata {CARD_KEY} must be an object, not "
              f"{show_value(block, max_len=60)}", fix="(was metadata.json edited? restore it, or delete the key: "
              "push's card flags set the published card without it).")
    try:
        check_card(block, f"metadata {CARD_KEY}")
    except UsageError as e:
        raise InvalidDatasetError.from_error(e, fix=_CARD_EDITED) from None


def check_card_fields(*, pretty_name: str | None = None, license: str | None = None,
                      homepage: str | None = None, card_file: str | None = None) -> dict[str, Any]:
    """The card fields a user gave, checked before any work (UsageError, one line naming the fix):
    ``--card FILE`` (``read_card_file``) or ``--card PRESET`` (``CARD_PRESETS``: ``{"preset": NAME}``)
    and, over it, ``--pretty-name``, ``--license``, ``--homepage``. Only those given are returned."""
    out = ({"preset": card_file} if card_file in CARD_PRESETS else read_card_file(card_file) if card_file is not None
           else {})
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
                     f"({', '.join(CARD_PRESETS)}) or a card file's path; got {type(card).__name__}.", fix=_SEE_DOCS)


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
    flag, file = f"--card {path!r}", "give a YAML or JSON card file"
    try:
        raw = read_regular(path, CARD_FILE_MAX_BYTES, "card file")
    except FileTooLarge as e:
        raise UsageError.from_error(e, where="--card", fix=f"A card file holds a few fields ({', '.join(CARD_FIELDS)}).") from None
    except OSError as e:
        if isinstance(e, FileNotFoundError) and os.sep not in path and not path.endswith((".yaml", ".yml", ".json")):
            raise UsageError("no such card file, and no built-in card of that name;", where=flag,
                             fix=f"{file} or one of {', '.join(CARD_PRESETS)}.") from None
        if e.errno == errno.EINVAL and not isinstance(e, FileNotFoundError):
            raise UsageError(f"{flag} is not a regular file;", fix=f"{file}.") from None
        raise UsageError(f"cannot open it ({e.strerror or e});", where=flag, fix=f"{file}.") from None
    try:
        data = load_yaml(raw.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError, RecursionError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if isinstance(e, yaml.composer.ComposerError) and "aliases" in str(e):
            first = "YAML aliases (*name) are not accepted in a card"
        raise UsageError(f"{flag} is not UTF-8 YAML or JSON ({first});", fix="fix the file.") from None
    if not isinstance(data, dict) or not data:
        raise UsageError(f"{flag} must hold a mapping of card fields ({', '.join(CARD_FIELDS)}); "
                         f"got {type(data).__name__}.", fix=_SEE_DOCS)
    return check_card(data, f"--card {path}")


def check_device_check(block: Any, *, where: str, command: Any) -> None:
    """The ``device_check`` block (a torch bake's: ``schema.validate_metadata`` checks the backend) says
    what the bake's device check found, consistently: a verdict that agrees with its checks, each of the
    three checks once, a skip without checks, and only the failures the bake may accept (row-invariance,
    with ``--accept-non-invariant``); a recorded bake ``command`` must carry the flag a skip or an
    acceptance needs."""
    bad = f"metadata {where}"
    refuse_if(not isinstance(block, dict), f"{bad} must be an object, not {show_value(block, max_len=60)}")
    for key in ("passed", "skipped"):
        refuse_if(not isinstance(block.get(key), bool),
                  f"{bad}.{key} must be true or false, not {show_value(block.get(key), max_len=60)}")
    checks = block.get("checks", [])
    refuse_if(not isinstance(checks, list) or not all(
        isinstance(c, dict) and isinstance(c.get("passed"), bool) and isinstance(c.get("name"), str) for c in checks),
        f"{bad}.checks must be a list of {{name, passed: true|false}} objects")
    names = [c["name"] for c in checks]
    accepted = block.get("accepted", [])
    refuse_if(not isinstance(accepted, list) or not all(isinstance(a, str) for a in accepted),
              f"{bad}.accepted must be a list of check names")
    if block["skipped"]:
        refuse_if(block["passed"] or checks or accepted,
                  f"{bad} says skipped, so it cannot pass, hold checks or accept any")
    else:
        want = (PHILOX_WORDS, BLOCK_SUMS, ROW_INVARIANCE)
        refuse_if(not names or len(set(names)) != len(names) or not set(names) <= set(want),
                  f"{bad}.checks are {show_value(names, max_len=60)}; a device check runs {', '.join(want)}, each once")
        failed = [c["name"] for c in checks if not c["passed"]]
        refuse_if(block["passed"] != (not failed), f"{bad}.passed is {str(block['passed']).lower()} but "
                  + (f"the check(s) {', '.join(failed)} failed" if failed else "every check passed"))
        refuse_if(sorted(accepted) != sorted(failed) or not set(accepted) <= {ROW_INVARIANCE},
                  f"{bad} accepts {accepted or 'no check'} while {failed or 'no check'} failed: a bake accepts only a "
                  f"failed {ROW_INVARIANCE} ({ACCEPT_NON_INVARIANT_FLAG}) and refuses every other failure")
    argv = recorded.parse(command)
    if argv is not None and argv[:3] == ["whest", "dataset", "bake"]:
        need = SKIP_DEVICE_CHECK_FLAG if block["skipped"] else ACCEPT_NON_INVARIANT_FLAG if accepted else None
        refuse_if(need is not None and need not in argv, f"{bad} says {'skipped' if block['skipped'] else 'accepted'}, "
                  f"but the recorded bake_command has no {need}")
