"""The ``pcg64`` sampler: whestbench 0.16's CPU ground truth, bit for bit, in fewer passes.

Per MLP: ``rng = default_rng(sample_ss)`` (numpy PCG64); the samples are drawn in chunks of
``chunk_rows(width)`` rows of float32 standard normals (ziggurat). Each chunk runs through every
layer as a float32 matmul then ReLU; per layer the chunk's fp64 column sums (starting from zero) are
added to the running sums, and the last layer's fp64 squares likewise. The chunk boundaries,
matmul shapes and summation order are the reference's, so with the same BLAS kernel the sums are
identical. Thread count never enters: one MLP is one sequential stream on one thread.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from whestbench.compute.segments import SegmentTrail, finish, trail_names
from whestbench.compute.stats import LayerSums
from whestbench.compute.estimators import batch_rows

SAMPLER_NAME = "pcg64"
SAMPLER_VERSION = "1"
# The fused kernels (compute/fused.py) save ~0.6 ns per activation over the plain numpy passes, but
# importing numba and loading them costs ~0.3-0.5 s per process (~1 s to compile them on a cold
# cache): bakes of fewer activations than this (samples x width x depth, summed over the MLPs) run
# the plain passes, which give the same bits (docs/performance.md, "Start-up").
FUSED_MIN_ACTIVATIONS = 2**29


def fused_pays(n_mlps: int, n_samples: int, width: int, depth: int) -> bool:
    """Whether a bake of ``n_mlps`` MLPs gains from the fused kernels, numba's start-up included
    (at width 1 they are never used: see ``Pcg64Stream``)."""
    return width > 1 and n_mlps * n_samples * width * depth >= FUSED_MIN_ACTIVATIONS


def chunk_rows(width: int) -> int:
    """Rows per chunk: ``max(1024, min(16384, 2**20 // width))`` (the reference's CPU rule)."""
    return max(1024, min(16384, (1 << 20) // width))


class Pcg64Stream:
    """One MLP's pcg64 sampling as a loop that can stop after any chunk and resume later.

    ``state()`` is everything needed to continue (the bit generator's state, the position, the
    fp64 partial sums), so ``restore(state)`` then ``run()`` gives the same bits as one
    uninterrupted ``run()``: the chunks, their draws and the order of every addition are unchanged.
    ``weights``: (depth, width, width) float32. With ``controls`` (``compute.estimators``) each
    chunk is also a batch of the control-variate estimator: its ``n·r̄`` and ``n·r̄²`` are added to
    ``cv`` and ``cvsq`` in chunk order.

    ``segments``: the audit trail's ``[(start, end)]`` (``compute.segments.segment_bounds``, chunk-aligned):
    each segment's sums are kept apart (never touching the running sums, so the columns keep their bits)
    and turned into its float32 values when it ends; the generator's state is kept at each start.
    """

    def __init__(self, weights: np.ndarray, sample_ss: np.random.SeedSequence, n_samples: int, *,
                 fused: bool = True, controls=None, segments: list[tuple[int, int]] | None = None):
        depth, width, _ = weights.shape
        if n_samples <= 0:
            raise ValueError(f"n_samples must be positive; got {n_samples}.")
        self.weights, self.n_samples, self.controls = weights, int(n_samples), controls
        self.rng = np.random.default_rng(sample_ss)
        self.chunk = chunk_rows(width)
        self.position = 0
        self.sums = np.zeros((depth, width), dtype=np.float64)
        self.sumsq = np.zeros((depth, width), dtype=np.float64)
        self.cv = np.zeros((depth, width), dtype=np.float64) if controls is not None else None
        self.cvsq = np.zeros((depth, width), dtype=np.float64) if controls is not None else None
        self.segments = list(segments or [])
        names = trail_names(controls is not None)
        self.trail_acc = np.zeros((len(names) * depth, width), dtype=np.float64)  # the current segment's sums
        self.trail_values = {k: np.zeros((len(self.segments), depth, width), dtype=np.float32) for k in names}
        self.trail_states: list = []
        # At width 1 the (n, 1) array is one contiguous column, which numpy sums pairwise rather than
        # row by row; the plain formulation is the reference's arithmetic there (and is cheap anyway).
        self.fused = fused and width > 1
        if self.fused:
            self._buf = [np.empty((self.chunk, width), dtype=np.float32) for _ in range(2)]
            self._part = np.empty((depth, width), dtype=np.float64)
            self._part_sq = np.empty((depth, width), dtype=np.float64)

    @property
    def done(self) -> bool:
        return self.position >= self.n_samples

    def _arrays(self) -> dict[str, np.ndarray]:
        out = {"sums": self.sums, "sumsq": self.sumsq}
        if self.controls is not None:
            out.update(cv=self.cv, cvsq=self.cvsq)
        return out

    def _trail_arrays(self) -> dict[str, np.ndarray]:
        if not self.segments:
            return {}
        return {"trail_acc": self.trail_acc, **{f"trail_{k}": v for k, v in self.trail_values.items()}}

    def state(self) -> tuple[dict, dict[str, np.ndarray]]:
        """``(meta, arrays)``: JSON-able generator state and position, and the partial sums (with a
        trail: the current segment's sums, the finished segments' values and the states so far)."""
        meta = {"position": self.position, "bit_generator": self.rng.bit_generator.state}
        if self.segments:
            meta["trail_states"] = list(self.trail_states)
        arrays = {**self._arrays(), **self._trail_arrays()}
        return meta, {k: v.copy() for k, v in arrays.items()}

    def restore(self, meta: dict, arrays: dict[str, np.ndarray]) -> None:
        """Continue from a ``state()``; ValueError if it cannot belong to this stream."""
        position = int(meta["position"])
        if not 0 <= position <= self.n_samples or (position % self.chunk and position != self.n_samples):
            raise ValueError(f"position {position} is not a chunk boundary of this stream")
        mine = {**self._arrays(), **self._trail_arrays()}
        if set(arrays) != set(mine) or any(arrays[k].shape != v.shape for k, v in mine.items()):
            raise ValueError("partial sums have the wrong names or shapes")
        states = list(meta.get("trail_states", []))
        if len(states) != sum(start < position for start, _ in self.segments):
            raise ValueError(f"{len(states)} segment states saved at sample {position}")
        self.rng.bit_generator.state = meta["bit_generator"]
        self.position = position
        for k in self._arrays():
            setattr(self, k, np.array(arrays[k], dtype=np.float64))
        if self.segments:
            self.trail_acc = np.array(arrays["trail_acc"], dtype=np.float64)
            self.trail_values = {k: np.array(arrays[f"trail_{k}"], dtype=np.float32) for k in self.trail_values}
            self.trail_states = states

    def seek(self, segment: int, state: dict) -> None:
        """Start at segment ``segment``'s first sample with the generator ``state`` stored for it (a
        spot check): the running sums restart from zero."""
        start = self.segments[segment][0]
        self.rng.bit_generator.state = state
        self.position = start
        for k, v in self._arrays().items():
            setattr(self, k, np.zeros_like(v))
        self.trail_acc[:] = 0.0
        self.trail_states = [None] * segment

    def step(self) -> int:
        """Sample the next chunk through every layer; return its row count (0 when done)."""
        n = min(self.chunk, self.n_samples - self.position)
        if n <= 0:
            return 0
        k = len(self.trail_states)
        if k < len(self.segments) and self.position == self.segments[k][0]:
            self.trail_states.append(self.rng.bit_generator.state)
        depth = self.weights.shape[0]
        x = self.rng.standard_normal((n, self.weights.shape[1]), dtype=np.float32)  # (n, width)
        z2sq = None
        if self.fused:
            from whestbench.compute.fused import relu_colsum_sq

            part, part_sq = self._part, self._part_sq
            for layer in range(depth):
                h = self._buf[layer % 2][:n]
                np.matmul(x, self.weights[layer], out=h)  # (n, width) float32 sgemm
                if layer == 1 and self.controls is not None:  # layer 2's pre-activations squared, same sweep
                    z2sq = np.empty(h.shape[1])
                    relu_colsum_sq(h, part[layer], part_sq[layer], z2sq)
                else:
                    relu_colsum_sq(h, part[layer], part_sq[layer])
                self.sums[layer] += part[layer]
                self.sumsq[layer] += part_sq[layer]
                x = h
        else:
            part = np.empty((depth, x.shape[1]))
            for layer in range(depth):
                z = np.matmul(x, self.weights[layer])
                if layer == 1 and self.controls is not None:
                    z64 = z.astype(np.float64)
                    z2sq = np.sum(z64 * z64, axis=0)  # row by row, as the fused kernel adds
                x = np.maximum(z, 0.0)
                part[layer] = np.sum(x.astype(np.float64), axis=0)
                self.sums[layer] = self.sums[layer] + part[layer]
                part_sq_l = np.sum(x.astype(np.float64) ** 2, axis=0)
                self.sumsq[layer] = self.sumsq[layer] + part_sq_l
                if self.segments:
                    self.trail_acc[depth + layer] += part_sq_l
        if self.controls is not None:
            z2 = z2sq if z2sq is not None else np.zeros(self.weights.shape[1])
            cv, cvsq = batch_rows(self.controls, part[None], z2[None], np.array([n]))
            self.cv += cv[0]
            self.cvsq += cvsq[0]
        if self.segments:
            acc = self.trail_acc
            acc[:depth] += part
            if self.fused:
                acc[depth:2 * depth] += part_sq
            if self.controls is not None:
                acc[2 * depth:3 * depth] += cv[0]
                acc[3 * depth:] += cvsq[0]
        self.position += n
        k = len(self.trail_states) - 1
        if self.segments and self.position == self.segments[k][1]:
            for name, v in finish(self.trail_acc, self.segments[k][1] - self.segments[k][0], depth).items():
                self.trail_values[name][k] = v
            self.trail_acc[:] = 0.0
        return n

    def segment_values(self, k: int) -> dict[str, np.ndarray]:
        """Segment ``k``'s float32 values (once it has ended)."""
        return {name: v[k].copy() for name, v in self.trail_values.items()}

    def result(self, *, partial: bool = False) -> LayerSums:
        """The sums so far: all ``n_samples`` (``partial=True``: the samples drawn up to now)."""
        if not (self.done or partial):
            raise ValueError(f"the stream is at sample {self.position} of {self.n_samples}")
        out = LayerSums.from_arrays({k: v.copy() for k, v in self._arrays().items()}, self.position)
        if self.segments:
            out.trail = SegmentTrail(0, {k: v.copy() for k, v in self.trail_values.items()}, list(self.trail_states))
        return out


def sample_layer_sums(
    weights: np.ndarray,
    sample_ss: np.random.SeedSequence,
    n_samples: int,
    *,
    on_chunk: Callable[[int], None] | None = None,
    fused: bool = True,
    controls=None,
    segments: list[tuple[int, int]] | None = None,
) -> LayerSums:
    """fp64 sums of every layer's post-ReLU activations over ``n_samples`` Gaussian inputs.

    ``weights``: (depth, width, width) float32. ``on_chunk(rows)`` is called after each chunk.
    ``fused=False`` runs the plain numpy formulation (the executable specification the fused
    kernels are tested against).
    """
    stream = Pcg64Stream(weights, sample_ss, n_samples, fused=fused, controls=controls, segments=segments)
    while not stream.done:
        n = stream.step()
        if on_chunk is not None:
            on_chunk(n)
    return stream.result()
