"""Looking at and checking a dataset: integrity and the entry point (``run``), the row scan
(``scan``), layer 1 exact and the stored error bars (``statistics``), the pilot checks
(``plausibility``), ``--against`` (``compare``), ``--recompute`` (``recompute``) and ``inspect``.

May import: ``compute``, ``work``, ``format``, ``hub``, ``bake`` and the top-level helpers.
"""
