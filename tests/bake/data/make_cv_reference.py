"""Make ``cv_reference_1e8.json``: the independent plain estimate that
``test_control_variate_agrees_with_an_independent_plain_estimate[1e8]`` compares the control-variate
estimate with. Computing it took 15.6 CPU-minutes on the 2-core VM (61 minutes of wall time beside
other work at load 10-22; ``philox_replicates`` grows faster than N: 0.6 s at 2**21, 8.4 s at 2**23),
and the test used to compute it inside its 600 s timeout; it is made once and stored, and the test
computes only the side under test.

What it holds: the fp64 sums and sums of squares of every neuron of MLP ``UNBIASED_SEED`` (width
``UNBIASED_WIDTH``, depth ``UNBIASED_DEPTH``) over N = 10**8 samples drawn with the Philox key
``REFERENCE_KEY`` through the CPU bake's engine (``philox_replicates``, one BLAS thread), written
exactly (``float.hex``), and the same sums over the first ``PREFIX`` samples, which the test
recomputes to check that the file still stands for today's sampler and weights.

Run from the repository root (about 16 CPU-minutes):

    PYTHONPATH=src:tests:tests/bake python tests/bake/data/make_cv_reference.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import test_error_bars as t
from whestbench.compute.mlp import weights_for_seed
from whestbench.compute.philox import spec as philox
from whestbench.work import threads

N = 10**8
PREFIX = 1 << 16
OUT = Path(__file__).with_name("cv_reference_1e8.json")


def hexes(a: np.ndarray) -> list:
    return [[float(v).hex() for v in row] for row in np.asarray(a, dtype=np.float64)]


def sums_of(n: int):
    weights = weights_for_seed(t.UNBIASED_SEED, t.UNBIASED_WIDTH, t.UNBIASED_DEPTH)
    (sums,) = t.philox_replicates(weights, np.array([t.REFERENCE_KEY], dtype=np.uint32), n)
    return {"n": n, "count": int(sums.count), "sums": hexes(sums.sums), "sumsq": hexes(sums.sumsq)}


def main() -> None:
    with threads.one_blas_thread():
        doc = {
            "what": "plain sums of one MLP for test_error_bars.py's unbiasedness test (made by make_cv_reference.py)",
            "seed": t.UNBIASED_SEED, "width": t.UNBIASED_WIDTH, "depth": t.UNBIASED_DEPTH,
            "key": [int(k) for k in t.REFERENCE_KEY], "sampler": philox.SAMPLER_NAME,
            "sampler_version": philox.SAMPLER_VERSION,
            "prefix": sums_of(PREFIX), "reference": sums_of(N),
        }
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
