"""`whest dataset generate-seeds`: a JSON array of N distinct int63 seeds, random or derived from --seed."""

from __future__ import annotations

import json

import pytest

from whestbench.cli import main
from whestbench.compute.seeds import derived_seeds

from helpers.cli import dataset


def generate(capsys, *args: str) -> tuple[int, str, str]:
    return dataset(capsys, "generate-seeds", *args)


def test_prints_a_json_array_of_n_distinct_int63(capsys):
    rc, out, err = generate(capsys, "--n-mlps", "500")
    assert rc == 0, err
    seeds = json.loads(out)
    assert isinstance(seeds, list) and len(seeds) == 500 and len(set(seeds)) == 500
    assert all(type(s) is int and 0 <= s < 2**63 for s in seeds)


def test_random_lists_differ_between_runs(capsys):
    a = json.loads(generate(capsys, "--n-mlps", "3")[1])
    b = json.loads(generate(capsys, "--n-mlps", "3")[1])
    assert a != b


def test_a_root_seed_gives_the_same_list_every_time(capsys):
    a = generate(capsys, "--n-mlps", "20", "--seed", "7")[1]
    b = generate(capsys, "--n-mlps", "20", "--seed", "7")[1]
    assert a == b
    assert json.loads(a) == derived_seeds(7, 20)


def test_n_mlps_accepts_exponent_form(capsys):
    rc, out, _ = generate(capsys, "--n-mlps", "1e2", "--seed", "1")
    assert rc == 0 and len(json.loads(out)) == 100


def test_the_list_feeds_a_bake_and_matches_bake_dash_dash_seed(tmp_path, capsys, read_columns):
    # `generate-seeds --seed S` and `bake --seed S` stand for the same MLPs.
    rc, out, _ = generate(capsys, "--n-mlps", "2", "--seed", "11")
    seeds_file = tmp_path / "seeds.json"
    seeds_file.write_text(out)
    common = ["dataset", "bake", "--n-mlps", "2", "--n-samples", "100", "--width", "3", "--depth", "1", "--quiet"]
    assert main([*common, "--mlp-seeds", str(seeds_file), "--output", str(tmp_path / "a")]) == 0
    assert main([*common, "--seed", "11", "--output", str(tmp_path / "b")]) == 0
    a, b = read_columns(tmp_path / "a"), read_columns(tmp_path / "b")
    assert list(a["mlp_seed"]) == list(b["mlp_seed"]) == json.loads(out)
    assert a["all_layer_means"].tobytes() == b["all_layer_means"].tobytes()


@pytest.mark.parametrize("args, match", [
    (["--n-mlps", "0"], "--n-mlps must be a positive integer"),
    (["--n-mlps", "-4"], "--n-mlps"),
    (["--n-mlps", "2", "--seed", "-1"], "--seed must be a non-negative integer"),
    ([], "--n-mlps"),
])
def test_bad_requests_are_usage_errors(capsys, args, match):
    rc, out, err = generate(capsys, *args)
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and match in lines[0], err
    assert out == "" and "Traceback" not in err


def _seeds_to_file(tmp_path, n: int, limit: int | None = None, stdout_path=None):
    import os
    import resource
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    target = stdout_path or tmp_path / "s.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(repo / "src"), os.environ.get("PYTHONPATH", "")]))
    preexec = (lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))) if limit else None
    with open(target, "wb") as out:
        p = subprocess.run([sys.executable, "-m", "whestbench", "dataset", "generate-seeds", "--n-mlps", str(n),
                            "--seed", "1"], stdout=out, stderr=subprocess.PIPE, preexec_fn=preexec, env=env,
                           timeout=120)
    return p.returncode, p.stderr.decode(), target


def test_a_failed_write_to_stdout_is_exit_1(tmp_path):
    """`(ulimit -f 1; whest dataset generate-seeds --n-mlps 1000 --seed 1 > s.json)` exited 0 with a
    truncated file: Python's buffered stdout dropped the rest after a short write."""
    rc, err, target = _seeds_to_file(tmp_path, 1000, limit=1024)
    assert rc == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: could not write the seeds to standard output"), err
    assert "ulimit -f" in lines[0] and "incomplete" in lines[0] and "--output" not in lines[0]
    assert "Traceback" not in err and target.stat().st_size == 1024
    rc, err, target = _seeds_to_file(tmp_path, 1000)
    assert rc == 0 and err == "" and json.loads(target.read_text()) == derived_seeds(1, 1000)


def test_a_full_device_is_exit_1_without_output_advice(tmp_path):
    rc, err, _ = _seeds_to_file(tmp_path, 3, stdout_path="/dev/full")
    assert rc == 1 and err.count("\n") == 1
    assert "no space left on the device" in err and "--output" not in err
