"""verify --spot-check: segments regenerated from their samples match bit for bit on an honest bake; a
fault injected into one segment of one MLP during the bake passes every exact check and is caught by a
spot check of that segment; a dataset with no trail is a usage error."""

from __future__ import annotations

import numpy as np
import pytest

from whestbench.bake.pipeline import BakeConfig, bake, create_dataset
from whestbench.compute.mlp import weights_for_seed
from whestbench.compute.pcg64 import chunk_rows
from whestbench.errors import UsageError
from whestbench.verify.run import verify_dataset

from helpers.cli import run
from helpers.device_faults import scaled_weights


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
    # 10 segments per MLP here, not the default 32: 4 of 30 drawn; one bad segment in each of the 3 MLPs is
    # missed with probability C(27,4)/C(30,4) = 17550/27405; one forged segment with 26/30
    assert ("this draw (4 of 30 segments in 3 MLPs) catches one bad segment in every MLP with probability 0.36, "
            "and 1 forged segment in one MLP of 3 with probability 0.133") in check.detail, check.detail
    assert report.ok


def test_one_mlp_is_named_in_the_singular(tmp_path):
    """A one-MLP dataset's verify said "(4 of 31 segments in 1 MLPs)" and "statistics: all 1 MLPs"
    (issue 35's fresh-clone run)."""
    ds = create_dataset(1, mlp_seeds=SEEDS[:1], output_path=tmp_path / "ds", **SHAPE)
    report = verify_dataset(ds, spot_check=2, spot_seed=7)
    assert "(2 of 10 segments in 1 MLP) catches" in report.get("spot-check").detail
    assert report.coverage["statistics"] == "the 1 MLP"


def test_fault_injected_through_step_is_caught(tmp_path, monkeypatch):
    # one chunk of MLP 1 (its segment 4 of 10) runs on weights x 1.001: a device fault
    target = weights_for_seed(SEEDS[1], SHAPE["width"], SHAPE["depth"])
    scaled_weights(monkeypatch, target, 1.001, lambda stream: stream.position == 4 * chunk_rows(8))
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


@pytest.mark.parametrize("estimator, segments", [("plain", 8), ("control-variate", 32)])
def test_philox_spot_check_passes_bit_for_bit_from_the_segments_own_batches(tmp_path, estimator, segments):
    """A philox segment is regenerated from its own batches (not the 65,536-sample blocks around it, which
    made a spot check of small segments cost 10x their samples): every segment, bit for bit, the ragged
    last one included; and a segment's values moved by one ulp are caught."""
    pytest.importorskip("torch")
    import pyarrow as pa
    import pyarrow.parquet as pq

    from whestbench.compute.estimation import Estimation

    cfg = BakeConfig(n_mlps=2, mlp_seeds=(5, 6), output=tmp_path / "ds", backend="torch", device="cpu",
                     audit_segments=segments, skip_device_check=True, n_samples=5 * 4096 * 16 + 1000, width=8, depth=3,
                     estimation=Estimation(estimator))
    bake(cfg)
    events = []
    check = verify_dataset(tmp_path / "ds", spot_check=f"{segments}/mlp", spot_seed=1, pilot=False, cache=False,
                           on_event=events.append).get("spot-check")
    import re

    drawn = re.search(r"this draw \((\d+) of (\d+) segments in 2 MLPs\)", check.detail)
    assert check.ok and "(bits)" in check.detail and drawn and drawn.group(1) == drawn.group(2), check.detail
    assert max(e.progress.done for e in events if e.progress is not None) == 2 * cfg.n_samples  # its samples, no more
    path = tmp_path / "ds" / "audit" / "public.parquet"
    t = pq.read_table(path)
    col = t.column("means").to_pylist()
    col[3] = [float(np.nextafter(np.float32(v), np.float32(1))) if i == 5 else v for i, v in enumerate(col[3])]
    pq.write_table(t.set_column(t.schema.get_field_index("means"), "means", pa.array(col, t.schema.field("means").type)),
                   path)
    from whestbench.verify.spot import spot_check
    from whestbench.verify.report import VerifyReport
    from whestbench.verify.run import _integrity
    from whestbench.format.reader import open_dataset

    report = VerifyReport(tmp_path / "ds", None)
    spot_check(_integrity(open_dataset(tmp_path / "ds"), report), report, f"{segments}/mlp", 1, None)
    assert not report.get("spot-check").ok and "mlp_id 0 segment 3: means layer 1 neuron 5" in report.get("spot-check").detail


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
    with pytest.raises(BakeInterrupted, match="spot-check stopped: 0 of 3 segments done; re-run the same command to "
                                              "check the rest .*--spot-check 3 --spot-seed 8") as exc:
        verify_dataset(honest, spot_check=3, stop=stop, spot_seed=8, cache=False)
    assert exc.value.exit_code == 75


