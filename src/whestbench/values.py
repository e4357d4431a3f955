"""What counts as a number: the one integer test and the one positive-number test.

Python's ``bool`` is an ``int`` (``True == 1``) and a ``float`` may be nan or inf. A count, a limit,
a target standard error or a number of seconds that arrives from a flag, an API call or a
``metadata.json`` must be neither, and every layer (the compute layer's ``Estimation`` among them)
asks these two functions, so a value one command refuses every command refuses.
"""

from __future__ import annotations

import math
import operator
import re
from typing import Any


def is_int(v: Any, lo: float = -math.inf, hi: float = math.inf) -> bool:
    """The one integer test: an int (not a bool: ``True`` is an int in Python) in ``lo..hi``."""
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


def as_int(v: Any) -> Any:
    """``v`` as a Python int when it is an integer of any kind (a numpy integer too: ``operator.index``),
    else ``v`` unchanged for the caller's check to name; a bool stays a bool (``is_int`` refuses it)."""
    if isinstance(v, bool):
        return v
    try:
        return operator.index(v)
    except TypeError:
        return v


def is_one_of(v: Any, allowed: Any) -> bool:
    """Whether ``v`` is one of ``allowed`` (a set, dict or sequence). A value read from JSON may be a list or
    an object, which a set or dict cannot hold: it is one of none (not the TypeError of an unhashable key)."""
    try:
        return v in allowed
    except TypeError:
        return False


def is_positive_number(v: Any) -> bool:
    """The one positive-number test: an int or float (not a bool) above 0 and finite (nan and inf
    fail: a target of inf would stop every MLP at its first check point; checkpoints every inf
    seconds would never save)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < math.inf


_INT_RE = re.compile(r"^[+]?\d+(_\d+)*$")
_FLOAT_RE = re.compile(r"^[+]?(\d+(\.\d*)?|\.\d+)[eE][+]?\d+$")


def count_of(text: Any) -> int | None:
    """The one reading of a count written as text: ``1000000000``, ``1_000_000_000`` and ``1e9`` all
    mean 10**9; None for anything else (a non-integral value, a sign, a word). The bake's ``--n-samples``
    and verify's reading of a recorded ``bake_command`` both ask this."""
    s = str(text).strip()
    if _INT_RE.match(s):
        return int(s)
    if _FLOAT_RE.match(s):
        mantissa, exp = re.split(r"[eE]", s.lstrip("+"))
        whole, _, frac = mantissa.partition(".")
        digits = int((whole or "0") + frac)
        shift = int(exp) - len(frac)
        if shift > 10**4:  # a count of more than 10,000 digits is no count (and would take long to build)
            return None
        if shift >= 0:
            return digits * 10**shift
        if digits % 10**-shift == 0:
            return digits // 10**-shift
    return None
