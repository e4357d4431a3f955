"""verify --spot-check: segments regenerated from their samples match bit for bit on an honest bake; a
fault injected into one segment of one MLP during the bake passes every exact check and is caught by a
spot check of that segment; a dataset with no trail is a usage error."""

from __future__ import annotations

import numpy as np
import pytest

from whestbench.bake.pipeline import BakeConfig, bake, create_dataset
from whestbench.compute.mlp import weights_for_seed
from whestbench.compute.pcg64 import Pcg64Stream, chunk_rows
from whestbench.errors import UsageError
from whestbench.verify.run import verify_dataset

SEEDS = [11, 22, 33]
SHAPE = dict(n_samples=9 * chunk_rows(8) + 50, width=8, depth=3)


@pytest.fixture(scope="module")
def honest(tmp_path_factory):
    return create_dataset(3, mlp_seeds=SEEDS, output_path=tmp_path_factory.mktemp("h") / "ds", **SHAPE)


@pytest.mark.parametrize("cv", [False, True])
def test_spot_check_passes_bit_for_bit_and_states_probability(tmp_path, cv):
    ds = create_dataset(3, mlp_seeds=SEEDS, output_path=tmp_path / "ds", estimator="control-variate" if cv else "plain",
                        **SHAPE)
    report = verify_dataset(ds, spot_check=4, spot_seed=7)
    check = report.get("spot-check")
    assert check.ok and "--spot-seed 7" in check.detail and "(bits)" in check.detail, check.detail
    assert "(9/10)^4 = 0.656 at f = 1/10" in check.detail  # 10 segments per MLP here, not the default 32
    assert report.ok


def test_fault_injected_through_step_is_caught(tmp_path, monkeypatch):
    target = weights_for_seed(SEEDS[1], SHAPE["width"], SHAPE["depth"])
    orig = Pcg64Stream.step
    step = chunk_rows(8)

    def faulty(self):  # one chunk of MLP 1 (its segment 4 of 10) runs on weights x 1.001: a device fault
        if self.position == 4 * step and np.array_equal(self.weights, target):
            self.weights = target * np.float32(1.001)
            try:
                return orig(self)
            finally:
                self.weights = target
        return orig(self)

    monkeypatch.setattr(Pcg64Stream, "step", faulty)
    ds = bake(BakeConfig(n_mlps=3, mlp_seeds=tuple(SEEDS), output=tmp_path / "ds", max_threads=1, **SHAPE))
    monkeypatch.undo()
    report = verify_dataset(ds, spot_check=30)  # every segment (3 MLPs x 10)
    assert report.get("trail").ok  # the stored numbers are the faulty samples' own
    check = report.get("spot-check")
    assert not check.ok and "mlp_id 1 segment 4:" in check.detail, check.detail


def test_forged_segment_state_is_caught(honest, tmp_path, rewrite_dataset):
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pq.read_table(honest / "audit" / "public.parquet")
    states = t.column("pcg64_state").to_pylist()
    states[2] = states[5]  # MLP 0's segment 2 claims segment 5's samples
    edited = tmp_path / "e.parquet"
    pq.write_table(t.set_column(t.schema.get_field_index("pcg64_state"), "pcg64_state", pa.array(states)), edited)
    bad = rewrite_dataset(honest, tmp_path / "bad", audit_from=edited)
    report = verify_dataset(bad, spot_check=30)
    assert not report.get("spot-check").ok and "mlp_id 0 segment" in report.get("spot-check").detail
    assert json.loads(states[2]) != json.loads(t.column("pcg64_state").to_pylist()[2])


def test_philox_spot_check_passes(tmp_path):
    pytest.importorskip("torch")
    cfg = BakeConfig(n_mlps=2, mlp_seeds=(5, 6), output=tmp_path / "ds", backend="torch", device="cpu",
                     audit_segments=8, skip_device_check=True, n_samples=5 * 4096 * 16 + 1000, width=8, depth=2)
    bake(cfg)
    check = verify_dataset(tmp_path / "ds", spot_check=3, spot_seed=1).get("spot-check")
    assert check.ok, check.detail


def test_no_trail_is_usage_error_and_device_needs_a_mode(tmp_path, honest):
    ds = bake(BakeConfig(n_mlps=1, mlp_seeds=(4,), output=tmp_path / "ds", audit_segments=0, **SHAPE))
    with pytest.raises(UsageError, match="no audit trail.*--recompute"):
        verify_dataset(ds, spot_check=1)
    with pytest.raises(UsageError, match="--device applies to --recompute and --spot-check"):
        verify_dataset(honest, device="cpu")
    with pytest.raises(UsageError, match="--spot-check must be a positive integer"):
        verify_dataset(honest, spot_check=0)


def test_spot_check_reports_progress_and_stops_between_segments(honest):
    import threading

    from whestbench.errors import BakeInterrupted

    events = []
    verify_dataset(honest, spot_check=3, on_event=events.append)
    done = [e.progress.done for e in events if e.progress is not None and e.progress.what == "samples"]
    assert done[0] == 0 and done[-1] == events[-1].progress.total > 0 and done == sorted(done) and len(done) == 4
    stop = threading.Event()
    stop.set()
    with pytest.raises(BakeInterrupted, match="spot-check stopped: 0 of 3 segments done") as exc:
        verify_dataset(honest, spot_check=3, stop=stop)
    assert exc.value.exit_code == 75


def test_cli_spot_check_prints_its_seed_and_probability(honest, capsys):
    from cli_run import run

    rc, out, err = run(["dataset", "verify", str(honest), "--spot-check", "2", "--spot-seed", "5"], capsys)
    assert rc == 0, err
    line = next(ln for ln in out.splitlines() if "spot-check" in ln)
    assert "--spot-seed 5" in line and "(9/10)^2 = 0.81 at f = 1/10" in line
    rc, out, err = run(["dataset", "bake", "--n-mlps", "1", "--n-samples", "100", "--width", "2", "--depth", "1",
                        "--audit-segments", "-1", "--output", str(honest.parent / "x")], capsys)
    assert rc == 2 and "--audit-segments" in err


