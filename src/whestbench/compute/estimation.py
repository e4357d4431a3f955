"""How a bake estimates its means: the estimator's name, the target standard error, and the one
typed value (``Estimation``) that carries them from the flags to the work units and the metadata.

Free of numpy, so the CLI can offer the names without importing the numerics
(``compute/estimators.py``, which uses this value).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from whestbench.errors import UsageError
from whestbench.values import is_positive_number

PLAIN, CONTROL_VARIATE = "plain", "control-variate"
ESTIMATORS = (PLAIN, CONTROL_VARIATE)
STDERR_LAYERS = ("last", "all")
ESTIMATOR_VERSION = "1"
PILOT_SAMPLES = 1 << 14
"""Inputs in each MLP's control-variate and planning pilot (``compute/estimators.py``)."""
# Batch-means standard errors rest on n_batches − 1 degrees of freedom: with 32 batches a standard
# error is itself uncertain by ~13 % (1/√(2·31)); with 4 by ~40 %. Fewer batches are flagged when a
# bake is planned, and a target standard error is never judged met on fewer (an early stop on a
# luckily low estimate would be a stop on noise).
MIN_RELIABLE_BATCHES = 32
TARGET_RULE = "pilot-planned"
"""How a bake to a target standard error decides each MLP's sample count (``planned_samples``): the
first check point at or past the pilot's ``max σ̂² / E²``. The plain estimator's rule; control-variate
bakes made before ``CV_TARGET_RULE`` recorded it too (verify recomputes their counts by it)."""
CV_TARGET_RULE = "pilot-planned-exceed"
"""The control-variate target rule: the first check point (at or past the batch floor) where the
chance that any chosen neuron's stored standard error exceeds E is at most ``EXCEED_PROBABILITY``,
counting the batch-means standard error's own spread (χ² on k − 1 degrees of freedom) and the
pilot's (``estimators.exceed_chance``). A batch-means standard error on 32 batches is itself uncertain
by ±13 %, so "about E" left 12.9 % of MLPs above E (largest 1.29 E; issue 29's audit)."""
EXCEED_PROBABILITY = 0.05
"""Under ``CV_TARGET_RULE``: the most probable that an MLP ends with a chosen standard error above E."""
SEQUENTIAL_RULE = "sequential-0.17.0"
"""The rule of whestbench 0.17.0's first target bakes (a running standard error checked at check
points); their metadata had no ``rule``, which is now an error whose fix is to write this one."""


