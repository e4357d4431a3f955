"""The resume ledger: finished units are saved atomically, reloaded exactly, and kept to one bake."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from whestbench.compute.stats import LayerSums
from whestbench.errors import UsageError
from whestbench.work.ledger import Ledger, LedgerMismatch, work_dir_for
from whestbench.work.units import Unit, WorkSpec, plan_units

IDENTITY = WorkSpec(seeds=(1, 2, 3), n_samples=100, width=4, depth=2, mlp_range=(0, 3)).identity()


def _sums(seed: int) -> LayerSums:
    rng = np.random.default_rng(seed)
    return LayerSums(sums=rng.standard_normal((2, 4)), sumsq=rng.random(4), count=100)


def test_work_dir_sits_beside_the_output():
    assert work_dir_for(Path("/data/out/ds")) == Path("/data/out/ds.whest-work")


def test_saved_units_load_back_bit_for_bit(tmp_path):
    ledger = Ledger(tmp_path / "w", IDENTITY)
    ledger.save("mlp00000001", _sums(1), 2.5)
    ledger.save("mlp00000002", _sums(2), 0.5)
    done = Ledger(tmp_path / "w", IDENTITY).load_done()
    assert sorted(done) == ["mlp00000001", "mlp00000002"]
    sums, wall = done["mlp00000001"]
    assert sums.sums.tobytes() == _sums(1).sums.tobytes()
    assert sums.sumsq.tobytes() == _sums(1).sumsq.tobytes()
    assert sums.count == 100 and wall == 2.5


def test_an_empty_ledger_has_nothing_done(tmp_path):
    assert Ledger(tmp_path / "w", IDENTITY).load_done() == {}


def test_saving_leaves_no_temp_files(tmp_path):
    ledger = Ledger(tmp_path / "w", IDENTITY)
    for i in range(3):
        ledger.save(f"mlp{i:08d}", _sums(i), 1.0)
    assert sorted(p.name for p in ledger.units_dir.iterdir()) == [f"mlp{i:08d}.npz" for i in range(3)]
    assert sorted(p.name for p in ledger.root.iterdir()) == ["plan.json", "units"]


def test_a_stray_temp_file_from_a_crash_is_ignored(tmp_path):
    ledger = Ledger(tmp_path / "w", IDENTITY)
    ledger.save("mlp00000000", _sums(0), 1.0)
    # What a crash between write and rename leaves behind: a half-written temp file.
    (ledger.units_dir / ".mlp00000001.npz.k3j2h1.tmp").write_bytes(b"PK\x03\x04 truncated")
    assert list(Ledger(tmp_path / "w", IDENTITY).load_done()) == ["mlp00000000"]


def test_saving_a_unit_again_replaces_it(tmp_path):
    ledger = Ledger(tmp_path / "w", IDENTITY)
    ledger.save("mlp00000000", _sums(0), 1.0)
    ledger.save("mlp00000000", _sums(9), 3.0)
    sums, wall = ledger.load_done()["mlp00000000"]
    assert sums.sums.tobytes() == _sums(9).sums.tobytes() and wall == 3.0


def test_plan_records_the_identity(tmp_path):
    Ledger(tmp_path / "w", IDENTITY)
    assert json.loads((tmp_path / "w" / "plan.json").read_text()) == IDENTITY


def test_a_different_bake_is_refused_naming_the_field(tmp_path):
    Ledger(tmp_path / "w", IDENTITY)
    other = dict(IDENTITY, n_samples=200)
    with pytest.raises(LedgerMismatch, match=r"differs in: n_samples") as info:
        Ledger(tmp_path / "w", other)
    assert str(tmp_path / "w") in str(info.value)  # says which directory to delete to start over
    assert isinstance(info.value, UsageError)


def test_a_different_seed_list_is_refused(tmp_path):
    Ledger(tmp_path / "w", IDENTITY)
    other = WorkSpec(seeds=(1, 2, 4), n_samples=100, width=4, depth=2, mlp_range=(0, 3)).identity()
    with pytest.raises(LedgerMismatch, match="seed_list_digest"):
        Ledger(tmp_path / "w", other)


def test_refusal_leaves_the_saved_units_alone(tmp_path):
    Ledger(tmp_path / "w", IDENTITY).save("mlp00000000", _sums(0), 1.0)
    with pytest.raises(LedgerMismatch):
        Ledger(tmp_path / "w", dict(IDENTITY, width=8))
    assert list(Ledger(tmp_path / "w", IDENTITY).load_done()) == ["mlp00000000"]


def test_remove_deletes_the_work_dir(tmp_path):
    ledger = Ledger(tmp_path / "w", IDENTITY)
    ledger.save("mlp00000000", _sums(0), 1.0)
    ledger.remove()
    assert not (tmp_path / "w").exists()


def test_identity_covers_everything_that_changes_the_numbers():
    base = WorkSpec(seeds=(1, 2, 3), n_samples=100, width=4, depth=2, mlp_range=(0, 3))
    variants = [
        WorkSpec(seeds=(1, 2, 3), n_samples=101, width=4, depth=2, mlp_range=(0, 3)),
        WorkSpec(seeds=(1, 2, 3), n_samples=100, width=5, depth=2, mlp_range=(0, 3)),
        WorkSpec(seeds=(1, 2, 3), n_samples=100, width=4, depth=3, mlp_range=(0, 3)),
        WorkSpec(seeds=(1, 2, 3), n_samples=100, width=4, depth=2, mlp_range=(0, 2)),
        WorkSpec(seeds=(3, 2, 1), n_samples=100, width=4, depth=2, mlp_range=(0, 3)),
        WorkSpec(seeds=(1, 2, 3), n_samples=100, width=4, depth=2, mlp_range=(0, 3), sampler="philox"),
        WorkSpec(seeds=(1, 2, 3), n_samples=100, width=4, depth=2, mlp_range=(0, 3), kernel="3xtf32"),
    ]
    digests = {base.identity_digest()} | {v.identity_digest() for v in variants}
    assert len(digests) == len(variants) + 1


def test_unit_keys_name_the_mlp_not_the_order():
    assert [u.key for u in plan_units(WorkSpec(seeds=(5, 6, 7, 8), n_samples=1, width=1, depth=1, mlp_range=(1, 3)))] == [
        "mlp00000001",
        "mlp00000002",
    ]
    assert Unit(3, 0, 64).key == "mlp00000003x1-b0000000000-0000000064"
    assert Unit(3, 0, 64, mlp_count=4).key == "mlp00000003x4-b0000000000-0000000064"
