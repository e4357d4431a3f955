"""``VerifyConfig``: one verify request, validated once (the CLI and ``verify_dataset(**options)`` build it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whestbench.errors import UsageError
from whestbench.format.schema import check_positive_int
from whestbench.verify.spot_draw import SpotBudget, check_seed


@dataclass(frozen=True)
class VerifyConfig:
    """What to check besides integrity and the statistics, which every verify runs. ``__post_init__``
    refuses (UsageError) a value no dataset could make valid; the paths are checked against the
    dataset when it is opened (``verify_dataset``)."""

    against: Path | None = None
    """Another bake of (some of) the same seeds: every column compared MLP by MLP (``compare``)."""
    n_check: int | None = None
    """The statistical checks and the comparison on the first K MLPs only (integrity covers every row)."""
    z_max: float | None = None
    """Replaces the Bonferroni threshold of the statistical checks."""
    sample_mlps: int | None = None
    """The per-MLP pilot statistics on K MLPs chosen at random with ``sample_seed`` (huge datasets;
    the choice is reported)."""
    sample_seed: int = 0
    """Seed of the ``sample_mlps`` choice."""
    recompute: int | None = None
    """Bake K MLPs (chosen with ``recompute_seed``) again with the dataset's own recipe and compare every
    numeric column (``recompute``)."""
    recompute_seed: int | None = None
    """Seed of the ``recompute`` choice; None: a fresh, unpredictable one (printed; ``verify.spot_draw``)."""
    device: str | None = None
    """Where ``recompute`` and ``spot_check`` compute, for philox datasets (default cpu)."""
    recompute_root: Path | None = None
    """Where ``recompute`` keeps its bakes and a stopped ``spot_check`` its record (default: the user
    cache); never inside the dataset or ``against``."""
    pilot: bool = True
    """False leaves out the checks that need a fresh pilot of every MLP (``confirm_complete``)."""
    cache: bool = True
    """False: ``recompute`` bakes afresh in a temporary directory under ``recompute_root`` (removed
    after), never reusing or changing a cached bake; ``spot_check`` keeps no record to resume from."""
    spot_check: "SpotBudget | int | str | None" = None
    """Regenerate audit-trail segments drawn with ``spot_seed`` (``spot``); resumable: ``K`` (or ``"K"``)
    segments for the whole dataset, ``"K/mlp"`` K segments of every MLP (``spot_draw.SpotBudget``)."""
    spot_seed: int | None = None
    """Seed of the ``spot_check`` draw; None: a fresh, unpredictable one (printed)."""

    def __post_init__(self) -> None:
        for flag, value in (("--n-check", self.n_check), ("--sample-mlps", self.sample_mlps),
                            ("--recompute", self.recompute)):
            if value is not None:
                check_positive_int(flag, value)
        if self.spot_check is not None:
            object.__setattr__(self, "spot_check", SpotBudget.parse(self.spot_check))
        for name, flag in (("spot_seed", "--spot-seed"), ("recompute_seed", "--recompute-seed")):
            object.__setattr__(self, name, check_seed(flag, getattr(self, name)))
        for flag, given, needs, option in (("--spot-seed", self.spot_seed is not None, self.spot_check, "--spot-check"),
                                           ("--recompute-seed", self.recompute_seed is not None, self.recompute,
                                            "--recompute")):
            if given and needs is None:
                raise UsageError(f"{flag} applies to {option} only;", fix=f"add {option}, or leave {flag} out.")
        for flag, given in (("--device", self.device is not None), ("--no-cache", not self.cache)):
            if given and self.recompute is None and self.spot_check is None:
                raise UsageError(f"{flag} applies to --recompute and --spot-check only;",
                                 fix=f"add one of them, or leave {flag} out.")
        for name, flag in (("against", "--against"), ("recompute_root", "--recompute-dir")):
            if getattr(self, name) is not None:
                if isinstance(getattr(self, name), str) and not getattr(self, name).strip():
                    raise UsageError(f"{flag} is an empty path;", fix=f"pass a directory, or leave {flag} out.")
                object.__setattr__(self, name, Path(getattr(self, name)))

    @classmethod
    def of(cls, config: "VerifyConfig | None", options: dict[str, Any]) -> "VerifyConfig":
        """``config``, or one built from keyword ``options`` (``verify_dataset``'s API); not both."""
        if config is None:
            return cls(**options)
        if options:
            raise TypeError(f"pass a VerifyConfig or keyword options, not both (got {', '.join(sorted(options))})")
        return config
