"""whestbench 0.16.2 loads a torch bake whose metadata.json carries ``device_check`` (issue 20), and
its ``info`` reads it: the new key is optional for readers (SPEC §4)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from whestbench.dataset_torch import create_dataset_torch  # noqa: E402

pytestmark = pytest.mark.reference

_PROBE = r'''
import json, sys
import whestbench
from whestbench.cli import main
ds = whestbench.load_dataset(sys.argv[1])
md = whestbench.metadata(ds)
mlps = list(whestbench.iter_mlps(ds))
rc = main(["dataset", "info", sys.argv[1]])
print(json.dumps({"n": len(mlps), "names": [m.name for m in mlps], "has_check": "device_check" in md, "info_rc": rc}))
'''


def test_the_reference_loads_a_torch_bake_with_its_device_check(tmp_path, run_reference_python):
    out = create_dataset_torch(n_mlps=2, n_samples=3000, width=8, depth=2, seed=5, output_path=tmp_path / "t", device="cpu")
    md = json.loads((out / "metadata.json").read_text())
    assert md["device_check"]["passed"] is True
    got = json.loads(run_reference_python(_PROBE, str(out)).stdout.strip().splitlines()[-1])
    assert got["n"] == 2 and got["has_check"] is True and got["info_rc"] in (0, None)
