"""Baking: the request and its plan (``plan``: ``BakeConfig``, ``BakePlan``), the pipeline that runs
the plan and writes the dataset (``pipeline``: ``create_dataset``), and ``whest doctor``'s checks of
every bake path (``doctor``).

May import: ``compute``, ``work``, ``format``, ``hub`` and the top-level helpers.
"""
