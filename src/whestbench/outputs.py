"""Kept for its import path; the output checks live in ``whestbench.paths``."""

from whestbench.errors import OutputExistsError  # noqa: F401
from whestbench.paths import check_new_output, check_outside_inputs  # noqa: F401
