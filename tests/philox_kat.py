"""Philox4x32-10 known answers: Random123's tests/kat_vectors, its three "philox4x32 10" lines.

Each entry is (counter, key, expected output); shared by the numpy, numba, torch and Triton sampler
tests, with ``ulps``, the float32 distance those tests bound the float stage by.
"""

import numpy as np

KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]
KEY = (0xA4093822, 0x299F31D0)  # the third line's key: a key with every byte in use


def ulps(a, b) -> np.ndarray:
    """Distance in float32 units in the last place (monotone integer mapping of the bit patterns)."""

    def ordered(x):
        i = np.asarray(x, dtype=np.float32).view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)

    return np.abs(ordered(a) - ordered(b))
