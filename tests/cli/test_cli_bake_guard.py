"""What `whest dataset bake` refuses before any work, and what it tells an operator while it works.

Refusals: sizes that cannot fit (the format's limits, this machine's memory and disk), outputs that
could never be renamed into place, hostile seeds files, bad timing flags, a second bake on the same
work directory, damaged work files. Each exits 2 with one line, no traceback, nothing written.
Reporting: the plan's figures first, then plain progress lines in a log file (no terminal codes).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from whestbench.work.workdir import work_dir_for

from helpers.cli import run
from helpers.procs import clean_env, finish, start_bake, thaw, units_dir, wait_for_units


TINY = ["--n-mlps", "3", "--n-samples", "200", "--width", "4", "--depth", "2", "--quiet"]


def refused(rc: int, out: str, err: str, match: str, output: Path | None = None) -> None:
    assert rc == 2, f"exit code {rc}; stderr: {err!r}"
    lines = [line for line in err.strip().splitlines() if line]
    assert len(lines) == 1, f"stderr is not one line: {err!r}"
    assert re.search(match, lines[0]), f"{match!r} not in {lines[0]!r}"
    assert "Traceback" not in out + err and "Baking" not in out
    if output is not None:
        assert not os.path.lexists(output) or output.is_symlink(), f"{output} was created by a refused bake"
        assert not work_dir_for(output).exists()


# --- sizes --------------------------------------------------------------------------------------


@pytest.mark.parametrize("flag, value, match", [
    ("--n-mlps", "1e12", r"int32 mlp_id.*did you mean --n-samples"),
    ("--n-mlps", "1e400", r"^error: --n-mlps 1\.00e400 is more than 2,147,483,647, the most the int32 mlp_id"),
    ("--n-samples", "1e400", r"below 2\*\*63 \(counts are int64\); got 1\.00e400\. Pass a smaller --n-samples \(1e9 is the benchmark's "
     r"largest\)\.$"),
    ("--n-samples", "9223372036854775808", r"below 2\*\*63"),
])
def test_sizes_beyond_the_formats_limits_are_refused_at_once(tmp_path, capsys, count_work, flag, value, match):
    argv = ["dataset", "bake", "--n-mlps", "2", "--n-samples", "100", "--width", "4", "--depth", "1", "--seed", "1"]
    argv[argv.index(flag) + 1] = value
    rc, out, err = run(argv + ["--output", str(tmp_path / "o")], capsys)
    refused(rc, out, err, match, tmp_path / "o")
    assert count_work == {"units": 0, "seeds": 0}  # at once: no seed derived, no sample drawn


# 2 MLPs at 64x4 are ~6.5e4 FLOP per sample: 1e17 samples each is ~1.3e22 FLOP, four centuries at a
# TFLOP/s, so no CPU's timing probe brings it under the ten-year guard (1e15 was ~190 years here and
# would not have stayed a typo on a machine 20x faster)
@pytest.mark.parametrize("n_samples", ["1e18", "1e17"])
def test_a_bake_projected_to_take_more_than_ten_years_is_refused_as_a_typo(tmp_path, capsys, count_work, n_samples):
    rc, out, err = run(["dataset", "bake", "--n-mlps", "2", "--n-samples", n_samples, "--width", "64", "--depth", "4",
                        "--seed", "3", "--output", str(tmp_path / "o")], capsys)
    refused(rc, out, err, r"would take about [\d,]+ years here .* surely a typo; check --n-samples", tmp_path / "o")
    # the timing probe's few steps of one unit per worker of the bake (2 MLPs: 2 workers at most), and not the bake
    assert count_work["units"] == min(2, os.cpu_count() or 1)


def test_a_target_bake_is_judged_by_the_samples_it_plans_not_by_the_cap(tmp_path, capsys):
    """--n-samples is a target bake's cap: 1e15 with --target-stderr 1e-2 plans 16,384 samples per MLP
    and bakes (it was refused as "about 200 years here"); a target its pilots plan beyond ten years is
    refused by the planned count, after the pilots, leaving nothing behind."""
    import json

    shape = ["--n-mlps", "2", "--width", "16", "--depth", "2", "--seed", "3", "--n-samples", "1e15", "--quiet"]
    rc, out, err = run(["dataset", "bake", *shape, "--target-stderr", "1e-2", "--output", str(tmp_path / "o")], capsys)
    assert rc == 0, err
    md = json.loads((tmp_path / "o" / "metadata.json").read_text())
    assert md["samples_used"]["max"] < 10**6
    # a cap and a target far enough out that no machine's timing probe brings the planned work under ten
    # years (2 MLPs x 1e18 samples at 16x2 is ~2e21 FLOP: centuries at 100 GFLOP/s); with a cap of 1e15
    # a fast idle machine planned ~6 years, passed the guard and began baking 2e15 samples
    far = [a if a != "1e15" else "1e18" for a in shape]
    rc, out, err = run(["dataset", "bake", *far, "--target-stderr", "1e-12", "--output", str(tmp_path / "p")], capsys)
    assert rc == 2 and "Traceback" not in err, err
    assert re.search(r"would take about [\d,]+ years here .*planned samples\): .*surely a typo", err), err
    assert not os.path.lexists(tmp_path / "p") and not work_dir_for(tmp_path / "p").exists()


def test_max_threads_beyond_the_mlps_does_not_inflate_the_memory_estimate(tmp_path, capsys):
    rc, out, err = run(["dataset", "bake", "--n-mlps", "2", "--n-samples", "1000", "--width", "64", "--depth", "4",
                        "--seed", "1", "--max-threads", "10000", "--quiet", "--output", str(tmp_path / "o")], capsys)
    assert rc == 0, err
    ram = re.search(r"peak RAM ≈ ([\d.]+) (MiB|GiB)", out)
    assert ram and ram.group(2) == "MiB", out  # two workers' buffers, not 10000


def test_a_row_larger_than_a_shard_is_refused(tmp_path, capsys):
    rc, out, err = run(["dataset", "bake", "--n-mlps", "1", "--n-samples", "10", "--width", "32768", "--depth", "1",
                        "--seed", "1", "--output", str(tmp_path / "o")], capsys)
    refused(rc, out, err, r"weights per MLP; one dataset row holds at most", tmp_path / "o")


def test_more_mlps_than_the_memory_can_name_is_refused_without_growing(tmp_path, capsys, monkeypatch, count_work):
    # 10**9 MLPs fit the int32 column but not a 24 GiB machine's memory (seeds and names of all): refused
    # before the seeds are derived (deriving 10**9 of them would take minutes and all of that memory).
    # The machine is said to have 24 GiB, so the verdict holds on a CI runner with more.
    from whestbench.bake import cost

    monkeypatch.setattr(cost, "machine_memory", lambda: (24 * 1024**3, 20 * 1024**3))
    rc, out, err = run(["dataset", "bake", "--n-mlps", "1e9", "--n-samples", "1000", "--width", "4", "--depth", "1",
                        "--seed", "1", "--output", str(tmp_path / "o")], capsys)
    refused(rc, out, err, r"needs about .* of memory .* but the machine has 24\.0 GiB", tmp_path / "o")
    assert count_work == {"units": 0, "seeds": 0}


def test_more_disk_than_is_free_is_refused(tmp_path, capsys, monkeypatch):
    import shutil

    from whestbench.bake import cost

    real = shutil.disk_usage
    monkeypatch.setattr(cost.shutil, "disk_usage", lambda p: real(p)._replace(free=1000))
    rc, out, err = run(["dataset", "bake", *TINY, "--seed", "1", "--output", str(tmp_path / "o")], capsys)
    refused(rc, out, err, r"writes about .* but .* has 1000 B free", tmp_path / "o")


def test_the_plan_is_printed_before_any_work(tmp_path, capsys):
    rc, out, err = run(["dataset", "bake", *TINY, "--seed", "1", "--output", str(tmp_path / "o")], capsys)
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("Baking 3 MLPs") and lines[1].startswith("Plan: ")
    assert all(k in lines[1] for k in ("FLOP", "output ≈", "work files ≈", "peak RAM ≈"))


# --- outputs that could never be renamed into place ----------------------------------------------


def _outputs(tmp_path: Path) -> dict[str, str]:
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    return {
        "dangling-symlink": str(dangling),
        "dot": ".",
        "dot-slash": "./",
        "root": "/",
        "empty": "",
        "non-utf8": os.fsdecode(bytes(tmp_path / "bad") + b"\xff"),
        "under-a-file": str(tmp_path / "afile" / "ds"),
    }


@pytest.mark.parametrize("case", ["dangling-symlink", "dot", "dot-slash", "root", "empty", "non-utf8", "under-a-file"])
def test_an_output_that_cannot_be_created_is_refused_before_any_work(tmp_path, capsys, monkeypatch, count_work, case):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x")
    output = _outputs(tmp_path)[case]
    # a bake that would take hours: the refusal must come first
    rc, out, err = run(["dataset", "bake", "--n-mlps", "4", "--n-samples", "1e10", "--width", "256", "--depth", "8",
                        "--seed", "1", "--output", output], capsys)
    refused(rc, out, err, r"--output")
    assert count_work == {"units": 0, "seeds": 0}  # no timing probe, no seed derived
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "dangling"]


# --- hostile seeds files -------------------------------------------------------------------------


@pytest.mark.parametrize("text, match", [
    ("[" * 100_000 + "]" * 100_000, r"nested too deeply"),
    ("[" + "9" * 5000 + "]", r"not a usable seed"),
    ("[1, 2, 1e400]", r"must be an int"),
    ("[1, 2, 99999999999999999999999]", r"out of range"),
    ('{"seeds": [1, 2, 3]}', r"must contain a JSON array"),
    ("[1, 2, 2]", r"duplicate"),
    ("\xff\xfe", r"not valid JSON"),
])
def test_a_hostile_seeds_file_is_a_usage_error(tmp_path, capsys, text, match):
    seeds = tmp_path / "seeds.json"
    seeds.write_bytes(text.encode("utf-8", "surrogateescape") if "\xff" not in text else b"\xff\xfe")
    rc, out, err = run(["dataset", "bake", *TINY, "--mlp-seeds", str(seeds), "--output", str(tmp_path / "o")], capsys)
    refused(rc, out, err, match, tmp_path / "o")


# --- timing flags and calibrate's flags ----------------------------------------------------------


@pytest.mark.parametrize("flag", ["--peer-timeout", "--checkpoint-every", "--log-every"])
@pytest.mark.parametrize("value", ["nan", "-5", "0", "inf", "soon"])
def test_timing_flags_must_be_positive_finite_seconds(tmp_path, capsys, flag, value):
    rc, out, err = run(["dataset", "bake", *TINY, "--seed", "1", flag, value, "--output", str(tmp_path / "o")], capsys)
    refused(rc, out, err, re.escape(flag), tmp_path / "o")


CAL = {"--n-mlps": "2", "--n-samples": "1000", "--width": "4", "--depth": "1"}


@pytest.mark.parametrize("change, match", [
    ({"--calib-mlps": "-1"}, r"--calib-mlps"),
    ({"--calib-samples": "0"}, r"--calib-samples must be a positive integer"),
    ({"--max-threads": "0"}, r"--max-threads must be a positive integer"),
    ({"--width": "0"}, r"--width must be a positive integer"),
    ({"--n-samples": "1e400"}, r"below 2\*\*63"),
    ({"--device": "cpu", "--max-threads": "2"}, r"--max-threads applies to the CPU path only"),
])
def test_calibrate_validates_its_flags_as_bake_does(capsys, change, match):
    flags = {**CAL, **change}
    rc, out, err = run(["dataset", "calibrate", *[x for kv in flags.items() for x in kv]], capsys)
    refused(rc, out, err, match)


def test_calibrate_times_a_short_bake_and_projects_the_planned_one(capsys):
    rc, out, err = run(["dataset", "calibrate", "--n-mlps", "100", "--n-samples", "1e9", "--width", "16", "--depth", "2",
                        "--calib-mlps", "2", "--calib-samples", "200000"], capsys)
    assert rc == 0, err
    assert "Calibrating on cpu: 2 MLPs × 200,000 samples" in out
    m = re.search(r"effective\s*│\s*([\d.]+) GFLOP/s", out)
    assert m and float(m.group(1)) > 0
    hours = re.search(r"projected wall time\s*│\s*([\d.]+) (s|min|h|days)", out)
    assert hours, out
    # 100 MLPs x 1e9 samples is 250,000 times the timed run: the projection says so
    secs = float(re.search(r"in ([\d.]+) s", out).group(1))
    value, unit = float(hours.group(1)), hours.group(2)
    projected = value * {"s": 1, "min": 60, "h": 3600, "days": 86400}[unit]
    assert 0.5 * 250_000 * secs < projected < 2 * 250_000 * secs


def test_calibrate_of_one_mlp_says_1_mlp(capsys):
    """A one-MLP calibration printed "1 MLPs × 131,072 samples" and "on 1 calibration MLPs" (issue 35's
    fresh-clone run)."""
    rc, out, err = run(["dataset", "calibrate", "--n-mlps", "1", "--n-samples", "1e6", "--width", "8", "--depth", "2",
                        "--target-stderr", "0.05", "--calib-samples", "20000"], capsys)
    assert rc == 0, err
    assert "Calibrating on cpu: 1 MLP × 20,000 samples" in out
    flat = " ".join(re.sub(r"[│┃]", " ", out).split())  # the table wraps its cells over rows
    assert "1 MLP × 20,000 samples in" in flat and "1 MLP × 1,000,000 samples" in flat
    assert "on 1 calibration MLP;" in flat
    assert "1 MLPs" not in flat and "calibration MLPs" not in flat


def test_calibrate_projects_where_a_control_variate_target_bake_would_stop(capsys, tmp_path):
    """Not the bare 1/sqrt(N) estimate: the bake judges a target only at check points and, with
    control variates, not before 32 batches; what calibrate says is what the bake then does."""
    shape = ["--n-mlps", "2", "--n-samples", "2e6", "--width", "32", "--depth", "3"]
    target = ["--estimator", "control-variate", "--target-stderr", "5e-3"]
    rc, out, err = run(["dataset", "calibrate", *shape, *target], capsys)
    assert rc == 0, err
    stop = re.search(r"pilot-planned samples per MLP\s*│\s*([\d,]+)", out)  # the bake's own rule
    assert re.search(r"1/√N: stop each MLP at\s*│\s*([\d,]+) samples", out)
    assert stop, out
    rc, _, err = run(["dataset", "bake", *shape, *target, "--seed", "1", "--quiet", "--output", str(tmp_path / "b")], capsys)
    assert rc == 0, err
    import pyarrow.parquet as pq

    used = pq.read_table(tmp_path / "b" / "data").column("n_samples_used").to_pylist()
    assert used == [int(stop.group(1).replace(",", ""))] * 2


def test_calibrate_with_too_few_samples_for_a_standard_error_says_how_many_it_needs(capsys):
    rc, out, err = run(["dataset", "calibrate", "--n-mlps", "2", "--n-samples", "2e6", "--width", "32", "--depth", "3",
                        "--calib-samples", "1000", "--estimator", "control-variate", "--target-stderr", "1e-3"], capsys)
    assert rc == 0, err
    assert "--calib-samples" in out and "32,768" in out  # (the table wraps the advice)
    assert "nan" not in out.lower() and "All-NaN" not in err


@pytest.mark.parametrize("verb", ["bake", "calibrate"])
def test_torch_knobs_alone_keep_the_cpu_path_with_a_note_in_bake_and_calibrate(verb, capsys, tmp_path):
    """One rule (``cli.common.torch_knobs``): --torch or --device choose the torch backend;
    --mlps-per-batch and --chunk-size only tune it, so without them they are ignored, with a note."""
    where = ["--quiet", "--seed", "1", "--output", str(tmp_path / "ds")] if verb == "bake" else ["--calib-samples", "100"]
    rc, out, err = run(["dataset", verb, *TINY[:-1], "--mlps-per-batch", "2", "--chunk-size", "4096", *where], capsys)
    assert rc == 0, err
    assert "note: --mlps-per-batch and --chunk-size ignored: the CPU path's chunking is fixed" in err
    assert re.search(r"^(Baking 3 MLPs \(width=4, depth=2, n_samples=200\)|Calibrating) on cpu", out, re.M), out

# --- the work directory: one bake at a time, damaged files never trusted --------------------------

SHAPE = ["--n-mlps", "6", "--n-samples", "150000", "--width", "32", "--depth", "3", "--seed", "5", "--max-threads", "1",
         "--quiet"]


def test_a_second_bake_on_the_same_output_is_refused_naming_the_first(tmp_path):
    output = tmp_path / "ds"
    first = start_bake(SHAPE, output)
    try:
        # the first bake stays frozen, holding its lock, while the second starts: on a fast machine it
        # would otherwise finish before the second's interpreter has started
        wait_for_units(first, output, 1, freeze=True)
        second = start_bake(SHAPE, output)
        code, err = finish(second)
        assert code == 2, err
        assert f"pid {first.pid}" in err and "wait for it to finish" in err and "remove" in err
        assert first.poll() is None  # the first bake was not disturbed
    finally:
        thaw(first)
        code, err = finish(first)
    assert code == 0, err


def test_swapped_unit_files_are_recomputed_with_a_line_each(tmp_path, capsys, read_columns, assert_bytes_equal):
    import signal

    output = tmp_path / "ds"
    proc = start_bake(SHAPE, output)  # a process, to be stopped by a signal; the re-run and the reference in-process
    wait_for_units(proc, output, 2, freeze=True)
    thaw(proc, signal.SIGTERM)
    assert finish(proc)[0] == 75
    a, b = sorted(units_dir(output).glob("*.unit"))[:2]
    tmp = a.with_suffix(".swap")
    a.rename(tmp), b.rename(a), tmp.rename(b)
    code, _, err = run(["dataset", "bake", *SHAPE, "--output", str(output)], capsys)
    assert code == 0, err
    assert len(re.findall(r"work file .* failed its check \(holds unit .*\); recomputing that unit", err)) == 2, err
    want = tmp_path / "want"
    assert run(["dataset", "bake", *SHAPE, "--output", str(want)], capsys)[0] == 0
    got, exp = read_columns(output), read_columns(want)
    for col in ("mlp_seed", "all_layer_means", "final_means", "avg_variance"):
        assert_bytes_equal(got[col], exp[col], col)


def test_an_edited_seeds_file_in_the_work_directory_is_refused_naming_it(tmp_path, capsys):
    import signal

    output = tmp_path / "ds"
    random_seeds = [a for a in SHAPE if a not in ("--seed", "5")]
    proc = start_bake(random_seeds, output)
    wait_for_units(proc, output, 1, freeze=True)
    thaw(proc, signal.SIGTERM)
    assert finish(proc)[0] == 75
    path = work_dir_for(output) / "auto-seeds.json"
    data = json.loads(path.read_text())
    data["seeds"] = [5] * len(data["seeds"])
    path.write_text(json.dumps(data))
    code, _, err = run(["dataset", "bake", *random_seeds, "--output", str(output)], capsys)
    assert code == 2, err
    assert str(path) in err and "remove" in err
    assert not output.exists()


# --- progress in a log file ---------------------------------------------------------------------


def test_progress_goes_to_a_log_file_as_plain_lines(tmp_path):
    log = tmp_path / "bake.log"
    cmd = [sys.executable, "-m", "whestbench", "dataset", "bake", "--n-mlps", "3", "--n-samples", "1000000", "--width", "32",
           "--depth", "3", "--seed", "1", "--max-threads", "1", "--log-every", "0.1", "--output", str(tmp_path / "o")]
    with open(log, "w") as f:
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=f, env=clean_env(), timeout=300)
    assert done.returncode == 0
    text = log.read_text()
    assert "\x1b" not in text and "\r" not in text  # no terminal codes in a log
    lines = [line for line in text.splitlines() if " samples (" in line and "ETA ?" not in line]
    assert len(lines) >= 3, text
    line = lines[len(lines) // 2]
    assert re.match(r"\[\d\d:\d\d:\d\d\] bake: \d+/3 MLPs, [\d,]+/3,000,000 samples \([\d.]+%\), [\d.]+ \w? ?samples/s, "
                    r"[\d.]+ GFLOP/s, ETA \d+:\d\d:\d\d, \d+ checkpoints?$", line), line


def test_the_integer_gpu_kernel_without_the_torch_backend_is_refused(tmp_path, capsys):
    rc, out, err = run(["dataset", "bake", *TINY, "--seed", "1", "--gpu-kernel", "ozaki", "--output", str(tmp_path / "o")],
                       capsys)
    refused(rc, out, err, r"--gpu-kernel ozaki runs on the torch backend: add --torch --device cuda\.", tmp_path / "o")


def test_the_integer_gpu_kernel_with_control_variates_is_refused(tmp_path, capsys):
    rc, out, err = run(["dataset", "bake", *TINY, "--seed", "1", "--torch", "--device", "cpu", "--estimator",
                        "control-variate", "--gpu-kernel", "ozaki", "--output", str(tmp_path / "o")], capsys)
    refused(rc, out, err, r"the ozaki GPU kernel does not compute the control variates yet: use --gpu-kernel torch",
            tmp_path / "o")


def test_the_withdrawn_fused_gpu_kernel_is_refused_naming_its_replacement(tmp_path, capsys):
    # Its split-precision arithmetic fails the gate under the tensor cores' accumulator (test_precision.py).
    for extra in ([], ["--torch", "--device", "cpu"]):
        rc, out, err = run(["dataset", "bake", *TINY, "--seed", "1", *extra, "--gpu-kernel", "fused",
                            "--output", str(tmp_path / "o")], capsys)
        refused(rc, out, err, r"--gpu-kernel fused is withdrawn: .*precision gate.*; use --gpu-kernel ozaki\.",
                tmp_path / "o")


@pytest.mark.parametrize("exc", [OSError(28, "No space left on device"),
                                 OSError("Error writing bytes to file. Detail: [errno 28] No space left on device")])
def test_a_full_disk_is_one_line_naming_the_output_and_the_fix(tmp_path, capsys, monkeypatch, exc):
    import whestbench.bake.pipeline as bake_mod

    def full(*a, **k):
        raise exc

    monkeypatch.setattr(bake_mod, "bake", full)
    output = tmp_path / "o"
    rc, out, err = run(["dataset", "bake", "--n-mlps", "2", "--n-samples", "100", "--width", "4", "--depth", "1",
                        "--seed", "1", "--quiet", "--output", str(output)], capsys)
    assert rc == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: no space left on the device under --output {output}: free space")
    assert "re-run resumes from the units and checkpoints already saved" in lines[0]
