"""The ``whest dataset bake`` command (``bake_command`` in metadata.json): parse it, rewrite it, build it.

A bake records the command that re-creates its numbers; merge turns a partial's into the whole
dataset's (no slice flags, the merged ``--output``), and the dataset card shows one that re-bakes a
split into a fresh directory. All three are written by ``bake_argv``, on an argv list:

    argv = parse(md["bake_command"])            # None when it is missing or not a command
    argv = bake_argv(argv, "./rebake", drop=RANGE_FLAGS)
    flag_value(argv, "--mlp-seeds")              # "seeds.json"
    text = join(argv)

Both flag spellings are understood: ``--flag value`` and ``--flag=value``. A recorded command is
published (the card's re-bake recipe), so ``parse_bake`` accepts only ``whest dataset bake`` with the
bake's own flags (``BAKE_VALUE_FLAGS``, ``BAKE_SWITCHES``; a test holds them to the click command):
``rm -rf ~; whest dataset bake ...`` is no recipe.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Iterable, Sequence

RANGE_FLAGS = ("--slice", "--mlp-range")
"""The flags that make a bake a partial: a merged dataset's command has neither."""


def parse(recorded: Any) -> list[str] | None:
    """``recorded`` (shell text, or an argv list as some writers store it) as an argv list, or None
    when it is not one (another type, empty, or text with unbalanced quotes)."""
    if isinstance(recorded, list) and recorded and all(isinstance(a, str) for a in recorded):
        return list(recorded)
    if isinstance(recorded, str) and recorded.strip():
        try:
            return shlex.split(recorded)
        except ValueError:  # unbalanced quotes
            return None
    return None


BAKE_VALUE_FLAGS = frozenset((
    "--n-mlps", "--n-samples", "--width", "--depth", "--output", "--mlp-seeds", "--seed", "--split", "--config",
    "--slice", "--mlp-range", "--max-threads", "--device", "--mlps-per-batch", "--chunk-size", "--gpu-kernel",
    "--estimator", "--target-stderr", "--stderr-layer", "--checkpoint-every", "--audit-segments", "--log-every",
    "--peer-timeout", "--pretty-name", "--license", "--homepage", "--card",
))
"""``whest dataset bake``'s flags that take a value."""
BAKE_SWITCHES = frozenset(("--torch", "--quiet", "--skip-device-check", "--accept-non-invariant"))
"""``whest dataset bake``'s flags without a value."""
BAKE_PREFIX = ("whest", "dataset", "bake")


def parse_bake(recorded: Any) -> list[str] | None:
    """``recorded`` as the argv of a ``whest dataset bake`` command whose every token is one of the
    bake's flags or a value flag's value; None otherwise (not a command, another program, a shell
    operator, an unknown flag, a value flag without its value)."""
    argv = parse(recorded)
    if argv is None or tuple(argv[:3]) != BAKE_PREFIX:
        return None
    it = iter(argv[3:])
    for token in it:
        if token in BAKE_SWITCHES:
            continue
        if token in BAKE_VALUE_FLAGS:
            if next(it, None) is None:
                return None
        elif not (token.partition("=")[0] in BAKE_VALUE_FLAGS and "=" in token):
            return None
    return argv


def join(argv: Sequence[str]) -> str:
    """Shell text of ``argv`` (each argument quoted as needed)."""
    return shlex.join(argv)


def drop_flags(argv: Sequence[str], flags: Iterable[str]) -> list[str]:
    """``argv`` without ``flags``, each with its value (``--flag value`` or ``--flag=value``)."""
    flags = tuple(flags)
    out: list[str] = []
    it = iter(argv)
    for token in it:
        if token in flags:
            next(it, None)
        elif not token.startswith(tuple(f + "=" for f in flags)):
            out.append(token)
    return out


def set_flag(argv: Sequence[str], flag: str, value: str) -> list[str]:
    """``argv`` with ``flag`` given once, as ``flag value`` at the end (earlier occurrences dropped)."""
    return drop_flags(argv, (flag,)) + [flag, str(value)]


def bake_argv(flags: Iterable[str | tuple[str, Any]], output: str | Path, *, drop: Iterable[str] = ()) -> list[str]:
    """The one builder of a ``whest dataset bake`` argv (a recorded one rewritten, or one made from
    values): ``flags``' argv tokens as they are and ``(flag, value)`` pairs rendered (value True: a
    switch; None or False: left out), without the ``drop`` flags, and with ``--output output`` last."""
    argv: list[str] = []
    for f in flags:
        if isinstance(f, str):
            argv.append(f)
        elif f[1] is True:
            argv.append(f[0])
        elif f[1] is not None and f[1] is not False:  # 0 is a value
            argv += [f[0], str(f[1])]
    return set_flag(drop_flags(argv, drop), "--output", str(output))


def flag_value(argv: Sequence[str], flag: str) -> str | None:
    """The value of the first ``flag`` in ``argv``, or None when it is not given."""
    for i, token in enumerate(argv):
        if token == flag and i + 1 < len(argv):
            return argv[i + 1]
        if token.startswith(flag + "="):
            return token[len(flag) + 1 :]
    return None
