"""Where a dataset lives, for load, inspect, push and pull: ``parse_ref`` (the grammar ``ORG/NAME[@REV]``,
``hf://[datasets/]ORG/NAME[@REV]``) and ``resolve_source`` (a local directory or a Hub reference), as
docs/hub.md's "References" states. No network here: a refusal is a ``DatasetSourceError`` (a usage error)
raised before any call to the Hub (those are ``hub/client.py``'s).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from whestbench.errors import DatasetSourceError
from whestbench.paths import local_dataset_dir
from whestbench.text import sanitize, scrub

REPO_TYPE = "dataset"
DEFAULT_BRANCH = "main"
HUB_URL = "https://huggingface.co"


@dataclass(frozen=True)
class HubRef:
    """A dataset repo on the Hub and a revision (None: the default branch)."""

    repo_id: str
    revision: str | None = None

    @property
    def uri(self) -> str:
        return hf_ref(self.repo_id, self.revision or DEFAULT_BRANCH)


_REPO_PART = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")


def check_repo_id(repo_id: object) -> str:
    """``repo_id`` if it is a Hub dataset id ``ORG/NAME``, else DatasetSourceError.

    Guards against ids the Hub would reject only after the local checks (and, for push, a bare
    ``NAME`` that would silently land in the token owner's namespace).
    """
    ok = isinstance(repo_id, str) and repo_id.count("/") == 1 and len(repo_id) <= 96 and not repo_id.endswith(".git")
    if not ok or not all(_REPO_PART.match(p) and "--" not in p and ".." not in p for p in repo_id.split("/")):
        raise _not_an_id(repo_id)
    return repo_id


def _shown(text: object) -> str:
    """A reference as a message quotes it: scrubbed (``https://alice:pw@host/...`` given as a repo must not
    carry its password into the exception an API caller logs) and safe for a terminal."""
    return repr(sanitize(scrub(str(text)), 200))


def _not_an_id(text: object) -> DatasetSourceError:
    return DatasetSourceError(f"{_shown(text)} is not a Hub dataset id:",
                              fix="use ORG/NAME (letters, digits, '-', '_', '.'), for example aicrowd/whestbench-public, "
                                  "or a local dataset directory where one is accepted.")


def parse_ref(text: str, revision: str | None = None) -> HubRef:
    """``text`` in the reference grammar (module docstring) -> ``HubRef``; ``revision``: given separately.

    Raises DatasetSourceError for a trailing ``@``, two different revisions, or an invalid id.
    """
    if not isinstance(text, str):
        raise DatasetSourceError(f"a Hub dataset is named by a string ORG/NAME[@REV]; got {type(text).__name__}.",
                                 fix="Pass the name as a str.")
    if revision is not None and not isinstance(revision, str):
        raise DatasetSourceError(f"a revision is a branch, tag or commit name (a string); got {type(revision).__name__}.",
                                 fix="Pass it as a str, or leave it out for the default branch.")
    ref = text[len("hf://"):] if text.startswith("hf://") else text
    embedded = None
    if "@" in ref:
        ref, embedded = ref.split("@", 1)
        if not embedded:
            raise DatasetSourceError(f"{_shown(text)} ends in '@' with no revision;",
                                     fix="write ORG/NAME@REV or pass --revision.")
    if text.startswith("hf://") and ref.startswith("datasets/") and ref.count("/") == 2:
        ref = ref[len("datasets/"):]
    if revision == "":
        raise DatasetSourceError("--revision is empty;", fix="name a branch, tag or commit, or leave it out.")
    if embedded and revision and embedded != revision:
        raise DatasetSourceError(f"{_shown(text)} names revision {_shown(embedded)} but --revision is {_shown(revision)};",
                                 fix="give the revision once.")
    try:
        repo_id = check_repo_id(ref)
    except DatasetSourceError:
        raise _not_an_id(text) from None  # name what the user wrote, not what was left of it
    return HubRef(repo_id, revision or embedded)


def looks_like_path(text: str) -> bool:
    """Whether ``text`` plainly names a local path (never a Hub id): ``./x``, ``/x``, ``~/x``, ``dir/x``."""
    if text.startswith((".", "/", "~")) or os.sep != "/" and os.sep in text:
        return True
    parts = Path(text).expanduser().parts
    # "runs/set1" with a local "runs/" is a mistyped path, not the Hub repo "runs/set1"
    return len(parts) > 1 and Path(parts[0]).exists()


def resolve_source(source: str | os.PathLike, revision: str | None = None) -> Path | HubRef:
    """A local dataset directory (that exists) or a Hub reference, for load and inspect.

    A missing local path is DatasetSourceError("no such dataset directory"), never a Hub lookup.
    ``revision`` applies to Hub references only (a local directory has none).
    """
    if isinstance(source, os.PathLike):
        return local_dataset_dir(source)
    text = str(source)
    if not text.strip():
        return local_dataset_dir(text)  # refused: Path("") would read as the current directory
    if not text.startswith("hf://"):
        path = Path(text).expanduser()
        if path.exists() or looks_like_path(text):
            return local_dataset_dir(path)
    return parse_ref(text, revision)


def hf_ref(repo_id: str, revision: str) -> str:
    return f"hf://{repo_id}@{revision}"


def tree_url(repo_id: str, revision: str) -> str:
    return f"{HUB_URL}/datasets/{repo_id}/tree/{revision}"
