"""`whest dataset inspect` (alias `info`) and `whest dataset verify`: output, exit codes, --plot, --against."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from whestbench.bake.pipeline import create_dataset

from helpers.cli import run
from helpers.datasets import TINY_PUBLIC, tampered_copy
from helpers.hub_fake import FakeHub, clock, no_network  # noqa: F401  (autouse: no network, instant retries)


@pytest.fixture
def baked(tiny) -> Path:
    return tiny["public"]


def test_inspect_prints_the_reference_lines_then_ours(golden_dir, capsys):
    rc, out, err = run(["dataset", "inspect", str(golden_dir / "full-w64-d4")], capsys)
    assert rc == 0 and err == ""
    ref = (golden_dir / "full-w64-d4.info.txt").read_text().splitlines()
    assert out.splitlines()[: len(ref)] == ref
    assert "  integrity: checksums absent" in out


def test_info_is_an_alias_of_inspect(golden_dir, capsys):
    target = str(golden_dir / "combined-w64-d4")
    assert run(["dataset", "info", target], capsys)[:2] == run(["dataset", "inspect", target], capsys)[:2]


def test_inspect_of_a_tampered_dataset_reports_and_exits_0(baked, tmp_path, capsys):
    rc, out, _ = run(["dataset", "inspect", str(tampered_copy(baked, tmp_path / "t")[0])], capsys)
    assert rc == 0 and "integrity: checksums MISMATCH" in out


def test_inspect_plot_writes_a_png(baked, tmp_path, capsys):
    png = tmp_path / "means.png"
    rc, out, _ = run(["dataset", "inspect", str(baked), "--plot", str(png)], capsys)
    assert rc == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.splitlines()[-1] == f"  plot: {png}"


def test_inspect_of_a_missing_path_exits_2(tmp_path, capsys):
    rc, _, err = run(["dataset", "inspect", str(tmp_path / "nope")], capsys)
    assert rc == 2 and err.startswith("error: ") and len(err.strip().splitlines()) == 1


def test_verify_prints_a_line_per_check_and_exits_0(baked, capsys):
    rc, out, err = run(["dataset", "verify", str(baked)], capsys)
    # stderr holds only the progress of the pilot checks (stdout stays the checks, for a pipe)
    assert rc == 0 and all(re.fullmatch(r"\[\d\d:\d\d:\d\d\] verify: .*", line) for line in err.splitlines()), err
    lines = out.splitlines()
    assert lines[0].startswith("✓ metadata: ")
    assert any(line.startswith("✓ weights: ") for line in lines)
    assert lines[-1].startswith("OK: all ")


def test_verify_of_a_tampered_dataset_exits_1(baked, tmp_path, capsys):
    rc, out, err = run(["dataset", "verify", str(tampered_copy(baked, tmp_path / "t")[0])], capsys)
    assert rc == 1
    assert any(line.startswith("✗ checksums: MISMATCH") for line in out.splitlines())
    last = err.splitlines()[-1]
    assert last.startswith("error: verify: ") and "checksums" in last and "Traceback" not in err


def test_verify_against_an_identical_bake_exits_0(baked, tmp_path, capsys):
    again = create_dataset(**TINY_PUBLIC, output_path=tmp_path / "again")
    rc, out, _ = run(["dataset", "verify", str(baked), "--against", str(again), "--n-check", "1"], capsys)
    assert rc == 0
    assert "✓ against: ground truth: bit-identical" in out


def test_verify_of_a_golden_dataset_marks_absent_checksums_as_skipped(golden_dir, capsys):
    rc, out, _ = run(["dataset", "verify", str(golden_dir / "full-w64-d4")], capsys)
    assert rc == 0
    assert any(line.startswith("– checksums: ") for line in out.splitlines())
    assert any(line.startswith("– stderr: no all_layer_stderr column") for line in out.splitlines())
    assert "3 skipped" in out.splitlines()[-1]  # checksums, stderr and the trail contract: 0.16.2 keeps no trail
    assert any(line.startswith("– trail contract: no audit trail") for line in out.splitlines())
    assert "; trail: none: the means, standard errors and sample counts are not checked" in out.splitlines()[-1]


def test_verify_of_a_missing_directory_exits_2(tmp_path, capsys):
    rc, _, err = run(["dataset", "verify", str(tmp_path / "nope")], capsys)
    assert rc == 2 and "does not exist" in err


@pytest.mark.parametrize("verb", ["inspect", "info", "verify"])
def test_help_exits_0(verb, capsys):
    rc, out, _ = run(["dataset", verb, "--help"], capsys)
    assert rc == 0 and "Usage" in out


# --------------------------------------------------------------------------------------------------
# inspect of a Hub repo (tests/helpers/hub_fake.py), and hostile metadata


@pytest.fixture
def hub(monkeypatch, tmp_path):
    return FakeHub().install(monkeypatch, tmp_path / "hf-cache")


def test_inspect_offline_says_the_wait_up_front_then_names_the_network_and_exits_1(capsys, hub, clock):
    hub.offline = True
    rc, out, err = run(["dataset", "inspect", "aicrowd/evals"], capsys)
    lines = err.splitlines()
    assert rc == 1 and out == "" and len(lines) == 2
    assert lines[0].startswith("note: Hub unreachable (") and "retrying for up to 20 s" in lines[0]
    assert lines[1].startswith("error: inspecting hf://aicrowd/evals@main: could not reach the Hugging Face Hub")
    assert "huggingface-cli" not in err and sum(clock.sleeps) == pytest.approx(20)


def test_inspect_prints_no_escape_codes_from_a_hostile_metadata_json(baked, tmp_path, capsys):
    import json

    ds = Path(shutil.copytree(baked, tmp_path / "hostile"))
    md = json.loads((ds / "metadata.json").read_text())
    md["seed_source"]["root_seed"] = "3\x1b]0;owned\x07\x1b[2J"
    md["device"] = "cpu\x1b[31m"
    (ds / "metadata.json").write_text(json.dumps(md))
    rc, out, err = run(["dataset", "inspect", str(ds)], capsys)
    assert rc == 0 and "\x1b" not in out + err and "\x07" not in out
    assert "  seed source: derived from root seed 3 (--seed)" in out.splitlines()


def test_ok_line_names_the_mlps_each_check_covered(baked, capsys):
    """--recompute 1 chose an MLP while --n-check 1 looked at MLP 0 only: the OK line says which MLPs
    each family of checks covered, and the pilot's resolution at this N."""
    rc, out, err = run(["dataset", "verify", str(baked), "--n-check", "1", "--recompute", "1"], capsys)
    assert rc == 0, err
    last = out.splitlines()[-1]
    chosen = re.search(r"recompute: (\d+) MLP\(s\) drawn at random with --recompute-seed (\d+): mlp_id (\d+) ", out)
    assert chosen, out
    assert last.startswith("OK: all ")
    assert (f" — integrity: every row (2 MLPs); statistics: mlp_id 0 only (--n-check 1); recompute: mlp_id "
            f"{chosen.group(3)} (random, --recompute-seed {chosen.group(2)}). A single-neuron error below ~") in last
    assert "standard errors is invisible to the pilot at N=2,000; --recompute K checks it" in last
    rc, out, _ = run(["dataset", "verify", str(baked)], capsys)
    assert rc == 0 and "statistics: all 2 MLPs." in out.splitlines()[-1]


def test_plot_to_a_fifo_is_refused_before_any_read(baked, tmp_path, capsys):
    import os

    fifo = tmp_path / "means.png"
    os.mkfifo(fifo)
    rc, out, err = run(["dataset", "inspect", str(baked), "--plot", str(fifo)], capsys)
    assert rc == 2 and "FIFO" in err and err.count("\n") == 1 and out == ""
    assert not os.path.isfile(fifo)


def test_a_non_utf8_directory_name_is_named_for_what_it_is(baked, tmp_path, capsys):
    """verify and inspect of a directory named b"bad\\xff" said "unreadable footer" / "truncated or corrupt"."""
    import os

    bad = os.path.join(os.fsencode(tmp_path), b"bad\xff")
    shutil.copytree(os.fsencode(baked), bad)
    for verb in ("verify", "inspect"):
        rc, out, err = run(["dataset", verb, os.fsdecode(bad)], capsys)
        assert rc == 2 if verb == "verify" else rc in (1, 2), (verb, rc, err)
        assert "valid UTF-8" in err and "footer" not in err + out and err.count("\n") == 1