def _stop_after(n_segments: int):
    """A stop event set once ``n_segments`` segments have been regenerated (from the progress events)."""
    import threading

    stop, seen = threading.Event(), []

    def on_event(e) -> None:
        if e.progress is not None and e.progress.what == "samples":
            seen.append(e.progress.done)
            if len(seen) > n_segments:
                stop.set()
    return stop, on_event, seen


def test_stopped_spot_check_resumes_from_its_record(honest, tmp_path):
    from whestbench.errors import BakeInterrupted

    root = tmp_path / "cache"
    stop, on_event, _ = _stop_after(2)
    with pytest.raises(BakeInterrupted, match=r"stopped: 2 of 4 segments done; the 2 found matching are recorded") as exc:
        verify_dataset(honest, spot_check=4, spot_seed=3, stop=stop, on_event=on_event, recompute_root=root)
    assert exc.value.exit_code == 75
    assert len(list(root.glob("spot-*.json"))) == 1
    # another seed is another check: the record does not apply to it (nor is it touched)
    other = verify_dataset(honest, spot_check=4, spot_seed=4, recompute_root=root).get("spot-check")
    assert other.ok and "resumed" not in other.detail
    # the same command resumes: two segments skipped, the progress starts past them, the line says so
    _, on_event, seen = _stop_after(99)
    check = verify_dataset(honest, spot_check=4, spot_seed=3, on_event=on_event, recompute_root=root).get("spot-check")
    assert check.ok and "all match (resumed: 2 of 4 segments already checked)" in check.detail, check.detail
    assert "(bits)" in check.detail and len(seen) == 3 and seen[0] > 0
    assert not list(root.glob("spot-*.json"))  # complete: removed, a later run regenerates every segment
    again = verify_dataset(honest, spot_check=4, spot_seed=3, recompute_root=root).get("spot-check")
    assert again.ok and "resumed" not in again.detail


def test_spot_check_record_that_does_not_match_is_ignored_and_no_cache_keeps_none(honest, tmp_path):
    import json

    from whestbench.errors import BakeInterrupted

    root = tmp_path / "cache"
    stop, on_event, _ = _stop_after(1)
    with pytest.raises(BakeInterrupted):
        verify_dataset(honest, spot_check=3, stop=stop, on_event=on_event, recompute_root=root)
    (record,) = root.glob("spot-*.json")
    got = json.loads(record.read_text())
    assert len(got["matched"]) == 1 and got["key"]["metadata_sha256"]
    # a record made for other contents (another dataset's digest) vouches for nothing here
    got["key"]["metadata_sha256"] = "0" * 64
    record.write_text(json.dumps(got))
    check = verify_dataset(honest, spot_check=3, recompute_root=root).get("spot-check")
    assert check.ok and "resumed" not in check.detail
    # --no-cache: a stop leaves no record, and a re-run reads none
    stop, on_event, _ = _stop_after(1)
    with pytest.raises(BakeInterrupted, match="1 of 3 segments done; re-run the same command to check them all"):
        verify_dataset(honest, spot_check=3, stop=stop, on_event=on_event, recompute_root=root / "x", cache=False)
    assert not (root / "x").exists()
    with pytest.raises(UsageError, match="--no-cache applies to --recompute and --spot-check only"):
        verify_dataset(honest, cache=False)


def test_cli_spot_check_resumes_and_takes_no_cache(honest, tmp_path, capsys):
    from cli_run import run

    from whestbench.errors import BakeInterrupted

    root = tmp_path / "cache"
    stop, on_event, _ = _stop_after(1)
    with pytest.raises(BakeInterrupted):
        verify_dataset(honest, spot_check=2, spot_seed=5, stop=stop, on_event=on_event, recompute_root=root)
    rc, out, err = run(["dataset", "verify", str(honest), "--spot-check", "2", "--spot-seed", "5", "--recompute-dir",
                        str(root)], capsys)
    assert rc == 0, err
    line = next(ln for ln in out.splitlines() if "spot-check" in ln)
    assert line.startswith("✓") and "(resumed: 1 of 2 segments already checked)" in line, line
    rc, out, err = run(["dataset", "verify", str(honest), "--spot-check", "2", "--no-cache", "--recompute-dir",
                        str(tmp_path / "unused")], capsys)
    assert rc == 0 and "resumed" not in out and not (tmp_path / "unused").exists(), err


def test_a_device_this_machine_lacks_is_refused_and_a_pcg64_check_says_it_ran_on_the_cpu(honest, monkeypatch):
    """`verify --spot-check 1 --device cuda` on a machine without CUDA said "regenerated on cuda (bits):
    all match" of a pcg64 segment it had computed with numpy on the CPU: the device is resolved before
    any work (refused when absent, as a bake refuses it), and a pcg64 check says where it ran."""
    from whestbench.work import torch_env

    def absent(name):
        raise UsageError(f"--device {name} was requested but this machine has none")

    monkeypatch.setattr(torch_env, "resolve_device", absent)
    with pytest.raises(UsageError, match="--device cuda was requested"):
        verify_dataset(honest, spot_check=1, device="cuda")
    monkeypatch.setattr(torch_env, "resolve_device", lambda name: "cuda")  # present: the pcg64 segment still runs on the CPU
    check = verify_dataset(honest, spot_check=1, device="cuda").get("spot-check")
    assert check.ok and "regenerated on cpu (the pcg64 sampler runs on the CPU only" in check.detail, check.detail