def test_cli_spot_check_prints_its_seed_and_probability(honest, capsys):
    rc, out, err = run(["dataset", "verify", str(honest), "--spot-check", "2", "--spot-seed", "5"], capsys)
    assert rc == 0, err
    line = next(ln for ln in out.splitlines() if "spot-check" in ln)
    assert "--spot-seed 5" in line and "(2 of 30 segments in 3 MLPs)" in line and "probability 0.0667" in line, line
    rc, out, err = run(["dataset", "bake", "--n-mlps", "1", "--n-samples", "100", "--width", "2", "--depth", "1",
                        "--audit-segments", "-1", "--output", str(honest.parent / "x")], capsys)
    assert rc == 2 and "--audit-segments" in err


@pytest.fixture
def serial(monkeypatch):
    """One worker: the segments run one after another, so a stop after the n-th lands between two segments
    (with a worker per core, a segment already started on another core may finish too)."""
    from whestbench.work import executor

    monkeypatch.setattr(executor, "bake_workers", lambda workers, n_units=None: 1)


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


def test_stopped_spot_check_resumes_from_its_record(honest, tmp_path, serial):
    from whestbench.errors import BakeInterrupted

    root = tmp_path / "cache"
    stop, on_event, _ = _stop_after(2)
    with pytest.raises(BakeInterrupted, match=r"stopped: 2 of 4 segments done; the 2 found matching are recorded in "
                                              r".*: re-run the same command to check the rest .*--spot-check 4 "
                                              r"--spot-seed 3\)") as exc:
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


def test_spot_check_record_that_does_not_match_is_ignored_and_no_cache_keeps_none(honest, tmp_path, serial):
    import json

    from whestbench.errors import BakeInterrupted

    root = tmp_path / "cache"
    stop, on_event, _ = _stop_after(1)
    with pytest.raises(BakeInterrupted):
        verify_dataset(honest, spot_check=3, spot_seed=0, stop=stop, on_event=on_event, recompute_root=root)
    (record,) = root.glob("spot-*.json")
    got = json.loads(record.read_text())
    assert len(got["matched"]) == 1 and got["key"]["metadata_sha256"]
    # a record made for other contents (another dataset's digest) vouches for nothing here
    got["key"]["metadata_sha256"] = "0" * 64
    record.write_text(json.dumps(got))
    check = verify_dataset(honest, spot_check=3, spot_seed=0, recompute_root=root).get("spot-check")
    assert check.ok and "resumed" not in check.detail
    # --no-cache: a stop leaves no record, and a re-run reads none
    stop, on_event, _ = _stop_after(1)
    with pytest.raises(BakeInterrupted, match="1 of 3 segments done; re-run the same command to check the rest"):
        verify_dataset(honest, spot_check=3, spot_seed=0, stop=stop, on_event=on_event, recompute_root=root / "x",
                       cache=False)
    assert not (root / "x").exists()
    with pytest.raises(UsageError, match="--no-cache applies to --recompute and --spot-check only"):
        verify_dataset(honest, cache=False)


def test_cli_spot_check_resumes_and_takes_no_cache(honest, tmp_path, capsys, serial):
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


def _line(out: str, name: str = "spot-check") -> str:
    return next(ln for ln in out.splitlines() if ln[2:].startswith(name + ":"))


def test_without_a_seed_each_run_draws_a_fresh_one_and_prints_it(honest, capsys):
    """The default was --spot-seed 0: every run checked the same segments, so one forged segment the
    default never picked passed every default spot check. Now each run draws a fresh seed and prints it;
    that seed reproduces the draw."""
    import re

    seen = {}
    for _ in range(2):
        rc, out, err = run(["dataset", "verify", str(honest), "--spot-check", "3", "--no-cache"], capsys)
        assert rc == 0, err
        line = _line(out)
        seed = int(re.search(r"--spot-seed (\d+)", line).group(1))
        seen[seed] = re.search(r"mlp_id/segment ([^)]*)\)", line).group(1)
    assert len(seen) == 2  # two fresh seeds (equal with probability 2**-32)
    seed, names = next(iter(seen.items()))
    rc, out, _ = run(["dataset", "verify", str(honest), "--spot-check", "3", "--spot-seed", str(seed), "--no-cache"],
                     capsys)
    assert rc == 0 and f"(mlp_id/segment {names})" in _line(out)


