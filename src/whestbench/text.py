"""How numbers and untrusted text are shown to people: sizes, durations, counts, one-line messages.

One home for each convention, so every verb prints sizes the same way (binary units: KiB, MiB,
GiB, as ``ls -h`` and ``du -h``), and text that comes from a dataset or a server never reaches a
terminal with its control characters (an escape sequence in ``metadata.json`` could rewrite the
screen, hide lines or set the window title), nor with a Hugging Face token in it (``scrub``).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

_CONTROL = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI sequences: colours, cursor moves, erase
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC sequences: window title, hyperlinks
    r"|\x1b[@-Z\\-_]"  # other two-byte escapes
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"  # C0 (but tab and newline) and C1 controls, DEL
)


def format_bytes(n: int | float) -> str:
    """``1536`` -> ``'1.5 KiB'``; bytes below 1024 as ``'512 B'``."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{int(n)} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def format_duration(seconds: float) -> str:
    """``42.0`` -> ``'42.0 s'``, ``9000`` -> ``'2.5 h'``: one unit, the largest that keeps the number >= 2."""
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        return "unknown"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    if seconds < 2 * 365.25 * 86400:
        return f"{seconds / 86400:.1f} days"
    return f"{seconds / (365.25 * 86400):,.0f} years"


def format_rate(x: float) -> str:
    """A rate with 3 significant digits, never in exponent notation: ``0.0312``, ``1.42``, ``46.4``,
    ``312``, ``4,123`` (an integer part keeps all its digits)."""
    import math

    if not math.isfinite(x) or x == 0:
        return "0" if x == 0 else str(x)
    digits = max(0, 2 - math.floor(math.log10(abs(x))))
    r = round(x, digits)
    if r:  # rounding may carry into the next decade (9.996 -> 10.0): one digit fewer then
        digits = max(0, 2 - math.floor(math.log10(abs(r))))
    return f"{r:,.{digits}f}"


def format_clock(seconds: float) -> str:
    """``3725`` -> ``'1:02:05'`` (an ETA or elapsed time in a log line)."""
    if seconds != seconds or seconds < 0 or seconds == float("inf"):
        return "?"
    if seconds >= 100 * 3600:  # an hours:minutes clock stops reading well here
        return format_duration(seconds)
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}"


def format_count(n: Any, other: str | None = None) -> str:
    """``1000000`` -> ``'1,000,000'``; an int of more than 21 digits -> ``'1.00e400'`` (a mistyped
    exponent must not fill the screen); anything that is not an int (a bool is not) is shown as it
    is, or as ``other`` when given (a card's "unknown")."""
    if not isinstance(n, int) or isinstance(n, bool):
        return str(n) if other is None else other
    if abs(n) >= 10**21:
        import math

        e = int(math.log10(abs(n)))
        lead = abs(n) // 10 ** (e - 2)
        if lead >= 1000:  # log10 rounded up across a power of ten
            e, lead = e + 1, lead // 10
        return f"{'-' if n < 0 else ''}{lead // 100}.{lead % 100:02d}e{e}"
    return f"{n:,}"


def plural(n: int, word: str, many: str | None = None) -> str:
    """``plural(1, 'file')`` -> ``'1 file'``, ``plural(3, 'file')`` -> ``'3 files'``."""
    return f"{n} {word}" if n == 1 else f"{n} {many or word + 's'}"


def one_line(text: Any, max_words: int | None = None) -> str:
    """Any text as one line: runs of whitespace (newlines included) become one space.

    ``max_words`` keeps the first words only: a distributed rank's message about another process's
    failure (a torch store error can quote pages of C++ context) stays one short line.
    """
    words = str(text).split()
    return " ".join(words if max_words is None else words[:max_words])


def error_line(exc: BaseException, max_words: int | None = None) -> str:
    """An exception's message as one line safe for a terminal (secrets scrubbed); its class name if the
    message is empty."""
    return one_line(sanitize(scrub(str(exc) or type(exc).__name__)), max_words)


def show_value(v: Any, *, max_len: int | None = None, absent: str | None = None) -> str:
    """A metadata value in a message, the one rendering: a string as its repr, anything else as the
    JSON it is in ``metadata.json`` (``null``, ``true``, ``[1, 2]``, objects with sorted keys); None as
    ``absent`` where given. Safe for a terminal, cut to ``max_len`` with "..."."""
    if v is None and absent is not None:
        return absent
    text = sanitize(repr(v) if isinstance(v, str) else json.dumps(v, sort_keys=True, default=repr))
    return text if max_len is None or len(text) <= max_len else text[: max_len - 3] + "..."


def sanitize(text: Any, max_len: int | None = None) -> str:
    """``text`` safe to print on a terminal: escape sequences and control characters removed.

    For anything read from a dataset, a Hub response or another process. Tabs and newlines stay;
    ``max_len`` cuts very long values (with an ellipsis) so one field cannot flood a screen.
    """
    out = _CONTROL.sub("", str(text))
    if max_len is not None and len(out) > max_len:
        out = out[: max(0, max_len - 1)] + "…"
    return out


# Hugging Face tokens: masked wherever a message or traceback might echo one

_SECRETS: set[str] = set()
_TOKEN_RE = re.compile(r"hf_[A-Za-z0-9]{8,}")
_BEARER_RE = re.compile(r"(?i)(bearer\s+)\S+")


def remember_token(token: object) -> None:
    """Note a token this process hands to the Hub, so that ``scrub`` masks it wherever it is echoed."""
    if isinstance(token, str) and token:
        _SECRETS.add(token)


