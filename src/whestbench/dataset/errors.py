"""Dataset error classes (public names kept from whestbench 0.16: all are ValueError subclasses)."""


class InvalidDatasetError(ValueError):
    """A dataset directory or its metadata is not a valid WhestBench dataset."""


class MergeIncompatibleError(InvalidDatasetError):
    """Partials (or splits) disagree on something that must be equal to merge (or combine) them."""


class MergeIncompleteError(InvalidDatasetError):
    """The partials leave some MLP indices uncovered."""


class MergeOverlapError(InvalidDatasetError):
    """Two partials cover the same MLP indices."""


class MergeCorruptError(InvalidDatasetError):
    """A partial's rows or files do not match what its metadata declares (ids, checksums)."""