def test_a_per_mlp_budget_draws_k_of_every_mlp_and_states_its_own_chances(honest):
    import re

    from whestbench.verify.spot_draw import SpotBudget, detection

    check = verify_dataset(honest, spot_check="2/mlp", spot_seed=11, cache=False).get("spot-check")
    assert check.ok, check.detail
    names = re.search(r"mlp_id/segment ([^)]*)\)", check.detail).group(1).split(", ")
    assert sorted(n.split("/")[0] for n in names) == ["0", "0", "1", "1", "2", "2"]
    det = detection([10, 10, 10], SpotBudget(2, per_mlp=True))
    assert det.every == pytest.approx(1 - 0.8**3) and det.one == pytest.approx(0.2)
    assert (f"(--spot-check 2/mlp: 2 of every MLP) drawn at random with --spot-seed 11" in check.detail
            and f"this draw (6 of 30 segments in 3 MLPs) catches one bad segment in every MLP with probability "
                f"{det.every:.3g}, and 1 forged segment in one MLP of 3 with probability {det.one:.3g}" in check.detail)


def test_one_forged_segment_the_old_default_never_drew_is_caught_at_the_stated_rate(tmp_path, monkeypatch):
    """A fault in one segment of one MLP (as issue 34's forger placed it, where --spot-seed 0 never looked):
    over the draws of --spot-check 6 under 40 seeds, the catch count is what the printed probability says
    (6/30 per draw: 8 expected; outside 1..20 with probability below 2e-4 for an honest draw function)."""
    target = weights_for_seed(SEEDS[2], SHAPE["width"], SHAPE["depth"])
    scaled_weights(monkeypatch, target, 1.001, lambda stream: stream.position == 8 * chunk_rows(8))
    ds = bake(BakeConfig(n_mlps=3, mlp_seeds=tuple(SEEDS), output=tmp_path / "ds", max_threads=1, **SHAPE))
    monkeypatch.undo()
    caught, stated = 0, set()
    for seed in range(40):
        check = verify_dataset(ds, spot_check=6, spot_seed=seed, pilot=False, cache=False).get("spot-check")
        caught += not check.ok
        if check.ok:
            stated.add(check.detail.rsplit("probability ", 1)[1])
        else:
            assert "mlp_id 2 segment 8:" in check.detail
    assert stated <= {"0.2"} and 1 <= caught <= 20, (caught, stated)


@pytest.mark.parametrize("sig, code", [("SIGTERM", 75), ("SIGINT", 130)])
def test_a_stop_signal_during_the_spot_check_saves_its_record_and_exits_75(honest, tmp_path, capsys, monkeypatch,
                                                                          serial, sig, code):
    """SIGTERM during a spot check exited 143 (the stop handler was never told the check had started) and kept
    nothing. Now: a real signal, sent from inside the first segment; the record holds what matched, the
    message names the seed that resumes it, and the re-run with that seed skips those segments."""
    import json
    import os
    import signal

    from whestbench.verify import spot

    orig, calls = spot._one, []

    def one(*args, **kwargs):
        calls.append(1)
        got = orig(*args, **kwargs)
        if len(calls) == 2:
            os.kill(os.getpid(), getattr(signal, sig))
            # the handler runs on the main thread, which wakes every 0.2 s: hold this segment's thread until
            # it has run, so that under any load the stop lands between segments 2 and 3
            assert (args[10] if len(args) > 10 else kwargs["stop"]).wait(60)
        return got

    monkeypatch.setattr(spot, "_one", one)
    root = tmp_path / "cache"
    rc, out, err = run(["dataset", "verify", str(honest), "--spot-check", "8", "--spot-seed", "21",
                        "--recompute-dir", str(root)], capsys)
    assert rc == code, err
    assert "spot-check stopped: 2 of 8 segments done; the 2 found matching are recorded in" in err
    assert "re-run the same command to check the rest" in err and "--spot-check 8 --spot-seed 21)" in err
    assert "Traceback" not in err
    (record,) = root.glob("spot-*.json")
    assert len(json.loads(record.read_text())["matched"]) == 2
    monkeypatch.setattr(spot, "_one", orig)
    rc, out, err = run(["dataset", "verify", str(honest), "--spot-check", "8", "--spot-seed", "21",
                        "--recompute-dir", str(root)], capsys)
    assert rc == 0 and "all match (resumed: 2 of 8 segments already checked)" in _line(out), out + err


def test_progress_advances_within_a_segment(tmp_path):
    """The live line stayed at "0/229,376 samples" until the check ended: the samples of one long segment
    are now reported as they are drawn (one event per sampler step)."""
    ds = bake(BakeConfig(n_mlps=1, mlp_seeds=(5,), output=tmp_path / "ds", n_samples=40 * chunk_rows(8), width=8,
                         depth=2, audit_segments=4))
    events = []
    verify_dataset(ds, spot_check=1, spot_seed=2, cache=False, pilot=False, on_event=events.append)
    done = [e.progress.done for e in events if e.progress is not None and e.progress.phase == "spot check"]
    assert done[0] == 0 and done[-1] == 10 * chunk_rows(8) and len(set(done)) == 11, done


