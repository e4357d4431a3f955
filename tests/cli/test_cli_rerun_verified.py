"""A re-run's "already complete" is verified (issue 27, "Re-runs that trust a re-signed output", and
"Recompute cache poisoning"): the completion test (marker plus checksums) passes an output damaged and
re-signed, so a re-run also runs verify's integrity checks and the statistics without the audit pilot.
It says "already complete and verified", or fails (exit 1) naming the check; a cached recompute that
fails them is baked again."""

from __future__ import annotations

import os

import json
import shutil
from pathlib import Path

import pytest

from whestbench.dataset import create_dataset

from helpers.cli import run


SHAPE = dict(n_samples=2000, width=8, depth=2)
_BAKE = ["dataset", "bake", "--n-mlps", "2", "--n-samples", "2000", "--width", "8", "--depth", "2", "--seed", "1"]


def _layer1_up(k: float):
    """Every layer-1 mean of row 0 raised by ``k`` of its standard errors (the rewrite re-signs)."""
    def edit(i, row):
        if i == 0:
            row["all_layer_means"][0] = [m + k * s for m, s in zip(row["all_layer_means"][0], row["all_layer_stderr"][0])]
    return edit


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    root = tmp_path_factory.mktemp("rerun")
    assert run_main(_BAKE + ["--output", str(root / "a")]) == 0
    seeds = [11, 12, 13, 14]
    for k, r in enumerate([(0, 2), (2, 4)]):
        create_dataset(4, mlp_seeds=seeds, mlp_range=r, output_path=root / f"p{k}", **SHAPE)
    assert run_main(["dataset", "merge", str(root / "p0"), str(root / "p1"), "--output", str(root / "m")]) == 0
    return root


def run_main(argv):
    from whestbench.cli import main

    return main(argv)


def _resigned_damage(src: Path, dst: Path, rewrite_dataset) -> Path:
    rewrite_dataset(src, dst, edit_row=_layer1_up(50.0))
    assert json.loads((dst / "metadata.json").read_text())["plan_digest"] == \
        json.loads((src / "metadata.json").read_text())["plan_digest"]  # the marker passes: only verify can tell
    return dst


def test_an_honest_rerun_says_already_complete_and_verified(made, capsys):
    rc, o, e = run(_BAKE + ["--output", str(made / "a")], capsys)
    assert rc == 0, e
    assert "is already complete and verified" in o and "nothing to do" in o and "Baking" not in o
    rc, o, e = run(["dataset", "merge", str(made / "p0"), str(made / "p1"), "--output", str(made / "m")], capsys)
    assert rc == 0 and "is already complete and verified" in o, e


def test_rerun_over_a_resigned_damaged_bake_does_not_say_nothing_to_do(made, tmp_path, capsys, rewrite_dataset):
    out = _resigned_damage(made / "a", tmp_path / "a", rewrite_dataset)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    rc, o, e = run(_BAKE + ["--output", str(out)], capsys)
    assert rc == 1 and "nothing to do" not in o
    lines = e.strip().splitlines()
    assert len(lines) == 1 and "holds this result but fails verify: " in lines[0] and "move it aside" in lines[0]
    assert "Traceback" not in e
    from whestbench.verify.run import confirm_complete

    assert "layer-1 means" in {c.name for c in confirm_complete(out).failures}  # the statistics see it (the audit trail may too)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before  # left as found


def test_merge_rerun_over_resigned_damage_fails(made, tmp_path, capsys, rewrite_dataset):
    out = _resigned_damage(made / "m", tmp_path / "m", rewrite_dataset)
    rc, o, e = run(["dataset", "merge", str(made / "p0"), str(made / "p1"), "--output", str(out)], capsys)
    assert rc == 1 and "nothing to do" not in o and "holds this result but fails verify: " in e, (o, e)


def test_a_poisoned_recompute_cache_is_not_reused(made, tmp_path, rewrite_dataset):
    """A cache entry damaged and re-signed keeps its marker; its re-verification fails, so it is baked
    again and the honest dataset's recompute is bit-identical (reused, it would have differed)."""
    from whestbench.verify.run import verify_dataset

    root = tmp_path / "rc"
    assert verify_dataset(made / "a", recompute=1, recompute_seed=3, recompute_root=root).ok
    (entry,) = list(root.iterdir())
    poisoned = _resigned_damage(entry, tmp_path / "poisoned", rewrite_dataset)
    shutil.rmtree(entry)
    shutil.move(poisoned, entry)
    report = verify_dataset(made / "a", recompute=1, recompute_seed=3, recompute_root=root)
    assert report.ok, [(c.name, c.detail) for c in report.failures]
    detail = {c.name: c.detail for c in report.checks}["recompute: ground truth"]
    assert "bit-identical" in detail and "NOT" not in detail


