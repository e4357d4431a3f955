"""The Hugging Face libraries and the environment they read: ``datasets`` and ``huggingface_hub`` are
imported here (``import_hub``), and the settings they parse are checked here (``setting_problems``).

huggingface_hub parses some settings once, when it is first imported: ``HF_ENDPOINT``'s port
(``urlparse(...).port``), the timeouts as integers; ``datasets`` its in-memory size as a number.
A value they cannot parse made every import fail, so ``HF_ENDPOINT=http://alice:p/w@host:9`` (a ``/``
in the password) broke a purely local verify, merge or load, with huggingface_hub's own
``Error importing huggingface_hub.hf_api: Port could not be cast to integer value as 'p'`` (a piece
of the password) on stdout. ``import_hub`` imports them with such settings set aside for the
import only (a local verb never reaches the Hub); a verb that does reach the Hub refuses them first
(``hub.client.require_settings``: one line naming the variable, the value scrubbed, exit 2). Every
``import datasets`` / ``import huggingface_hub`` in ``src/`` goes through ``import_hub``
(``tests/test_hubenv.py`` checks it).
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import threading
from types import ModuleType
from urllib.parse import urlsplit

ENDPOINT_ENV = "HF_ENDPOINT"
_lock = threading.Lock()
set_aside: tuple[str, ...] = ()
"""The settings the libraries were imported without (empty: imported with the environment as it is)."""


_UNREADABLE = ("its host or port cannot be read (a port is a number up to 65535; a password holding '/', '?', "
               "'#' or '@' must be percent-encoded, as %2F, %3F, %23, %40)")


def _url_problem(value: str, *, proxy: bool = False) -> str | None:
    """An endpoint (an http(s) URL the client appends paths to) or a proxy URL httpx can use
    (``[scheme://][user:pass@]host[:port]``). Either needs a port that is a number: a password holding an
    unescaped ``/`` made httpx fail inside the call with ``Invalid port``, a piece of the password."""
    try:
        parts = urlsplit(value if not proxy or "://" in value else "http://" + value)
        parts.port  # noqa: B018  (raises for a port that is no number, or out of range)
    except ValueError:
        return _UNREADABLE
    if not proxy and parts.scheme not in ("http", "https"):
        return "it is not an http:// or https:// URL"
    if not parts.hostname:
        return "it names no host"
    if not proxy and (parts.query or parts.fragment):
        return "it has a query or fragment (the client appends paths to it)"
    return None


def _parses(kind: type, problem: str):
    """A test that ``kind(value)`` parses, else ``problem``."""
    def test(value: str) -> str | None:
        try:
            kind(value)
        except ValueError:
            return problem
        return None
    return test


_WHOLE = _parses(int, "it is not a whole number of seconds")
_PARSED = {ENDPOINT_ENV: _url_problem, "HF_HUB_ETAG_TIMEOUT": _WHOLE, "HF_HUB_DOWNLOAD_TIMEOUT": _WHOLE,
           "HF_DATASETS_IN_MEMORY_MAX_SIZE": _parses(float, "it is not a number of bytes"),
           **dict.fromkeys(("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy"),
                           functools.partial(_url_problem, proxy=True))}
"""The settings the libraries parse (at import or at their first call) and our test of each: what
huggingface_hub 0.2x–2.x and datasets 2.x–5.x would refuse, an endpoint no Hub call could use, and the
proxies the HTTP client reads at its first request."""
_AT_IMPORT = (ENDPOINT_ENV, "HF_HUB_ETAG_TIMEOUT", "HF_HUB_DOWNLOAD_TIMEOUT", "HF_DATASETS_IN_MEMORY_MAX_SIZE")


def setting_problems() -> list[tuple[str, str]]:
    """``[(variable, what is wrong)]`` for each Hugging Face setting in the environment that no Hub call
    could use; an empty ``HF_ENDPOINT`` counts (the client would send requests to no host)."""
    found = []
    for name, test in _PARSED.items():
        value = os.environ.get(name)
        if value is None or (value == "" and name != ENDPOINT_ENV):
            continue
        problem = test(value) if value else "it is empty"
        if problem:
            found.append((name, problem))
    return found


def import_hub(name: str) -> ModuleType:
    """``importlib.import_module(name)`` for ``datasets``, ``huggingface_hub`` or one of their modules.

    The first import happens with the settings the libraries cannot parse set aside (removed from
    ``os.environ`` for that import only, under a lock), so that they load; the libraries then hold their
    defaults for those settings, and ``hub.client.require_settings`` refuses any Hub call while the
    environment still holds the bad value."""
    global set_aside
    if "huggingface_hub.constants" in sys.modules and ("datasets" in sys.modules or not name.startswith("datasets")):
        return importlib.import_module(name)
    with _lock:
        bad = tuple(n for n, _ in setting_problems() if n in _AT_IMPORT and os.environ.get(n))
        saved = {n: os.environ.pop(n) for n in bad}
        try:
            if bad:
                # huggingface_hub loads its modules lazily: those that parse the settings are loaded now
                importlib.import_module("huggingface_hub.constants")
                importlib.import_module("huggingface_hub.hf_api")
                set_aside = tuple(sorted({*set_aside, *bad}))
            return importlib.import_module(name)
        finally:
            os.environ.update(saved)
