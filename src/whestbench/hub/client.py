"""Every call to the Hugging Face Hub (docs/hub.md has the policy in full):

* ``call``: one retry policy. Network failures (connection, DNS, timeout, HTTP 408/429/5xx) are
  retried with backoff for ``retry_seconds()``, announced once, then one ``HubError``; a commit is
  never retried (re-running the push resumes it);
* ``fetch_metadata``: the repo's file list at a resolved commit, then ``metadata.json`` at that
  commit (a repo without one is told apart from an unreachable Hub by what the Hub lists);
* ``explain``: one wording. Each Hub failure becomes one line naming the fix (``hf auth login``,
  the repo id, ``--revision``, the network), scrubbed of tokens (``text.scrub``) and control
  characters.

The reference grammar (``HubRef``) is ``hub/ref.py``.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

from whestbench import hubenv
from whestbench.atomic import read_regular
from whestbench.format.reader import METADATA_FILE, read_metadata_file
from whestbench.hub.ref import HUB_URL, REPO_TYPE, HubRef
from whestbench.errors import DatasetSourceError, HubError, InvalidDatasetError, UsageError
from whestbench.events import Event, EventSink
from whestbench.text import one_line, remember_token, sanitize, scrub, show_value

RETRY_SECONDS = 20.0
RETRY_ENV = "WHEST_HUB_RETRY_SECONDS"
_MAX_DELAY = 8.0
_LOGIN = "log in with `hf auth login` or set HF_TOKEN"
_HUB_SAYS = "(fix what the Hub names, then re-run)"
_CLIENT_FAILED = "(re-run; report it if it persists)"

log = logging.getLogger("whestbench.hub")
T = TypeVar("T")

# Patched by tests (a fake clock makes the retry policy instant to test).
_sleep = time.sleep
_clock = time.monotonic


# ------------------------------------------------------------ Errors -> one line that names the fix


def _transport_errors() -> tuple[type[BaseException], ...]:
    """Connection/timeout error classes of the HTTP client huggingface_hub uses (whichever is loaded)."""
    found: list[type[BaseException]] = []
    for mod, names in (("requests.exceptions", ("ConnectionError", "Timeout", "ChunkedEncodingError")),
                       ("httpx", ("TransportError",)), ("httpx2", ("TransportError",)),
                       ("urllib3.exceptions", ("ProtocolError", "NewConnectionError", "TimeoutError"))):
        m = sys.modules.get(mod)
        for name in names:
            cls = getattr(m, name, None) if m is not None else None
            if isinstance(cls, type) and issubclass(cls, BaseException):
                found.append(cls)
    return tuple(found)


class _Absent(Exception):
    """Stands in for an exception class this huggingface_hub release does not define."""


def hub_exception(name: str) -> type[BaseException]:
    """huggingface_hub's exception class ``name`` (``errors`` since 0.22, ``utils`` before), or _Absent."""
    for mod in ("huggingface_hub.errors", "huggingface_hub.utils"):
        try:
            cls = getattr(importlib.import_module(mod), name, None)
        except ImportError:
            continue
        if isinstance(cls, type) and issubclass(cls, BaseException):
            return cls
    return _Absent


def _status(exc: BaseException) -> int | None:
    status = getattr(getattr(exc, "response", None), "status_code", None)
    return status if isinstance(status, int) else None


_TRANSIENT_STATUS = (408, 429, 500, 502, 503, 504)


def is_network_error(exc: BaseException) -> bool:
    """Whether ``exc`` says the Hub could not be reached or answered (as opposed to refusing the request).

    ``LocalEntryNotFoundError`` is how ``hf_hub_download`` reports an unreachable Hub when the file
    is not cached; it subclasses ``EntryNotFoundError``, so it must be told apart before that.
    """
    if isinstance(exc, hub_exception("OfflineModeIsEnabled")):
        return False  # a setting, not a failure: retrying cannot help
    if isinstance(exc, hub_exception("LocalEntryNotFoundError")):
        return True
    if isinstance(exc, hub_exception("HfHubHTTPError")):
        return _status(exc) in _TRANSIENT_STATUS
    return isinstance(exc, (*_transport_errors(), ConnectionError, TimeoutError))


def _endpoint() -> str:
    """The Hub's URL as messages show it (a ``user:pass@`` in HF_ENDPOINT masked)."""
    try:
        return scrub(str(hubenv.import_hub("huggingface_hub.constants").ENDPOINT))
    except (ImportError, AttributeError):
        return HUB_URL


