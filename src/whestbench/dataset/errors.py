"""The dataset error classes under their whestbench 0.16 import path; defined in ``whestbench.errors``."""

from whestbench.errors import InvalidDatasetError, MergeCorruptError, MergeIncompatibleError, MergeIncompleteError, MergeOverlapError  # noqa: F401,E501
