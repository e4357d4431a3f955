"""Pure computation: seeds, names, weights, the samplers and the estimators (arrays in, sums out; no
I/O, no files, no clocks).

May import: nothing but the top-level helpers (errors, text).
"""