def _reason(exc: BaseException, token: object) -> str:
    """The exception's own text as one safe line (scrubbed of tokens and control characters)."""
    text = one_line(sanitize(scrub(str(exc), token)))
    name = type(exc).__name__
    return f"{name}: {text}" if text else name


def network_error(exc: BaseException, *, waited: float, token: object = None) -> HubError:
    """The one line for an unreachable Hub (after ``waited`` seconds of retrying)."""
    status = _status(exc)
    if status == 429:
        return HubError("the Hub is rate-limiting these requests (429):",
                        fix="wait a few minutes and re-run; finished files are skipped.")
    if status is not None:
        return HubError(f"the Hub failed with {status} ({_reason(exc, token)}):", fix="try again later; re-running resumes.")
    tried = f" after retrying for {waited:g} s" if waited > 0 else ""
    return HubError(f"could not reach the Hugging Face Hub at {_endpoint()}{tried} ({_reason(exc, token)}). The network "
                    "is the problem:", fix="check the connection (and HF_ENDPOINT / proxy settings), then re-run.")


def explain(exc: BaseException, *, ref: HubRef, token: object = None) -> Exception | None:
    """The exception to raise instead of ``exc`` (a Hub or network error), or None to let it through."""
    raw = one_line(sanitize(scrub(str(exc), token)))
    repo_id, revision = ref.repo_id, ref.revision
    url = f"{HUB_URL}/datasets/{repo_id}"
    if isinstance(exc, hub_exception("HFValidationError")):
        return DatasetSourceError(f"invalid repo id or revision for the Hub: {raw}",
                                  fix="Check the repo id (ORG/NAME) and --revision.")
    if isinstance(exc, hub_exception("OfflineModeIsEnabled")):
        return HubError("HF_HUB_OFFLINE is set, so the Hub cannot be reached:", fix="unset it and re-run.")
    if is_network_error(exc):
        return network_error(exc, waited=0, token=token)
    # in this order: a gated repo's error is also a RepositoryNotFoundError
    for name, problem, fix in (
        ("GatedRepoError", f"{repo_id} is gated:", f"accept its conditions at {url}, then {_LOGIN}."),
        ("DisabledRepoError", f"{repo_id} has been disabled on the Hub;", "use another repo."),
        ("RepositoryNotFoundError", f"dataset repo {repo_id!r} was not found or your token cannot access it:",
         f"check the repo id (ORG/NAME), and for a private repo {_LOGIN}."),
        ("RevisionNotFoundError", f"revision {sanitize(scrub(str(revision)))!r} does not exist in {repo_id}:",
         f"pass an existing branch, tag or commit with --revision (see {url}/tree/main)."),
        ("EntryNotFoundError", f"a file is missing from {repo_id}: {raw}.", "Check --revision, or re-push the dataset."),
        ("LocalTokenNotFoundError", "no Hugging Face token found:", f"{_LOGIN}."),
    ):
        if isinstance(exc, hub_exception(name)):
            return HubError(problem, fix=fix)
    if isinstance(exc, hub_exception("HfHubHTTPError")):
        status = _status(exc)
        fixes = {
            401: ("the Hub rejected the credentials (401):", f"{_LOGIN} to a valid token."),
            403: (f"your token may not write to or read {repo_id} (403):", "use a token with write access to "
                  "that namespace (fine-grained tokens need it granted), or ask the org for access."),
            409: (f"the Hub refused the change as a conflict (409): {raw}", _HUB_SAYS),
            412: (f"{repo_id} changed while pushing (someone else committed):",
                  "re-run the command; finished files are skipped."),
        }
        problem, fix = fixes.get(status, (f"the Hub refused the request: {raw}", _HUB_SAYS))
        return HubError(problem, fix=fix)
    if type(exc).__module__.startswith("huggingface_hub"):
        return HubError(f"the Hugging Face Hub client failed: {raw}", fix=_CLIENT_FAILED)
    return None


# --------------------------------------------------------------------------------- The retry policy


def retry_seconds() -> float:
    """How long a Hub call keeps retrying network failures: ``WHEST_HUB_RETRY_SECONDS`` or ``RETRY_SECONDS``."""
    text = os.environ.get(RETRY_ENV, "").strip()
    if not text:
        return RETRY_SECONDS
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 3600:  # NaN fails both comparisons
        raise UsageError(f"{RETRY_ENV}={text!r} must be a number of seconds from 0 to 3600 (0: no retry).",
                         fix=f"Set it to one, or unset {RETRY_ENV}.")
    return value


def _log_sink(event: Event) -> None:
    if event.message:
        log.warning("%s", event.message)


