"""The resume ledger: units saved atomically and reloaded exactly, kept to one bake, and every file
checked when read (damaged, edited, truncated or swapped files are never trusted)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from whestbench.compute.seeds import seed_list_digest, validate_mlp_seeds
from whestbench.compute.stats import LayerSums
from whestbench.errors import UsageError
from whestbench.work.ledger import DamagedWorkFile, Ledger, LedgerMismatch, identity_digest, load_seeds, save_seeds
from whestbench.work.records import encode_record
from whestbench.work.units import Unit, WorkSpec

SPEC = WorkSpec(seeds=(1, 2, 3), n_samples=100, width=4, depth=2, mlp_range=(0, 3))
IDENTITY = SPEC.identity()


def _sums(seed: int) -> LayerSums:
    rng = np.random.default_rng(seed)
    return LayerSums(sums=rng.random((2, 4)), sumsq=rng.random((2, 4)), count=100)


def _check(key, sums):
    return SPEC.check_result(Unit(int(key[3:])), sums)


def _bits(s: LayerSums) -> bytes:
    return s.sums.tobytes() + s.sumsq.tobytes()


def test_saved_units_load_back_bit_for_bit(tmp_path):
    ledger = Ledger(tmp_path / "w", IDENTITY)
    ledger.save("mlp00000001", _sums(1), 2.5)
    sums, wall = Ledger(tmp_path / "w", IDENTITY).load("mlp00000001")
    assert _bits(sums) == _bits(_sums(1)) and sums.count == 100 and wall == 2.5


def test_scan_finds_the_finished_units(tmp_path):
    ledger = Ledger(tmp_path / "w", IDENTITY)
    ledger.save("mlp00000000", _sums(0), 1.0)
    ledger.save("mlp00000002", _sums(2), 1.0)
    done, damaged = ledger.scan([u.key for u in SPEC.units()], _check)
    assert done == {"mlp00000000": 100, "mlp00000002": 100} and damaged == []  # key -> samples counted


def test_peek_reads_what_a_previous_run_saved_and_writes_nothing(tmp_path):
    """A re-run's plan line reads saved work through ``Ledger.peek``: units and checkpoints of this bake
    only, the directory left byte for byte as it was."""
    assert Ledger.peek(tmp_path / "w", IDENTITY) is None  # no work directory: nothing saved, nothing created
    assert not (tmp_path / "w").exists()
    ledger = Ledger(tmp_path / "w", IDENTITY)
    ledger.save("mlp00000000", _sums(0), 1.0)
    ledger.save_checkpoint("mlp00000001", {"count": 40}, {"x": np.zeros(2)})
    before = {p: p.read_bytes() for p in (tmp_path / "w").rglob("*") if p.is_file()}
    peek = Ledger.peek(tmp_path / "w", IDENTITY)
    assert peek.saved("mlp00000000")[0] == "unit" and peek.saved("mlp00000000")[1]["count"] == 100
    assert peek.saved("mlp00000001") == ("checkpoint", {"count": 40})
    assert peek.saved("mlp00000002") is None
    assert Ledger.peek(tmp_path / "w", {**IDENTITY, "n_samples": 101}) is None  # another bake's work
    assert {p: p.read_bytes() for p in (tmp_path / "w").rglob("*") if p.is_file()} == before


def test_saving_leaves_no_temp_files(tmp_path):
    ledger = Ledger(tmp_path / "w", IDENTITY)
    for i in range(3):
        ledger.save(f"mlp{i:08d}", _sums(i), 1.0)
    assert sorted(p.name for p in ledger.units_dir.iterdir()) == [f"mlp{i:08d}.unit" for i in range(3)]
    assert sorted(p.name for p in ledger.root.iterdir()) == ["plan.json", "units"]


def test_a_stray_temp_file_from_a_crash_is_ignored(tmp_path):
    ledger = Ledger(tmp_path / "w", IDENTITY)
    ledger.save("mlp00000000", _sums(0), 1.0)
    (ledger.units_dir / ".mlp00000001.unit.k3j2h1.tmp").write_bytes(b"WHESTREC1\n truncated")
    assert ledger.scan([u.key for u in SPEC.units()], _check) == ({"mlp00000000": 100}, [])


# --- damaged unit files: found, reported, renamed aside, recomputed -------------------------------


def _damage_cases():
    def swap(ledger):  # each MLP would get the other's means
        a, b = ledger.unit_path("mlp00000000"), ledger.unit_path("mlp00000001")
        tmp = a.with_suffix(".x")
        a.rename(tmp)
        b.rename(a)
        tmp.rename(b)

    def rewrite(ledger, key, sums, count=100):  # a well-formed record (valid checksum) with bad content
        blob = encode_record("unit", key, ledger.digest, {"count": count, "wall_s": 1.0}, sums.arrays())
        ledger.unit_path(key).write_bytes(blob)

    nan = _sums(0)
    nan.sums[0, 0] = np.nan
    return {
        "swapped": (swap, "not mlp0000000"),
        "nan-sums": (lambda lg: rewrite(lg, "mlp00000000", nan), "non-finite"),
        "count-zero": (lambda lg: rewrite(lg, "mlp00000000", _sums(0), count=0), "covers 0 samples"),
        "wrong-shape": (lambda lg: rewrite(lg, "mlp00000000", LayerSums(np.ones((3, 4)), np.ones((3, 4)), 100)), "shape"),
        "truncated": (lambda lg: lg.unit_path("mlp00000000").write_bytes(lg.unit_path("mlp00000000").read_bytes()[:50]), "checksum"),
        "zero-bytes": (lambda lg: lg.unit_path("mlp00000000").write_bytes(b""), "too short"),
        "garbage": (lambda lg: lg.unit_path("mlp00000000").write_bytes(b"PK\x03\x04" + bytes(range(256)) * 4), "wrong header"),
        "bit-flip": (lambda lg: lg.unit_path("mlp00000000").write_bytes(
            (lambda b: b[:-40] + bytes([b[-40] ^ 1]) + b[-39:])(lg.unit_path("mlp00000000").read_bytes())), "checksum"),
        "other-plan": (lambda lg: lg.unit_path("mlp00000000").write_bytes(
            encode_record("unit", "mlp00000000", "0" * 64, {"count": 100, "wall_s": 1.0}, _sums(0).arrays())), "another bake"),
    }


@pytest.mark.parametrize("case", list(_damage_cases()))
def test_a_damaged_unit_file_is_reported_and_not_trusted(tmp_path, case):
    damage, why = _damage_cases()[case]
    ledger = Ledger(tmp_path / "w", IDENTITY)
    for i in range(3):
        ledger.save(f"mlp{i:08d}", _sums(i), 1.0)
    damage(ledger)
    done, damaged = ledger.scan([u.key for u in SPEC.units()], _check)
    assert "mlp00000000" not in done
    assert damaged and all(why in reason for _, reason in damaged[:1]), damaged
    assert not ledger.unit_path("mlp00000000").exists()  # renamed aside, never read again
    assert ledger.unit_path("mlp00000000").with_suffix(".damaged").exists()


# --- the plan and the seeds -----------------------------------------------------------------------


def test_plan_records_the_identity_and_its_digest(tmp_path):
    Ledger(tmp_path / "w", IDENTITY)
    plan = json.loads((tmp_path / "w" / "plan.json").read_text())
    assert plan["identity"] == IDENTITY and plan["digest"] == identity_digest(IDENTITY)


def test_a_different_bake_is_refused_naming_the_field(tmp_path):
    Ledger(tmp_path / "w", IDENTITY)
    with pytest.raises(LedgerMismatch, match=r"differs in: n_samples") as info:
        Ledger(tmp_path / "w", dict(IDENTITY, n_samples=200))
    assert str(tmp_path / "w") in str(info.value)  # says which directory to delete to start over
    assert isinstance(info.value, UsageError)


@pytest.mark.parametrize("damage", ["edited", "truncated", "garbage", "empty", "old-format"])
def test_a_damaged_plan_is_refused_naming_the_file(tmp_path, damage):
    Ledger(tmp_path / "w", IDENTITY)
    plan = tmp_path / "w" / "plan.json"
    data = json.loads(plan.read_text())
    if damage == "edited":
        data["identity"]["n_samples"] = 7
        plan.write_text(json.dumps(data))
    elif damage == "truncated":
        plan.write_text(plan.read_text()[:40])
    elif damage == "garbage":
        plan.write_bytes(b"\xff\xfe\x00garbage")
    elif damage == "empty":
        plan.write_text("")
    else:
        plan.write_text(json.dumps(IDENTITY))  # what an older whestbench wrote
    with pytest.raises(DamagedWorkFile) as info:
        Ledger(tmp_path / "w", IDENTITY)
    assert str(plan) in str(info.value) and "remove" in str(info.value)


def _load(root, n=4):
    return load_seeds(root, n, seed_list_digest, validate_mlp_seeds)


def test_saved_seeds_load_back(tmp_path):
    save_seeds(tmp_path, [7, 8, 9, 10], seed_list_digest([7, 8, 9, 10]))
    assert _load(tmp_path) == [7, 8, 9, 10]


def test_no_saved_seeds_is_none(tmp_path):
    assert _load(tmp_path) is None


@pytest.mark.parametrize("text", [
    '{"format": "whestbench-seeds/1", "seed_list_digest": "x", "seeds": [5, 5, 5, 5]}',
    "[5, 5, 5, 5]",
    "",
    "[" * 100000,
    '{"format": "whestbench-seeds/1", "seed_list_digest": "x", "seeds": [1, 2, 3, 4]}',
])
def test_edited_or_damaged_seeds_are_refused_naming_the_file(tmp_path, text):
    (tmp_path / "auto-seeds.json").write_text(text)
    with pytest.raises(DamagedWorkFile) as info:
        _load(tmp_path)
    assert str(tmp_path / "auto-seeds.json") in str(info.value)


def test_seeds_edited_together_with_their_digest_are_still_refused(tmp_path):
    save_seeds(tmp_path, [5, 5, 5, 5], seed_list_digest([5, 5, 5, 5]))
    with pytest.raises(DamagedWorkFile, match="duplicate"):
        _load(tmp_path)
