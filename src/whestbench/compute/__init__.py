"""Pure computation: seeds, names, weights and the sampling kernels (arrays in, sums out; no I/O)."""
