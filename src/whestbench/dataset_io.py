"""whestbench 0.16's ``whestbench.dataset_io`` names, kept working on top of ``whestbench.dataset``.

A thin public face: code written against 0.16 (``from whestbench.dataset_io import merge_datasets,
MergeOverlapError``) keeps running. New code imports from the packages directly (docs/architecture.md).
"""

from __future__ import annotations

from whestbench.assemble.combine import (
    build_prepared_splits_for_directory,
    combine_split_datasets,
    prepare_arrow,
    write_prepared_arrow_split,
)
from whestbench.assemble.merge import merge_datasets
from whestbench.format.reader import read_metadata
from whestbench.format.schema import (
    DEFAULT_CONFIG,
    DEFAULT_SPLIT,
    FORMAT,
    SCHEMA_VERSION,
    make_features,
    validate_metadata,
)
from whestbench.errors import (
    InvalidDatasetError,
    MergeCorruptError,
    MergeIncompatibleError,
    MergeIncompleteError,
    MergeOverlapError,
)

__all__ = [
    "DEFAULT_CONFIG",
    "DEFAULT_SPLIT",
    "FORMAT",
    "InvalidDatasetError",
    "MergeCorruptError",
    "MergeIncompatibleError",
    "MergeIncompleteError",
    "MergeOverlapError",
    "SCHEMA_VERSION",
    "build_prepared_splits_for_directory",
    "combine_split_datasets",
    "make_features",
    "merge_datasets",
    "prepare_arrow",
    "read_metadata",
    "validate_metadata",
    "write_prepared_arrow_split",
]