@pytest.mark.parametrize("where", ["itself", "data", "against"])
def test_a_recompute_dir_inside_an_input_is_refused_before_any_check(made, capsys, where):
    out = made / "a"
    root = {"itself": out, "data": out / "data" / "rc", "against": made / "m" / "rc"}[where]
    before = sorted(p.relative_to(made) for p in made.rglob("*"))
    argv = ["dataset", "verify", str(out), "--recompute", "1", "--recompute-dir", str(root)]
    rc, o, e = run(argv + (["--against", str(made / "m")] if where == "against" else []), capsys)
    assert rc == 2 and "--recompute-dir" in e and "inside the input" in e and len(e.strip().splitlines()) == 1, e
    assert "✓" not in o  # before any check
    assert sorted(p.relative_to(made) for p in made.rglob("*")) == before  # nothing written


def test_an_empty_recompute_dir_is_refused_not_taken_as_the_current_directory(made, tmp_path, capsys, monkeypatch):
    """`--recompute-dir ''` (Path('') is '.') wrote the cache entry into the current directory."""
    monkeypatch.chdir(tmp_path)
    before = sorted(os.listdir(tmp_path))
    rc, o, e = run(["dataset", "verify", str(made / "a"), "--recompute", "1", "--recompute-dir", ""], capsys)
    assert rc == 2 and "--recompute-dir" in e and "names no directory" in e and len(e.strip().splitlines()) == 1, e
    assert sorted(os.listdir(tmp_path)) == before


@pytest.mark.parametrize("kind", ["file", "dangling"])
def test_a_recompute_dir_that_is_a_file_or_a_dangling_link_is_one_line(made, tmp_path, capsys, kind):
    root = tmp_path / "rc"
    if kind == "file":
        root.write_text("x")
    else:
        root.symlink_to(tmp_path / "nowhere")
    rc, o, e = run(["dataset", "verify", str(made / "a"), "--recompute", "1", "--recompute-dir", str(root)], capsys)
    assert rc == 2 and len(e.strip().splitlines()) == 1 and "Traceback" not in e and "✓" not in o, e
    assert ("is a file" if kind == "file" else "does not exist") in e


def test_no_cache_bakes_afresh_and_leaves_the_cache_alone(made, tmp_path, capsys, rewrite_dataset):
    """With --no-cache the cached entry is neither used nor touched, and nothing else is left behind."""
    from whestbench.verify.run import verify_dataset

    root = tmp_path / "rc"
    assert verify_dataset(made / "a", recompute=1, recompute_seed=3, recompute_root=root).ok
    (entry,) = list(root.iterdir())
    (entry / "marker").write_text("mine")
    rc, o, e = run(["dataset", "verify", str(made / "a"), "--recompute", "1", "--recompute-dir", str(root),
                    "--no-cache"], capsys)
    assert rc == 0 and "bit-identical" in o, e
    assert sorted(p.name for p in root.iterdir()) == [entry.name] and (entry / "marker").read_text() == "mine"
    rc, _, e = run(["dataset", "verify", str(made / "a"), "--no-cache"], capsys)
    assert rc == 2 and "--no-cache applies to --recompute and --spot-check only" in e


def test_a_reused_cache_says_so_and_an_untrusted_one_is_refused(made, tmp_path, capsys):
    import os

    root = tmp_path / "rc"
    argv = ["dataset", "verify", str(made / "a"), "--recompute", "1", "--recompute-seed", "5", "--recompute-dir", str(root)]
    rc, o, e = run(argv, capsys)
    assert rc == 0 and "reused the bake cached" not in o, e
    rc, o, e = run(argv, capsys)
    assert rc == 0 and "✓ recompute: cache: reused the bake cached at" in o and "--no-cache bakes afresh" in o, e
    (entry,) = list(root.iterdir())
    os.chmod(entry, 0o777)  # anyone could have planted it
    rc, o, e = run(argv, capsys)
    assert rc == 2 and "writable by its group or by everyone" in e and "--no-cache" in e, (o, e)
    os.chmod(entry, 0o755)
    os.chmod(root, 0o777)
    rc, o, e = run(argv, capsys)
    assert rc == 2 and "--recompute-dir" in e and "writable" in e and "✓" not in o, (o, e)
    os.chmod(root, 0o755)
    target = tmp_path / "elsewhere"
    entry.rename(target)
    entry.symlink_to(target, target_is_directory=True)  # a linked entry: unlinked and baked again, its target kept
    rc, o, e = run(argv, capsys)
    assert rc == 0 and not entry.is_symlink() and (target / "metadata.json").is_file(), e
