"""schema: metadata accessors that give whestbench 0.16 datasets (which record less) their meaning."""

from __future__ import annotations

import pytest

from whestbench.format.schema import infer_sampler


@pytest.mark.parametrize(
    ("md", "sampler"),
    [
        ({"backend": "flopscope"}, "pcg64"),  # whestbench 0.16's CPU bake is our pcg64 sampler
        ({"backend": "torch"}, "torch-randn"),  # 0.16's torch bake, no sampler block
        ({"backend": "torch", "sampler": {"name": "philox"}}, "philox"),
    ],
)
def test_the_sampler_is_read_or_inferred_from_metadata(md, sampler):
    assert infer_sampler(md) == sampler