def test_recompute_draws_a_fresh_seed_prints_it_and_a_stop_names_it(tmp_path, capsys, monkeypatch):
    import re

    from whestbench.errors import BakeInterrupted
    from whestbench.verify import recompute as recompute_mod

    ds = create_dataset(n_mlps=6, n_samples=2000, width=4, depth=2, seed=1, output_path=tmp_path / "ds")
    ids = set()
    for _ in range(4):
        rc, out, err = run(["dataset", "verify", str(ds), "--recompute", "1", "--recompute-dir", str(tmp_path / "c")],
                           capsys)
        assert rc == 0, err
        m = re.search(r"recompute: 1 MLP\(s\) drawn at random with --recompute-seed (\d+): mlp_id (\d+) \(one faulty "
                      r"MLP of 6 is among them with probability 0.167\)", out)
        assert m, out
        ids.add(m.group(2))
        rc, again, _ = run(["dataset", "verify", str(ds), "--recompute", "1", "--recompute-seed", m.group(1),
                            "--recompute-dir", str(tmp_path / "c")], capsys)
        assert rc == 0 and f"mlp_id {m.group(2)} (" in again
    assert len(ids) > 1  # four fresh draws of 1 of 6 all alike: (1/6)**3

    def stopped(*args, **kwargs):
        raise BakeInterrupted("stopped: 0 of 1 MLPs complete; re-run the same command to resume.")

    monkeypatch.setattr(recompute_mod, "recompute", stopped)
    rc, out, err = run(["dataset", "verify", str(ds), "--recompute", "2", "--recompute-seed", "9",
                        "--recompute-dir", str(tmp_path / "c")], capsys)
    assert rc == 75 and "re-run the same command to resume (it continues the same draw; elsewhere, or with " \
        "--no-cache: --recompute 2 --recompute-seed 9)" in err, err


def test_the_same_command_continues_a_stopped_draw_and_then_draws_afresh(honest, tmp_path, monkeypatch, serial):
    """A stopped spot check without --spot-seed drew a fresh seed: the same command, re-run, continues that
    draw (its record applies) instead of starting another; once it completes, the next run draws afresh."""
    import re

    from whestbench.errors import BakeInterrupted

    root = tmp_path / "cache"
    stop, on_event, _ = _stop_after(1)
    with pytest.raises(BakeInterrupted) as exc:
        verify_dataset(honest, spot_check=5, stop=stop, on_event=on_event, recompute_root=root)
    seed = re.search(r"--spot-seed (\d+)\)", str(exc.value)).group(1)
    check = verify_dataset(honest, spot_check=5, recompute_root=root).get("spot-check")
    assert check.ok and f"--spot-seed {seed} " in check.detail and "resumed: 1 of 5" in check.detail, check.detail
    assert not list(root.iterdir())  # record and pending draw removed
    seeds = {re.search(r"--spot-seed (\d+)", verify_dataset(honest, spot_check=5, recompute_root=root)
                       .get("spot-check").detail).group(1) for _ in range(2)}
    assert seed not in seeds and len(seeds) == 2


def test_a_stopped_recompute_continues_its_draw(tmp_path, monkeypatch):
    """The recompute's cached bake is keyed by the MLPs drawn: a re-run that drew others would start over.
    The same command continues the stopped run's draw."""
    import re

    from whestbench.errors import BakeInterrupted
    from whestbench.verify import recompute as recompute_mod

    ds = create_dataset(n_mlps=8, n_samples=2000, width=4, depth=2, seed=1, output_path=tmp_path / "ds")
    orig, seen = recompute_mod.recompute, []

    def stopped(md, seeds, **kwargs):
        seen.append(seeds)
        raise BakeInterrupted("stopped: 0 of 2 MLPs complete; re-run the same command to resume.")

    monkeypatch.setattr(recompute_mod, "recompute", stopped)
    with pytest.raises(BakeInterrupted):
        verify_dataset(ds, recompute=2, recompute_root=tmp_path / "c")
    monkeypatch.setattr(recompute_mod, "recompute", orig)
    report = verify_dataset(ds, recompute=2, recompute_root=tmp_path / "c")
    assert report.ok and "continues the draw of the run stopped earlier" in report.get("recompute: draw").detail
    line = report.get("recompute").detail
    first = re.search(r"--recompute-seed (\d+)", line).group(1)
    assert not list((tmp_path / "c").glob("pending-*"))
    again = verify_dataset(ds, recompute=2, recompute_root=tmp_path / "c").get("recompute").detail
    assert re.search(r"--recompute-seed (\d+)", again).group(1) != first  # complete: the next run draws afresh
