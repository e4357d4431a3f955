"""values.py: the one integer test and the one positive-number test, and every place that asks them.

A positive number arrives four ways: ``--target-stderr`` (compute's ``Estimation``), the API's
``checkpoint_every`` (``BakeConfig``), a dataset's ``target_stderr.value`` (``validate_metadata``) and
``--log-every``/``--checkpoint-every`` on the command line (``cli.common.Seconds``). A value one of
them refuses, all of them refuse.
"""

from __future__ import annotations

import copy
import math

import click
import numpy as np
import pytest

from whestbench.bake.plan import BakeConfig
from whestbench.cli.common import Seconds
from whestbench.compute.estimation import Estimation
from whestbench.errors import InvalidDatasetError, UsageError
from whestbench.format.schema import validate_metadata
from whestbench.values import as_int, is_int, is_positive_number

BAD = [0, 0.0, -0.0, -1, -1e-300, math.nan, math.inf, -math.inf, True, False, None, "1", [1], np.float32(1.0)]
GOOD = [1, 2**70, 1e-300, 0.05, 5e-324, np.float64(0.25), 1.7976931348623157e308]


@pytest.mark.parametrize("v", GOOD)
def test_positive_finite_numbers_pass(v):
    assert is_positive_number(v)


@pytest.mark.parametrize("v", BAD)
def test_zero_negative_nan_inf_bool_and_non_numbers_fail(v):
    assert not is_positive_number(v)


def test_is_int_refuses_bools_and_floats_and_keeps_its_bounds():
    assert is_int(0) and is_int(-5) and is_int(2**80) and is_int(3, 3, 3)
    assert not is_int(True) and not is_int(False) and not is_int(1.0) and not is_int("1") and not is_int(None)
    assert not is_int(2, 3) and not is_int(4, 0, 3)


def _metadata(value) -> dict:
    return {"schema_version": "3.0", "format": "hf-datasets-parquet", "backend": "flopscope",
            "seed_protocol": {"name": "whestbench_explicit_per_mlp_seeds", "version": "3.0"},
            "n_samples": 100000, "width": 4, "depth": 2, "split": "public", "n_mlps": 2,
            "sampler": {"name": "pcg64", "version": "1", "block_size": 16384},
            "estimator": {"name": "plain", "version": "1"},
            "target_stderr": {"value": value, "layer": "last", "rule": "pilot-planned", "step_samples": 16384}}


def _verdicts(v) -> list[bool]:
    """Whether each of the four places accepts ``v``."""
    out = []
    for make in (lambda: Estimation(target_stderr=v),
                 lambda: BakeConfig(n_mlps=1, n_samples=1000, width=4, depth=2, output=None, seed=1, checkpoint_every=v),
                 lambda: validate_metadata(copy.deepcopy(_metadata(v)))):
        try:
            make()
            out.append(True)
        except (UsageError, InvalidDatasetError):
            out.append(False)
    if isinstance(v, (int, float)) and not isinstance(v, bool):  # the CLI sees text: the number's repr
        try:
            Seconds().convert(repr(float(v)), None, None)
            out.append(True)
        except click.exceptions.BadParameter:
            out.append(False)
    return out


@pytest.mark.parametrize("v", [v for v in BAD if v is not None] + GOOD)
def test_every_place_that_takes_a_positive_number_agrees(v):
    verdicts = _verdicts(v)
    assert verdicts == [is_positive_number(v)] * len(verdicts), f"{v!r}: {verdicts}"


def test_as_int_takes_any_integer_kind_and_leaves_the_rest_for_the_check_to_name():
    assert as_int(np.int64(7)) == 7 and type(as_int(np.uint32(7))) is int and as_int(2**70) == 2**70
    for v in (True, 1.0, "1", None, np.float64(1.0)):
        assert as_int(v) is v
    assert not is_int(as_int(True)) and is_int(as_int(np.int8(-3)), -3, -3)
