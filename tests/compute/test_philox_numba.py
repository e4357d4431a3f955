"""The philox sampler's numba CPU kernels match the numpy reference: the integer stage bit for bit,
normals within 3 ulp of the exact transform (away from the zeros of cos/sin: docs/sampler-philox.md
§3), and ReLU plus the pairwise tree bit for bit. No torch."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from whestbench.compute.philox import spec as philox
from whestbench.compute.philox import numba_kernels as pn
from precision_emulation import float32_ulps as ulps
from philox_kat import KEY  # tests/philox_kat.py

WIDTH = 37


def test_importing_the_kernels_does_not_import_torch():
    code = "import sys, whestbench.compute.philox.numba_kernels; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_integer_stage_is_bit_identical_to_numpy():
    n0 = 2**32 - 40  # crosses into hi32(n) = 1
    out = np.empty((80, 4 * philox.n_groups(WIDTH)), dtype=np.uint32)
    pn.words_into(KEY, n0, out)
    assert np.array_equal(out, philox.philox_words(KEY, n0, n0 + 80, WIDTH))


@pytest.mark.parametrize("width", [64, WIDTH])  # an odd width uses half of its last Box-Muller pair
def test_normals_are_within_three_ulp_of_the_exact_transform(width):
    words = philox.philox_words(KEY, 0, 2048, width)
    u = philox.uniforms(words).astype(np.float64)
    theta = (philox.TWO_PI * philox.uniforms(words)[:, 1::2]).astype(np.float64)  # the float32 angle
    r = np.sqrt(-2 * np.log(u[:, 0::2]))
    exact = np.empty(words.shape)
    exact[:, 0::2], exact[:, 1::2] = r * np.cos(theta), r * np.sin(theta)
    got = np.empty((2048, width), dtype=np.float32)
    pn.normals_into(KEY, 0, got)
    assert ulps(got, exact[:, :width].astype(np.float32)).max() <= 3


@pytest.mark.parametrize("with_sq", [True, False])
@pytest.mark.parametrize("rows,valid", [(64, 64), (64, 37), (1024, 1000), (8, 1), (16, 15), (16, 6)])
def test_relu_tree_is_bit_identical_to_the_reference_tree(rows, valid, with_sq):
    h = np.random.default_rng(rows + valid).standard_normal((rows, 29)).astype(np.float32)
    h[valid:] = 0.0
    relu = np.maximum(h, np.float32(0.0)).astype(np.float64)
    levels = philox.level_of(rows) + 1
    out, out_sq = np.empty(29), np.full(29, -1.0)
    stack, stack_sq, used = np.empty((levels, 29)), np.empty((levels, 29)), np.empty(levels, bool)
    pn.relu_tree(h, valid, with_sq, out, out_sq, stack, stack_sq, used)
    assert np.array_equal(h, relu.astype(np.float32))  # ReLU applied in place
    assert (out + 0.0).tobytes() == (philox.pairwise_colsum(relu) + 0.0).tobytes()
    want_sq = philox.pairwise_colsum(relu**2) + 0.0 if with_sq else np.full(29, -1.0)  # untouched without
    assert (out_sq + 0.0).tobytes() == want_sq.tobytes()
