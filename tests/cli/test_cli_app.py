"""``whestbench.cli.main`` as whestbench 0.16's argparse main: SystemExit for the help, the version
and parser errors; the exit code returned otherwise. ``whest version``. The entry point's codes."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata as importlib_metadata

import pytest

from helpers.cli import run
from whestbench.cli import main

TINY = ["--n-mlps", "1", "--n-samples", "10", "--width", "4", "--depth", "1"]


@pytest.mark.parametrize("argv", [["--help"], ["-h"], ["dataset", "--help"], ["dataset", "bake", "--help"],
                                  ["version", "--help"], [], ["dataset"]],
                         ids=lambda a: " ".join(a) or "bare")
def test_the_help_raises_system_exit_0(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 0
    assert "Usage:" in capsys.readouterr().out


def test_the_version_flag_raises_system_exit_0(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == f"whest, version {importlib_metadata.version('whestbench')}\n"


@pytest.mark.parametrize("argv", [
    ["dataset", "bake", *TINY, "--bogus"],                               # unknown option
    ["dataset", "bakee"],                                                # unknown verb
    ["dataset", "bake", "--n-mlps", "1"],                                # missing required options
    ["dataset", "bake", *TINY, "--output", "x", "--width", "four"],       # bad type
    ["dataset", "bake", *TINY, "--output", "x", "--device", "gpu"],       # not among the choices
    ["dataset", "generate-seeds", "--n-mlps"],                           # option without its value
], ids=["unknown-option", "unknown-verb", "missing-option", "bad-type", "bad-choice", "no-value"])
def test_a_parser_error_prints_one_line_then_raises_system_exit_2(argv, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert err.startswith("error: ") and err.count("\n") == 1 and "--help" in err
    assert not (tmp_path / "x").exists()


def test_our_own_usage_errors_are_returned_not_raised(capsys, tmp_path):
    assert main(["dataset", "bake", *TINY[:1], "0", *TINY[2:], "--output", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.startswith("error: --n-mlps")


def test_failed_work_is_returned_not_raised(capsys, tmp_path):
    assert main(["dataset", "verify", str(tmp_path)]) == 1  # not a dataset: the check fails


def test_the_version_verb_prints_what_the_version_flag_prints_and_returns_0(capsys):
    assert main(["version"]) == 0
    verb = capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--version"])
    assert verb == capsys.readouterr().out and importlib_metadata.version("whestbench") in verb


@pytest.mark.parametrize("argv,code", [(["--help"], 0), (["--version"], 0), (["version"], 0),
                                       (["dataset", "bake", "--bogus"], 2), (["dataset", "bake", "--n-mlps", "0"], 2)])
def test_the_entry_point_exits_with_the_code(argv, code):
    proc = subprocess.run([sys.executable, "-m", "whestbench", *argv], capture_output=True, text=True, timeout=120)
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_error_line_is_made_from_the_errors_fields(capsys, monkeypatch):
    """The CLI prints ``where``, ``problem`` and ``fix`` as they are when the error reaches it (errors.render),
    not the text the error was made with."""
    from whestbench.cli import seeds
    from whestbench.errors import UsageError

    def refuse(*_):
        exc = UsageError("the seed source is gone;", where="--seed 3", fix="try again.")
        exc.fix = "pass another --seed."
        raise exc

    monkeypatch.setattr(seeds, "derived_seeds", refuse)
    assert main(["dataset", "generate-seeds", "--n-mlps", "2", "--seed", "3"]) == 2
    assert capsys.readouterr().err.strip() == "error: --seed 3: the seed source is gone; pass another --seed."


def test_a_mistyped_verb_is_told_the_nearest_one_though_verbs_load_when_asked_for(capsys):
    rc, _, err = run(["dataset", "bakes"], capsys)
    assert rc == 2 and "No such command 'bakes'. Did you mean 'bake'?" in err
    code = ("import sys, whestbench.cli.app as app\n"
            "print(sorted(m for m in sys.modules if m.startswith('whestbench.cli.') and m != 'whestbench.cli.app'))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "['whestbench.cli.common', 'whestbench.cli.signals']"  # no verb's module at start-up
