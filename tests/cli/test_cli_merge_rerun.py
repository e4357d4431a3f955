"""`merge` and `combine-splits` once their output is in place: a stop signal then is ignored (exit 0,
the output is complete), and a re-run of the finished verb is a no-op (exit 0, "already complete").

The signal test runs the real entry point in a fresh interpreter whose ``fsync_dir`` sends the
process SIGTERM right after the final rename (the window in which the verb used to exit 143 with
"interrupted ... re-run", though its output was complete).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.cli import run


REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def inputs(tiny):
    return tiny


def _argv(verb, inputs, out):
    if verb == "merge":
        return ["dataset", "merge", *inputs["parts"], "--output", str(out)]
    return ["dataset", "combine-splits", *inputs["splits"], "--output", str(out), "--skip-prepared-arrow"]


@pytest.mark.parametrize("verb", ["merge", "combine-splits"])
def test_a_rerun_of_a_finished_verb_exits_0_and_says_already_complete(inputs, tmp_path, capsys, verb):
    out = tmp_path / "out"
    assert run(_argv(verb, inputs, out), capsys)[0] == 0
    before = (out / "metadata.json").read_bytes()
    rc, o, e = run(_argv(verb, inputs, out), capsys)
    assert rc == 0, e
    assert "already complete" in o and "nothing to do" in o
    assert (out / "metadata.json").read_bytes() == before


@pytest.mark.parametrize("verb", ["merge", "combine-splits"])
def test_a_rerun_with_another_license_updates_the_card(inputs, tmp_path, capsys, verb):
    """The card is no part of the numbers: a re-run given another license records it and rewrites
    README.md (it said "nothing to do" and kept the old card)."""
    import json

    out = tmp_path / "out"
    assert run(_argv(verb, inputs, out), capsys)[0] == 0
    checksums = json.loads((out / "metadata.json").read_text())["checksums"]
    rc, printed, err = run([*_argv(verb, inputs, out), "--license", "apache-2.0"], capsys)
    assert rc == 0, err
    assert "already complete and verified" in printed and "card updated: license the default → 'apache-2.0'" in printed
    md = json.loads((out / "metadata.json").read_text())
    assert md["card"] == {"license": "apache-2.0"} and md["checksums"] == checksums
    assert "license: apache-2.0" in (out / "README.md").read_text()


@pytest.mark.parametrize("verb", ["merge", "combine-splits"])
def test_other_inputs_at_a_finished_output_are_still_refused(inputs, tmp_path, capsys, verb):
    out = tmp_path / "out"
    assert run(_argv(verb, inputs, out), capsys)[0] == 0
    argv = _argv(verb, inputs, out)
    if verb == "merge":
        argv.remove(inputs["parts"][1])
    else:
        argv.remove("--skip-prepared-arrow")  # another command: it would write the prepared copies
    rc, _, e = run(argv, capsys)
    assert rc == 2 and "already exists" in e


@pytest.mark.parametrize("damage", ["deleted", "configs dropped"])
def test_combine_rerun_restores_a_deleted_card(inputs, tmp_path, capsys, damage):
    """The card is data: without its configs block `datasets` cannot load the holdout config. A
    re-run that finds the output complete rewrites it, and plain `datasets` then loads the split."""
    import datasets

    out = tmp_path / "out"
    assert run(_argv("combine-splits", inputs, out), capsys)[0] == 0
    card = out / "README.md"
    if damage == "deleted":
        card.unlink()
    else:
        card.write_text(card.read_text().split("homepage:", 1)[1].join(["---\nhomepage:", ""]))
    with pytest.raises(ValueError, match="holdout"):
        datasets.load_dataset_builder(str(out), "holdout")
    rc, o, e = run(_argv("combine-splits", inputs, out), capsys)
    assert rc == 0, e
    assert "already complete" in o and "card rewritten" in o
    assert len(datasets.load_dataset(str(out), "holdout", split="holdout", cache_dir=str(tmp_path / "hf"))) == 2
    rc, o, _ = run(_argv("combine-splits", inputs, out), capsys)
    assert rc == 0 and "card rewritten" not in o


def test_a_damaged_finished_merge_is_not_complete(inputs, tmp_path, capsys):
    out = tmp_path / "out"
    assert run(_argv("merge", inputs, out), capsys)[0] == 0
    shard = next((out / "data").glob("*.parquet"))
    shard.write_bytes(b"x" + shard.read_bytes()[1:])
    rc, _, e = run(_argv("merge", inputs, out), capsys)
    assert rc == 2 and "already exists" in e


SIGNAL_AFTER_RENAME = r"""
import os, signal, sys
from pathlib import Path
import whestbench.atomic as atomic

target = Path(sys.argv[sys.argv.index("--output") + 1])
real = atomic.fsync_dir

def fsync_dir(path):
    real(path)
    if target.is_dir() and Path(path) == target.parent:  # just after the final rename
        os.kill(os.getpid(), signal.SIGTERM)

atomic.fsync_dir = fsync_dir
sys.argv = ["whest", *sys.argv[1:]]
from whestbench.cli.entry import run
run()
"""


@pytest.mark.parametrize("verb", ["merge", "combine-splits"])
def test_a_stop_signal_after_the_output_is_in_place_is_ignored(inputs, tmp_path, verb):
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.run([sys.executable, "-c", SIGNAL_AFTER_RENAME, *_argv(verb, inputs, out)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    assert "interrupted" not in proc.stderr and "Traceback" not in proc.stderr
    assert "received SIGTERM after" in proc.stderr and "ignored" in proc.stderr
    assert (out / "metadata.json").is_file()
    assert proc.returncode != -signal.SIGTERM
