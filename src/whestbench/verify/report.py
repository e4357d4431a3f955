"""What verify found: a list of named checks, each passed, failed or skipped, with a one-line detail.
Every check module appends to the one ``VerifyReport`` it is given; nothing raises on a broken dataset."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable


@dataclass(frozen=True)
class Check:
    """One verification: ``ok`` False means the dataset failed it; ``skipped`` means it could not run."""

    name: str
    ok: bool
    detail: str = ""
    skipped: bool = False


@dataclass
class VerifyReport:
    path: Path
    against: Path | None = None
    checks: list[Check] = field(default_factory=list)
    on_check: Callable[[Check], None] | None = field(default=None, repr=False, compare=False)
    coverage: dict[str, str] = field(default_factory=dict)
    """Which MLPs each family of checks covered (``integrity``, ``statistics``, ``recompute``), for the OK line."""
    blind_spot: str | None = None
    """The smallest single-neuron error the pilot could have seen, in words (set when the pilot ran)."""

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def check(self, name: str, ok: bool, detail: str = "", *, skipped: bool = False) -> Check:
        c = Check(name, bool(ok), " ".join(str(detail).split()), skipped)  # one line, whatever pyarrow said
        self.checks.append(c)
        if self.on_check is not None:
            self.on_check(c)
        return c

    def skip(self, name: str, detail: str) -> Check:
        return self.check(name, True, detail, skipped=True)

    def fail(self, name: str, problems: list[str], shown: int) -> Check:
        """The failed check ``name``: its first ``shown`` problems, and how many more there are."""
        more = f"; and {len(problems) - shown} more" if len(problems) > shown else ""
        return self.check(name, False, "; ".join(problems[:shown]) + more)

    def get(self, name: str) -> Check:
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(name)
