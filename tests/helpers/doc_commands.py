"""The commands README.md and docs/*.md show, found and judged the same way everywhere (issue 35): what
tests/test_readme.py does for the README tour, for every documented command line.

A documented command is a line of a ```bash block (continuation lines joined), a ``$ `` line of any other
fenced block (a terminal session), or an inline code span that is a ``whest`` command line: a verb with
at least one argument (``whest dataset verify ./eval``), not a verb's name (``whest dataset bake``).

Each is run as written, at small sizes (``small``: the value after ``--n-samples``, ``--width``,
``--depth`` becomes ``SMALL``'s, ``--n-mlps`` is kept), unless a rule of ``SKIP`` says why it cannot run
here; a line that reads what a skipped line wrote (its ``--output``) is skipped with it, and so is every
line of a SLURM batch script (``Doc.job_script``). Inline spans
written with placeholders (``--width W``, ``DIR``) have them replaced by ``PLACEHOLDERS``; an optional
``[...]`` part is tried both without it and with it (its first alternative of ``a|b|c``).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md"))

SMALL = {"n-samples": "4096", "width": "8", "depth": "2"}
_SIZE = re.compile(r"(--(n-samples|width|depth) +|\b(n_samples|width|depth)=)([0-9][0-9_.eE]*)")


def _torch_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


SKIP = {
    "needs the network": re.compile(r"pip install|\bwhest dataset (push|upload|pull|download)\b(?!.*--dry-run)"
                                    r"|\bhf auth login\b"),
    "needs a GPU": re.compile(r"--device (cuda|mps)\b|--gpu-kernel fused|\bbench_gpu\.py\b|\btest_philox_triton\b"
                              r"|\./gpu-bake\b"),
    "needs a SLURM cluster": re.compile(r"\b(sbatch|srun|scontrol)\b|\$SLURM_|\$\{SLURM_"),
    "is the test suite": re.compile(r"\btools/test\.sh\b|\bpytest\b"),
    "is a benchmark (minutes to hours of measurement; tests/benchmarks/ runs it at small sizes)":
        re.compile(r"\bbenchmarks/\w+\.py\b"),
}
if not _torch_installed():
    SKIP["needs torch"] = re.compile(r"--torch\b|--device cpu\b|\btorchrun\b")

# inline spans' placeholders: what each stands for in the runs (datasets the run script bakes first)
PLACEHOLDERS = {"W": "8", "D": "2", "E": "0.05", "M": "4", "N": "4", "K": "1", "S": "4", "CAP": "4096",
                "DIR": "ds", "DS": "ds", "OUTPUT": "ds", "FILE": "out.json", "REPO": "org/name", "DIR2": "ds2",
                "SPLIT": "public"}


def small(text: str) -> str:
    def size(m: re.Match) -> str:
        return m.group(1) + SMALL[(m.group(2) or m.group(3)).replace("_", "-")]

    return _SIZE.sub(size, text)


def command(line: str) -> str:
    """A shell line without its comment."""
    return re.split(r"(?:^|\s)#", line, maxsplit=1)[0]


def skip_reason(line: str) -> str | None:
    text = command(line)
    return next((why for why, rule in SKIP.items() if rule.search(text)), None)


@dataclass
class Doc:
    """One documented command: where it is, how it is written (``kind``: bash, prompt, inline), its text."""

    path: Path
    line: int
    kind: str
    text: str
    job_script: bool = False
    """A line of a SLURM batch script (from a block's ``#!/bin/bash`` or first ``#SBATCH`` line on): it runs
    under sbatch only (its ``whest`` lines are still parsed)."""

    @property
    def where(self) -> str:
        name = self.path.relative_to(REPO) if self.path.is_relative_to(REPO) else self.path.name
        return f"{name}:{self.line}"


def logical_lines(block: str) -> list[tuple[int, str]]:
    """``(offset, line)`` of a bash block, continuation lines (``\\`` at the end) joined."""
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for k, line in enumerate(block.splitlines()):
        if not pending:
            start = k
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1].rstrip() + " "
            continue
        out.append((start, pending + line.strip() if pending else line))
        pending = ""
    return out


_NAME = re.compile(r"(whest|python -m whestbench)( dataset)?( [a-z-]+)?")


def collect(paths: list[Path] = DOCS) -> list[Doc]:
    """Every documented command of ``paths``, in document order (bash blocks line by line)."""
    out: list[Doc] = []
    for path in paths:
        text = path.read_text()
        for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
            first = text[:m.start()].count("\n") + 2
            if m.group(1) == "bash":
                script = False
                for k, line in logical_lines(m.group(2)):
                    script = script or line.startswith(("#SBATCH", "#!/bin/bash"))
                    if command(line).strip():  # a comment or a blank line is no command
                        out.append(Doc(path, first + k, "bash", line, script))
            else:
                out += [Doc(path, first + k, "prompt", line[2:])
                        for k, line in enumerate(m.group(2).splitlines()) if line.startswith("$ ")]
        for m in re.finditer(r"(?<!`)`((?:whest|python -m whestbench) [^`\n]+)`(?!`)", text):
            if not _NAME.fullmatch(m.group(1)):
                out.append(Doc(path, text[:m.start()].count("\n") + 1, "inline", m.group(1)))
    return sorted(out, key=lambda d: (paths.index(d.path), d.line))


def variants(span: str) -> list[str]:
    """An inline synopsis as runnable lines: placeholders replaced, each optional ``[...]`` left out, then all
    put in (the first alternative of ``a|b``)."""
    def fill(text: str) -> str:
        return re.sub(r"\b[A-Z][A-Z0-9]*\b", lambda m: PLACEHOLDERS.get(m.group(0), m.group(0)), text)

    bare = re.sub(r"\s*\[[^\[\]]*\]", "", span)
    full = re.sub(r"\[([^\[\]]*)\]", r"\1", span)
    full = re.sub(r"([^\s|]+)(?:\|[^\s|]+)+", r"\1", full)
    return list(dict.fromkeys([fill(bare), fill(full)]))


def whest_argv(line: str) -> list[str] | None:
    """The ``whest`` arguments of a shell line (``whest …``, ``python -m whestbench …``, ``torchrun … -m
    whestbench …``, ``srun python -m whestbench …``), or None when the line runs no whest command."""
    text = command(line).strip()
    try:
        words = shlex.split(text)
    except ValueError:
        return None
    for k, word in enumerate(words):
        if word in ("whest", "whestbench") or word.endswith("/whest"):
            rest = words[k + 1:]
        elif word == "-m" and k + 1 < len(words) and words[k + 1] == "whestbench":
            rest = words[k + 2:]
        else:
            continue
        cut = next((i for i, w in enumerate(rest) if w in (">", "2>&1", "|", "&&", ";", "&", ">>")
                    or w.startswith(">")), len(rest))
        return rest[:cut]
    return None


def parse_error(argv: list[str]) -> str | None:
    """What click says of ``whest argv`` without running it (an unknown verb or flag, a missing required flag,
    a value of the wrong type), or None when it parses."""
    import click

    from whestbench.cli.app import cli

    try:
        ctx = cli.make_context("whest", list(argv))
        cmd = cli
        while isinstance(cmd, click.Group):
            rest = [*ctx._protected_args, *ctx.args]
            if not rest:
                break
            name, sub, rest = cmd.resolve_command(ctx, rest)
            ctx = sub.make_context(name, rest, parent=ctx)
            cmd = sub
    except click.exceptions.Exit:
        return None  # --help, --version
    except click.UsageError as e:
        return e.format_message()
    return None