def call(
    fn: Callable[[], T],
    *,
    what: str,
    ref: HubRef,
    token: object = None,
    on_event: EventSink | None = None,
    retry: bool = True,
    translate: bool = True,
) -> T:
    """``fn()`` under the retry policy; its Hub failures become one-line HubError/DatasetSourceError.

    ``what``: the action, prefixed to the message (``pulling hf://org/name@main``). ``retry``: False
    for calls that are not safe to repeat (a commit). ``translate``: False to let failures other
    than network ones through unchanged (a caller that handles them itself). ``token`` is remembered
    (``text.remember_token``), so that every message scrubs it.
    """
    remember_token(token)
    emit = on_event or _log_sink
    budget: float | None = None
    deadline = 0.0
    delay = 1.0
    while True:
        failure: BaseException | None = None
        try:
            return fn()
        except (UsageError, InvalidDatasetError, HubError):
            raise
        except Exception as exc:
            if not is_network_error(exc):
                better = explain(exc, ref=ref, token=token) if translate else None
                if better is None:
                    if not leaks_secret(exc, token):
                        raise
                    better = HubError(f"the Hugging Face Hub client failed: {_reason(exc, token)}", fix=_CLIENT_FAILED)
                if isinstance(better, HubError):
                    better = HubError.from_error(better, where=what)
                failure = better
            else:
                if budget is None:
                    budget = retry_seconds() if retry else 0.0
                    deadline = _clock() + budget
                    if budget > 0:
                        emit(Event("note", message=(
                            f"Hub unreachable ({_reason(exc, token)}); retrying for up to {budget:g} s "
                            f"(set {RETRY_ENV} to change)"
                        ), data={"retry_seconds": budget}))
                if deadline - _clock() <= 0:
                    failure = HubError.from_error(network_error(exc, waited=budget, token=token), where=what)
        if failure is not None:
            # Raised here, outside the handler, so that it chains nothing: the client's own error
            # may quote the request's headers ("Bearer hf_..."), and a traceback prints every
            # chained exception. The message above is its scrubbed summary.
            raise failure
        _sleep(min(delay, max(deadline - _clock(), 0.0)))
        delay = min(delay * 2, _MAX_DELAY)


def leaks_secret(exc: BaseException, token: object = None) -> bool:
    """Whether ``exc`` or an exception it chains shows a token (what ``scrub`` would mask)."""
    seen = 0
    while exc is not None and seen < 16:
        text = str(exc)
        if scrub(text, token) != text:
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


# ---------------------------------------------------------------- The settings every Hub call needs


def require_settings() -> None:
    """Refuse (UsageError, exit 2), before any Hub call, a Hugging Face setting no Hub call could use
    (``hubenv.setting_problems``: an ``HF_ENDPOINT`` with a port that is no number, a password holding an
    unescaped ``/``, no scheme, a query; a timeout that is no number), naming the variable and showing
    its value scrubbed; and a process whose Hugging Face libraries were loaded with such a setting set
    aside (``hubenv.import_hub``): they hold the default then, not the setting now in the environment."""
    for name, why in hubenv.setting_problems():
        shown = show_value(scrub(os.environ.get(name, "")), max_len=120)
        raise UsageError(f"{name}={shown} cannot be used for the Hub: {why};",
                         fix="fix it or unset it (docs/hub.md, \"Settings\").")
    if hubenv.set_aside:
        raise UsageError(f"this process loaded the Hugging Face libraries while {', '.join(hubenv.set_aside)} held a "
                         "value they cannot use, so they run with the default instead of the setting now in the "
                         "environment;", fix="run the Hub command in a new process.")


TOKEN_FILE_MAX_BYTES = 64 * 1024
"""A token file (``--token-file``, the stored login) holds a Hub token (37 characters) on its first line: 64 KiB
leaves room for anything a password manager adds after it, and ``--token-file /dev/zero`` is refused
instead of read without end."""


def check_token(token: object, *, allow_bool: bool = False) -> None:
    """A Hub token as every verb and API call takes it: None (HF_TOKEN or the stored login), one word of
    printable characters, or (``load_dataset``, as ``datasets``) a bool. UsageError otherwise, never
    showing the value: a token holding a newline or a space reached huggingface_hub's HTTP client, whose
    error quoted the header it could not send."""
    if token is None or (allow_bool and isinstance(token, bool)):
        return
    if not isinstance(token, str) or not token or any(c.isspace() or not c.isprintable() for c in token):
        what = type(token).__name__ if not isinstance(token, str) else "a string holding spaces or control characters"
        raise UsageError(f"the Hub token must be one word of printable characters (got {what});",
                         fix="pass the token, or leave it out to use HF_TOKEN or `hf auth login`.")
    remember_token(token)


