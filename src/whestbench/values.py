"""What counts as a number: the one integer test and the one positive-number test.

Python's ``bool`` is an ``int`` (``True == 1``) and a ``float`` may be nan or inf. A count, a limit,
a target standard error or a number of seconds that arrives from a flag, an API call or a
``metadata.json`` must be neither, and every layer (the compute layer's ``Estimation`` among them)
asks these two functions, so a value one command refuses every command refuses.
"""

from __future__ import annotations

import math
import operator
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