@dataclass(frozen=True)
class Estimation:
    """How a bake estimates each MLP's means: the estimator, and the target standard error (if any)
    with the neurons it applies to. Validated once, here; the bake, the work units and the metadata
    all carry this one value."""

    name: str = PLAIN
    """"plain" (whestbench 0.16's sample means) or "control-variate" (docs/error-bars.md)."""
    target_stderr: float | None = None
    """Sample each MLP only as many times as its own pilot says the chosen neurons need for standard
    errors of this size (``planned_samples``); ``n_samples`` is then the cap."""
    stderr_layer: str = "last"
    """The neurons ``target_stderr`` applies to: the "last" layer's, or "all"."""
    rule: str | None = None
    """How the target decides the counts; None: this version's rule for the estimator
    (``target_rule``). A dataset's metadata can record an older one (``from_metadata``)."""

    def __post_init__(self) -> None:
        if self.name not in ESTIMATORS:
            raise UsageError(f"--estimator must be 'plain' or 'control-variate'; got {self.name!r}.",
                             fix="Pass --estimator plain or --estimator control-variate.")
        if self.stderr_layer not in STDERR_LAYERS:
            raise UsageError(f"--stderr-layer must be 'last' or 'all'; got {self.stderr_layer!r}.",
                             fix="Pass --stderr-layer last or --stderr-layer all.")
        t = self.target_stderr
        if t is not None and not is_positive_number(t):
            raise UsageError(f"--target-stderr must be a positive, finite number; got {t!r}.",
                             fix="Pass a standard error such as 0.001.")
        if self.rule is not None and self.rule not in (TARGET_RULE, CV_TARGET_RULE, SEQUENTIAL_RULE):
            raise UsageError(f"unknown target rule {self.rule!r}.",
                             fix=f"Use {TARGET_RULE!r}, {CV_TARGET_RULE!r} or {SEQUENTIAL_RULE!r}.")
        if self.rule == self.default_rule:
            object.__setattr__(self, "rule", None)  # one value for one rule, whichever way it was built

    @property
    def default_rule(self) -> str:
        """This version's target rule for the estimator: ``CV_TARGET_RULE`` or ``TARGET_RULE``."""
        return CV_TARGET_RULE if self.name == CONTROL_VARIATE else TARGET_RULE

    @property
    def target_rule(self) -> str:
        """The rule that decides the counts of a bake to ``target_stderr`` (``rule``, else ``default_rule``)."""
        return self.rule or self.default_rule

    @property
    def is_cv(self) -> bool:
        return self.name == CONTROL_VARIATE

    @property
    def has_target(self) -> bool:
        return self.target_stderr is not None

    @classmethod
    def from_metadata(cls, md: dict[str, Any]) -> "Estimation":
        """The estimation a dataset's (validated) metadata records; plain without a target when it records none."""
        est = md.get("estimator") if isinstance(md.get("estimator"), dict) else {}
        target = md.get("target_stderr") if isinstance(md.get("target_stderr"), dict) else None
        return cls(est.get("name", PLAIN), float(target["value"]) if target else None,
                   target["layer"] if target else "last", target.get("rule") if target else None)

    def flags(self) -> list[str]:
        """The bake flags that choose this estimation: none for the default (plain, no target), else
        ``--estimator``, ``--target-stderr`` and ``--stderr-layer``."""
        flags = ["--estimator", self.name] if self.is_cv else []
        if self.has_target:
            flags += ["--target-stderr", repr(float(self.target_stderr)), "--stderr-layer", self.stderr_layer]
        return flags

    def min_samples(self, cv_batch: int) -> int:
        """The fewest samples a target is judged on: ``MIN_RELIABLE_BATCHES`` batches for control variates."""
        return MIN_RELIABLE_BATCHES * cv_batch if self.is_cv else 0

    def identity(self) -> dict[str, Any]:
        """The part of a bake's identity (what changes the numbers) that this value decides."""
        out = {"estimator": self.name, **({"target_stderr": self.target_stderr, "stderr_layer": self.stderr_layer}
                                          if self.has_target else {})}
        if self.has_target and self.target_rule != TARGET_RULE:  # a plain bake's identity is what it always was
            out["target_rule"] = self.target_rule
        return out

    def metadata(self, batch_samples: int, step_samples: int) -> dict[str, Any]:
        """The metadata.json blocks: ``estimator`` (which estimator made the means and the standard
        errors), and ``target_stderr`` with a target."""
        if self.is_cv:
            from whestbench.compute.seeds import PILOT, stream_name  # numpy: only where a bake writes metadata

            est = {"name": CONTROL_VARIATE, "version": ESTIMATOR_VERSION,
                   "controls": "layer-1 activations and layer-2 squared pre-activations (exact means)",
                   "pilot_samples": PILOT_SAMPLES, "pilot_stream": stream_name(PILOT),
                   "stderr": "batch means", "batch_samples": batch_samples, "docs": "docs/error-bars.md"}
        else:
            est = {"name": PLAIN, "version": ESTIMATOR_VERSION,
                   "stderr": "sqrt(sample variance / N) per neuron, from fp64 sums of squares"}
        if not self.has_target:
            return {"estimator": est}
        block = {"value": self.target_stderr, "layer": self.stderr_layer, "rule": self.target_rule,
                 "check_points": "after 1, 2, 4, ..., 256 steps, then every 256 steps", "step_samples": step_samples}
        if self.target_rule == CV_TARGET_RULE:
            block["exceed_probability"] = EXCEED_PROBABILITY
        return {"estimator": est, "target_stderr": block}


def is_cv_block(est: Any) -> bool:
    """Whether a metadata ``estimator`` block (any value, also a missing or malformed one) names control variates."""
    return isinstance(est, dict) and est.get("name") == CONTROL_VARIATE
