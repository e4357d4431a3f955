"""Values at the edges of what the flags take: floors on intervals, the seed list's size guard, and a
target standard error beyond float32's range (no numpy warning may reach the user)."""

from __future__ import annotations

import warnings

import pytest

from helpers.cli import run


SHAPE = ["--n-mlps", "1", "--n-samples", "1e5", "--width", "8", "--depth", "2"]


@pytest.mark.parametrize("flag", ["--log-every", "--checkpoint-every"])
@pytest.mark.parametrize("value", ["1e-9", "0.01"])
def test_an_interval_below_the_floor_is_refused_before_any_work(tmp_path, capsys, flag, value):
    rc, out, err = run(["dataset", "bake", *SHAPE, "--seed", "1", flag, value, "--output", str(tmp_path / "o")], capsys)
    assert rc == 2 and "must be at least 0.05 seconds" in err and value in err
    assert "Baking" not in out and not (tmp_path / "o").exists()


@pytest.mark.parametrize("verb", [["merge", "a"], ["combine-splits", "a"], ["push", "a", "--repo", "o/n"],
                                  ["pull", "o/n"]])
def test_every_verb_with_log_every_has_the_floor(capsys, verb):
    rc, _, err = run(["dataset", *verb, "--log-every", "1e-9", "--output", "x"] if verb[0] in ("merge", "combine-splits")
                     else ["dataset", *verb, "--log-every", "1e-9"], capsys)
    assert rc == 2 and "must be at least 0.05 seconds" in err


@pytest.mark.parametrize("n", ["1e12", "2147483648"])
def test_generate_seeds_refuses_more_seeds_than_a_bake_can_use(capsys, n):
    rc, out, err = run(["dataset", "generate-seeds", "--n-mlps", n], capsys)
    assert rc == 2 and "the most seeds a bake can use" in err and out == ""


def test_generate_seeds_refuses_a_list_larger_than_memory(capsys, monkeypatch):
    from whestbench.cli import seeds

    monkeypatch.setattr(seeds, "machine_memory", lambda: (1 << 30, 1 << 30))
    rc, out, err = run(["dataset", "generate-seeds", "--n-mlps", "1e8"], capsys)
    assert rc == 2 and "of memory to draw and print" in err and out == ""


@pytest.mark.parametrize("argv", [
    ["bake", *SHAPE, "--seed", "1", "--target-stderr", "1e308"],
    ["bake", *SHAPE, "--seed", "1", "--target-stderr", "1e308", "--stderr-layer", "all"],
    ["bake", *SHAPE, "--seed", "1", "--target-stderr", "1e-300", "--estimator", "control-variate"],
    ["calibrate", *SHAPE, "--target-stderr", "1e308"],
    ["calibrate", *SHAPE, "--estimator", "control-variate", "--target-stderr", "1e308"],
])
def test_a_target_beyond_float32_gives_no_numpy_warning_or_overflow(tmp_path, capsys, argv):
    if argv[0] == "bake":
        argv = [*argv, "--output", str(tmp_path / "o"), "--quiet"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rc, out, err = run(["dataset", *argv], capsys)
    assert rc == 0, err
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)], [str(w.message) for w in caught]
    assert "OverflowError" not in err
    assert "overflow" not in out + err and "encountered" not in out + err
