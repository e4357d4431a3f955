"""whestbench 0.16.2's ``merge`` of our partials: we load and verify what it writes.

0.16.2's merge copies every key of its first partial but five into the merged metadata, our
``checksums`` (and ``checksums_written_for``) among them, although its merged data files differ.
Ours must recognise those checksums as stale (written by another program, for the partial's files),
say so, and load and verify the dataset on its content; a dataset of ours whose file was tampered
with is still refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import whestbench
from whestbench.cli import main
from whestbench.bake.pipeline import create_dataset
from whestbench.errors import MergeCorruptError
from whestbench.assemble.merge import merge_datasets
from whestbench.format.checksums import StaleChecksumsWarning, checksum_state
from whestbench.format.reader import read_metadata
from whestbench.verify.run import verify_dataset

pytestmark = pytest.mark.reference

SEEDS = [101, 2**62 + 5, 7, 123456789, 2**63 - 1]
SHAPE = dict(n_samples=300, width=8, depth=2)
SHARD = "data/public-00000-of-00001.parquet"
COLUMNS = ["mlp_id", "mlp_name", "mlp_seed", "weights", "all_layer_means", "final_means", "avg_variance"]


@pytest.fixture(scope="module")
def merges(tmp_path_factory, run_reference) -> dict[str, Path]:
    """Our partials (second slice first, so the reference keeps the [2, 5) partial's checksums),
    merged by the reference and by us."""
    root = tmp_path_factory.mktemp("reference-merge")
    parts = [
        create_dataset(len(SEEDS), **SHAPE, mlp_seeds=SEEDS, output_path=root / "part-1", mlp_range=(2, 5)),
        create_dataset(len(SEEDS), **SHAPE, mlp_seeds=SEEDS, output_path=root / "part-0", mlp_range=(0, 2)),
    ]
    run_reference(["dataset", "merge", *parts, "--output", root / "by-0.16"])
    return {"reference": root / "by-0.16", "ours": merge_datasets(parts, output_dir=root / "by-us"), "first": parts[0]}


def test_the_reference_carries_our_first_partials_checksums_into_other_files(merges):
    md = read_metadata(merges["reference"])
    first = read_metadata(merges["first"])
    assert md["checksums"] == first["checksums"] and md["checksums_written_for"] == first["checksums_written_for"]
    assert md["n_mlps"] == 5 and "is_partial" not in md and md["partials_count"] == 2
    assert checksum_state(merges["reference"], md).state == "stale"


def test_our_loader_loads_the_reference_merge_and_warns_its_checksums_are_stale(merges):
    with pytest.warns(StaleChecksumsWarning, match=r"written by another program.*MLPs \[2, 5\) of 5"):
        ds = whestbench.load_dataset(str(merges["reference"]), split="public")
    want = pq.read_table(merges["ours"] / SHARD, columns=COLUMNS).to_pylist()
    assert [{c: row[c] for c in COLUMNS} for row in ds] == want


def test_our_verify_passes_the_reference_merge_and_calls_its_checksums_stale(merges, capsys):
    report = verify_dataset(merges["reference"])
    assert report.ok, [c for c in report.checks if not c.ok]
    checksums = next(c for c in report.checks if c.name == "checksums")
    assert checksums.skipped and "stale, written by another program" in checksums.detail
    assert main(["dataset", "verify", str(merges["reference"])]) == 0
    assert "– checksums: checksums are stale, written by another program" in capsys.readouterr().out


def test_a_tampered_dataset_of_ours_is_still_refused(merges, tmp_path):
    import shutil

    ours = Path(shutil.copytree(merges["ours"], tmp_path / "ours"))
    raw = bytearray((ours / SHARD).read_bytes())
    raw[len(raw) // 2] ^= 0x01
    (ours / SHARD).write_bytes(bytes(raw))
    with pytest.raises(MergeCorruptError, match="does not match its checksum"):
        whestbench.load_dataset(str(ours), split="public")
    md = json.loads((ours / "metadata.json").read_text())
    md |= {"merged_at_utc": "2026-01-01T00:00:00+00:00"}  # looking merged does not make our checksums stale
    (ours / "metadata.json").write_text(json.dumps(md, indent=2))
    with pytest.raises(MergeCorruptError, match="does not match its checksum"):
        whestbench.load_dataset(str(ours), split="public")