_MIN_SECRET = 8
_SCHEME = r"[A-Za-z][A-Za-z0-9+.-]*://"
_USERINFO_RE = re.compile(
    rf"\b({_SCHEME})"
    r"(?:[^/\s@'\"<>]+"  # user or user:password, up to the host ...
    r"|[^/\s@:'\"<>]*:[^\s'\"<>]*)"  # ... or a password holding '/', '?', '#' or '@': up to the last '@'
    r"@"
)
"""The ``user:pass@`` of a URL with a scheme (``http://alice:p/w@host``: the parser reads ``p`` as a port)."""
_BARE_USERINFO_RE = re.compile(r"(?<![\w.%+~-])[\w.%+~-]+:[^\s@'\"<>/][^\s'\"<>]*@(?=[\w\[])")
"""``user:pass@host`` without a scheme (``HF_ENDPOINT=alice:pw@host:9``); never ``hf://org/name@rev``."""
_QUERY_SECRET_RE = re.compile(
    r"(?i)([?&;#][\w.-]*?(?:token|key|secret|passw(?:or)?d|pwd|sig|signature|auth|credential|session)[\w.-]*=)"
    r"[^&\s#'\"<>]+")
"""A query parameter whose name says it is a credential (``?token=``, ``&api_key=``, ``X-Amz-Signature=``)."""
_AUTH_HEADER_RE = re.compile(r"(?i)(\bauthorization['\"]?\s*[:=]\s*['\"]?(?:[a-z]+\s+)?)[^\s'\",}]+")
_BASIC_RE = re.compile(r"\b((?i:basic)\s+)(?=[A-Za-z0-9+/]*[A-Z])(?=[A-Za-z0-9+/]*[a-z])[A-Za-z0-9+/]{8,}={0,2}")
_URL_ENV = ("HF_ENDPOINT", "HUGGINGFACE_CO_URL_HOME", "HF_INFERENCE_ENDPOINT", "HTTP_PROXY", "HTTPS_PROXY",
            "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


def url_secrets(value: str) -> tuple[set[str], set[str]]:
    """``(exact, bare)``: the secret parts of one URL as a user may spell it (with a scheme or without,
    a password holding ``/`` or ``@``, percent-encoded or not, a query): ``exact`` strings to mask
    wherever they appear (the userinfo with its ``@``, the query), ``bare`` ones (the password and its
    pieces) to mask where they are long enough to be no common word."""
    from urllib.parse import parse_qsl, unquote

    exact: set[str] = set()
    bare: set[str] = set()
    rest = value.split("://", 1)[1] if "://" in value else value
    if "@" in rest:
        userinfo = rest.rsplit("@", 1)[0]
        exact |= {userinfo + "@", unquote(userinfo) + "@"}
        password = userinfo.split(":", 1)[1] if ":" in userinfo else userinfo  # a user alone may be a token
        for text in (password, unquote(password)):
            bare.add(text)
            bare.update(re.split(r"[/?#@:]", text))  # what a parser that cut the URL there echoes
        rest = rest.rsplit("@", 1)[1]
    for mark in ("?", "#"):
        if mark in rest:
            tail = rest.split(mark, 1)[1]
            exact.add(mark + tail)
            bare.update(v for _, v in parse_qsl(tail.split("#", 1)[0], keep_blank_values=True))
            bare.add(tail)
    return {e for e in exact if len(e) > 1}, {b for b in bare if b}


def _env_secrets() -> tuple[set[str], set[str]]:
    """``url_secrets`` of every URL the Hub client reads from the environment (endpoint, proxies)."""
    exact: set[str] = set()
    bare: set[str] = set()
    for name in _URL_ENV:
        value = os.environ.get(name)
        if value and ("@" in value or "?" in value or "#" in value):
            e, b = url_secrets(value)
            exact |= e
            bare |= b
    return exact, bare


def scrub(text: str, token: object = None) -> str:
    """``text`` with every credential masked: each known token (given, remembered, HF_TOKEN), the
    userinfo and query of the endpoint and proxy URLs in the environment however they are spelled
    (``alice:pw@host``, a password holding ``/``, ``%``-encoded, ``?token=``), the ``user:pass@`` of
    every URL, credential-named query parameters, ``Authorization``/``Bearer``/``Basic`` values and
    anything token-shaped. The one scrubbing function: every line the CLI prints and every message
    built from a server's or a library's text passes it."""
    text = str(text)
    secrets = {token} if isinstance(token, str) and token else set()
    secrets |= _SECRETS
    secrets |= {os.environ.get("HF_TOKEN") or "", os.environ.get("HUGGING_FACE_HUB_TOKEN") or ""}
    exact, bare = _env_secrets()
    # shorter strings are no credential (a Hub token is 37 characters); masking them would garble every line
    masked = {s for s in secrets | bare if len(s) >= _MIN_SECRET} | exact
    for secret in sorted(masked, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, "***@" if secret.endswith("@") else "***")
    text = _USERINFO_RE.sub(r"\1***@", text)
    text = _BARE_USERINFO_RE.sub("***@", text)
    text = _QUERY_SECRET_RE.sub(r"\1***", text)
    text = _AUTH_HEADER_RE.sub(r"\1***", text)
    text = _BEARER_RE.sub(r"\1***", text)
    text = _BASIC_RE.sub(r"\1***", text)
    return _TOKEN_RE.sub("hf_***", text)


def format_traceback(exc: BaseException) -> str:
    """``exc``'s full traceback (every chained exception) with tokens and control characters removed."""
    import traceback

    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return sanitize(scrub(text))