def hub_client() -> Any:
    """The ``huggingface_hub`` module, once the settings pass ``require_settings``."""
    require_settings()
    return hubenv.import_hub("huggingface_hub")


# ----------------------------------------------------------------------------- Reading from the Hub


def offline_mode() -> bool:
    """Whether HF_HUB_OFFLINE is set (then the Hugging Face cache is the only source)."""
    constants = hubenv.import_hub("huggingface_hub.constants")

    check = getattr(constants, "is_offline_mode", None)
    return bool(check() if callable(check) else constants.HF_HUB_OFFLINE)


def token_source(flag: str | None = None) -> str | None:
    """Where the token a Hub call would send comes from, in words, or None when there is none: ``flag``
    (``--token``/``--token-file``, when the command got one), else huggingface_hub's own order:
    ``HF_OIDC_RESOURCE`` (exchanged at the call), ``HF_TOKEN`` (or ``HUGGING_FACE_HUB_TOKEN``), the
    login ``hf auth login`` stored. Never the token, its length or a part of it; nothing is sent, and
    a stored login is only tested for being non-empty (``get_token`` could refresh it over the network)."""
    constants = hubenv.import_hub("huggingface_hub.constants")  # a dry run is local: a bad HF_ENDPOINT must not stop it
    if flag:
        return flag
    if os.environ.get("HF_OIDC_RESOURCE"):
        return "HF_OIDC_RESOURCE (a token exchanged when the push starts)"
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        if (os.environ.get(name) or "").strip():
            return name
    stored = Path(constants.HF_TOKEN_PATH)
    with contextlib.suppress(OSError):  # FileTooLarge too: no token a login stores
        if stored.is_file() and read_regular(stored, TOKEN_FILE_MAX_BYTES, "token file").strip():
            return f"the login `hf auth login` stored ({stored})"
    return None


def repo_info(ref: HubRef, *, token: object = None, files_metadata: bool = False, what: str,
              on_event: EventSink | None = None) -> Any:
    """The repo at ``ref``'s revision: its commit (``.sha``) and files (``.siblings``)."""
    api = hub_client().HfApi()
    return call(lambda: api.dataset_info(ref.repo_id, revision=ref.revision, files_metadata=files_metadata, token=token),
                what=what, ref=ref, token=token, on_event=on_event)


def not_a_dataset(where: str) -> InvalidDatasetError:
    return InvalidDatasetError(f"{where} has no metadata.json, so it is not a WhestBench dataset:",
                               fix="check the repo id and revision (a plain Hugging Face dataset loads with "
                                   "datasets.load_dataset).")


@dataclass(frozen=True)
class RemoteMetadata:
    """A Hub dataset's ``metadata.json`` and the commit it came from (None: read from the offline cache)."""

    ref: HubRef
    metadata: dict[str, Any]
    commit: str | None
    files: tuple[str, ...]  # the repo's files at that commit (empty when offline)


def fetch_metadata(ref: HubRef, *, token: object = None, what: str | None = None,
                   on_event: EventSink | None = None) -> RemoteMetadata:
    """``ref``'s ``metadata.json`` (parsed, not validated), fetched at one resolved commit.

    With HF_HUB_OFFLINE set it comes from the Hugging Face cache, or the error says it is not there.
    """
    huggingface_hub = hub_client()
    remember_token(token)
    what = what or f"reading {ref.uri}"
    if offline_mode():
        try:
            path = huggingface_hub.hf_hub_download(ref.repo_id, METADATA_FILE, repo_type=REPO_TYPE,
                                                   revision=ref.revision, token=token)
        except hub_exception("LocalEntryNotFoundError"):
            raise HubError(f"HF_HUB_OFFLINE is set and {ref.uri}'s metadata.json is not in the Hugging Face cache:",
                           where=what, fix="unset HF_HUB_OFFLINE so it can be fetched.") from None
        parent = Path(path).parent
        commit = parent.name if parent.parent.name == "snapshots" else None
        return RemoteMetadata(ref, read_metadata_file(path), commit, ())
    info = repo_info(ref, token=token, what=what, on_event=on_event)
    files = tuple(s.rfilename for s in (getattr(info, "siblings", None) or []))
    if METADATA_FILE not in files:
        raise not_a_dataset(ref.uri)
    commit = info.sha
    path = call(lambda: huggingface_hub.hf_hub_download(ref.repo_id, METADATA_FILE, repo_type=REPO_TYPE,
                                                        revision=commit, token=token),
                what=what, ref=ref, token=token, on_event=on_event)
    return RemoteMetadata(ref, read_metadata_file(path), commit, files)
