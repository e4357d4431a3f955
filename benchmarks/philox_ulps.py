#!/usr/bin/env python
"""How far the philox sampler's normals are apart: numpy's ``philox.normals``, the numba kernel
(``philox_numba.normals_into``) and the exact transform of the same float32 inputs, in float32 ulps.

The exact transform is ``r·cos θ`` and ``r·sin θ`` in float64 from the float32 uniforms and the
float32 ``θ`` (as every implementation rounds it), rounded once to float32. For each pair it prints
the largest distance, the largest where ``|value| >= 1e-3`` (near a zero of cos or sin a tiny
absolute error is many ulps), the largest absolute difference and a histogram. No torch needed.

    .venv/bin/python benchmarks/philox_ulps.py                  # 24 keys x ~4.2M normals: ~15 s on 2 cores
    .venv/bin/python benchmarks/philox_ulps.py --seeds 100
"""

from __future__ import annotations

import argparse

import numpy as np

from whestbench.compute.philox import spec as philox
from whestbench.compute.philox import numba_kernels as philox_numba
from whestbench.compute.precision import float32_ulps as ulps
from whestbench.compute.seeds import spawn_streams

# Keys: Random123's known-answer key, edge keys, then the sample keys of seeds 1..N.
FIXED_KEYS = [(0xA4093822, 0x299F31D0), (0, 0), (1, 2), (0xFFFFFFFF, 0)]
STEP = 8192  # rows per comparison


def exact(key, n0: int, n1: int, width: int) -> np.ndarray:
    u = philox.uniforms(philox.philox_words(key, n0, n1, width))
    theta = (philox.TWO_PI * u[:, 1::2]).astype(np.float64)  # the float32 angle
    r = np.sqrt(-2 * np.log(u[:, 0::2].astype(np.float64)))
    out = np.empty(u.shape)
    out[:, 0::2], out[:, 1::2] = r * np.cos(theta), r * np.sin(theta)
    return out[:, :width].astype(np.float32)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=20, help="sample keys of seeds 1..N besides the 4 fixed keys (default 20)")
    p.add_argument("--normals", type=int, default=1 << 21, help="normals per key and width (default 2**21)")
    args = p.parse_args(argv)
    keys = FIXED_KEYS + [philox.philox_key(spawn_streams(s)[1]) for s in range(1, args.seeds + 1)]
    pairs = ("numpy vs numba", "numba vs exact", "numpy vs exact")
    hist = {k: np.zeros(64, np.int64) for k in pairs}
    worst_big = dict.fromkeys(pairs, 0)
    worst_abs = dict.fromkeys(pairs, 0.0)
    total = 0
    for k, key in enumerate(keys):
        # width 64, and an odd width whose counters cross 2**32 (hi32(n) = 1)
        for width, n0 in ((64, k * 10**6), (37, 2**32 - 4096 + k)):
            n1 = n0 + args.normals // width
            for c0 in range(n0, n1, STEP):
                c1 = min(c0 + STEP, n1)
                ref = philox.normals(key, c0, c1, width)
                fast = np.empty_like(ref)
                philox_numba.normals_into(key, c0, fast)
                ex = exact(key, c0, c1, width)
                for name, a, b in zip(pairs, (ref, fast, ref), (fast, ex, ex)):
                    d = ulps(a, b)
                    hist[name] += np.bincount(np.minimum(d.ravel(), 63), minlength=64)
                    worst_big[name] = max(worst_big[name], int(d[np.abs(b) >= 1e-3].max(initial=0)))
                    worst_abs[name] = max(worst_abs[name], float(np.max(np.abs(a.astype(np.float64) - b))))
                total += ref.size
    print(f"{total:,} normals: {len(keys)} keys x widths 64 and 37")
    for name in pairs:
        h = {i: int(x) for i, x in enumerate(hist[name]) if x}
        print(f"{name}: max {max(h)} ulp; {worst_big[name]} ulp where |value| >= 1e-3; "
              f"max |diff| {worst_abs[name]:.3g}; ulps: count {h}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
