"""Datasets made from datasets: partials into one (``merge``), single-split datasets into one
multi-split dataset and its prepared Arrow copies (``combine``), and their inputs and output, checked
before any work (``inputs``).

May import: ``compute``, ``work``, ``format``, ``hub``, ``bake``, ``verify`` and the top-level helpers.
"""
