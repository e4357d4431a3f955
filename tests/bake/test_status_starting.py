"""``whest dataset status`` from a bake's first moment, the stages that keep its log from falling
silent during the start-up, and the status of a complete multi-split dataset (issue 35)."""

from __future__ import annotations

import io
import os


from whestbench.bake.status import bake_status, status_lines
from whestbench.cli.progress import Reporter
from whestbench.events import Event, Progress
from whestbench.work.workdir import hold_early, record_phase

from helpers.cli import run


BAKE = ["dataset", "bake", "--n-mlps", "2", "--n-samples", "40000", "--width", "8", "--depth", "3", "--seed", "4",
        "--max-threads", "1", "--quiet"]


def test_status_answers_starting_from_the_bakes_first_moment_and_names_each_phase(tmp_path, capsys, monkeypatch):
    """Before its start-up work (flags, imports, the timing probe, the kernels) the bake holds its work
    directory and records the phase (this bake's kernels are numpy's: no kernel phase): status said "neither a dataset nor a bake's output" until the
    units started (~39 s on a loaded machine)."""
    import whestbench.bake.pipeline as pipeline
    import whestbench.bake.cost as cost
    import whestbench.cli.bake as cli_bake

    out = tmp_path / "gt"
    seen: dict[str, dict] = {}

    def at(label, fn):
        def wrapped(*a, **k):
            seen.setdefault(label, bake_status(out))
            return fn(*a, **k)
        return wrapped

    monkeypatch.setattr(cli_bake, "_config", at("config", cli_bake._config))
    monkeypatch.setattr(cost, "PROBE_FLOPS", 0)  # every bake is timed: the probe's phase is seen
    monkeypatch.setattr(cost, "probe", at("probe", cost.probe))
    monkeypatch.setattr(pipeline, "write_baked", at("writing", pipeline.write_baked))
    rc, _, err = run([*BAKE, "--output", str(out)], capsys)
    assert rc == 0, err
    assert {k: (v["state"], (v.get("phase") or {}).get("phase")) for k, v in seen.items()} == {
        "config": ("starting", "starting"), "probe": ("starting", "probe"),
        "writing": ("running", "sampling")}
    first = seen["config"]
    assert first["holder"]["pid"] == os.getpid() and first["plan"] is None
    lines = status_lines(first)
    assert lines[0] == f"{out}: starting"
    assert lines[2].startswith("  now: starting: reading the flags"), lines
    assert bake_status(out)["state"] == "complete"


def test_a_refused_or_stopped_start_up_leaves_no_work_directory(tmp_path, capsys, monkeypatch):
    """The work directory held from the first moment is removed when the bake is refused or stopped
    before it saved anything: a refused command writes nothing."""
    import signal

    import whestbench.cli.bake as cli_bake

    rc, _, err = run([*BAKE[:-1], "--width", "0", "--output", str(tmp_path / "bad")], capsys)
    assert rc == 2 and not (tmp_path / "bad.whest-work").exists(), err

    def stopped(**_):
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("the stop ends the bake in its start-up")

    monkeypatch.setattr(cli_bake, "_config", stopped)
    rc, _, err = run([*BAKE, "--output", str(tmp_path / "stopped")], capsys)
    assert rc == 75 and "before the bake started" in err, err
    assert not (tmp_path / "stopped.whest-work").exists()


def test_a_bake_killed_in_its_start_up_is_stopped_with_its_last_phase_and_a_rerun_completes(tmp_path, capsys):
    """What a bake killed (SIGKILL) during its timing probe leaves: its lock, no longer held, and its phase."""
    import json

    from whestbench.work.workdir import LOCK_FILE

    out = tmp_path / "gt"
    work = tmp_path / "gt.whest-work"
    work.mkdir()
    (work / LOCK_FILE).write_text(json.dumps({"pid": os.getpid(), "host": "vm", "started": "x", "command": ""}))
    record_phase(work, "probe")
    doc = bake_status(out)
    assert doc["state"] == "stopped" and doc["last_phase"]["phase"] == "probe" and doc["plan"] is None
    lines = status_lines(doc)
    assert any(line.startswith("  last phase: timing probe") for line in lines), lines
    assert "  no plan.json: the bake stopped in its start-up, before any unit; a re-run starts it" in lines
    rc, _, err = run([*BAKE, "--output", str(out)], capsys)
    assert rc == 0, err
    assert bake_status(out)["state"] == "complete" and not work.exists()


def test_hold_early_leaves_an_existing_output_to_the_bakes_checks_and_is_reentrant(tmp_path):
    out = tmp_path / "gt"
    out.mkdir()
    with hold_early(out) as work:
        assert work is None and not (tmp_path / "gt.whest-work").exists()
    other = tmp_path / "other"
    with hold_early(other) as held:
        assert held == tmp_path / "other.whest-work" and bake_status(other)["state"] == "starting"
        with hold_early(other) as again:  # held by this process already: held on, not refused as busy
            assert again == held
        assert bake_status(other)["state"] == "starting"
    assert not (tmp_path / "other.whest-work").exists()  # nothing saved in it: removed


def test_the_log_names_the_stage_under_way_and_how_long_it_has_run():
    """A stage (start-up, a probe, a check) is what a log line says until counts follow: no stretch is
    silent for longer than --log-every. A fake clock: no timing in the verdict."""
    now = [100.0]
    stream = io.StringIO()
    reporter = Reporter("bake", mode="log", log_every=3600, stream=stream, clock=lambda: now[0])
    with reporter:
        reporter.beat()
        assert stream.getvalue() == ""  # nothing under way yet: nothing to say
        reporter(Event("stage", message="timing probe: timing this bake's own loop", data={"phase": "probe"}))
        now[0] += 42
        reporter.beat()
        assert stream.getvalue().rstrip().endswith("bake: timing probe: timing this bake's own loop (running 42.0 s)")
        reporter(Event("start", progress=Progress("samples", 0, 1000)))
        now[0] += 1
        reporter.beat()
    last = stream.getvalue().splitlines()[-1]
    assert "0/1,000 samples" in last and "timing probe" not in last


def test_status_of_a_complete_multi_split_dataset_reports_each_split(tmp_path):
    """A combined dataset's status printed "None MLPs"."""
    from whestbench import create_dataset
    from whestbench.assemble.combine import combine_split_datasets

    pub = create_dataset(3, 300, 8, 2, mlp_seeds=[1, 2, 3], output_path=tmp_path / "public")
    hold = create_dataset(2, 300, 8, 2, mlp_seeds=[5, 6], split="holdout", config="holdout",
                          output_path=tmp_path / "holdout")
    both = combine_split_datasets([pub, hold], output_dir=tmp_path / "both", write_prepared_arrow=False)
    doc = bake_status(both)
    assert doc["state"] == "complete" and doc["n_mlps"] == 5 and (doc["width"], doc["depth"]) == (8, 2)
    assert {k: v["n_mlps"] for k, v in doc["splits"].items()} == {"public": 3, "holdout": 2}
    lines = status_lines(doc)
    assert lines[1] == "  2 splits, 5 MLPs in all; a re-run redoes nothing"
    assert "    public: 3 MLPs, 300 samples each, width 8, depth 2" in lines
    assert "    holdout: 2 MLPs, 300 samples each, width 8, depth 2" in lines
    assert not any("None" in line for line in lines)


def test_status_says_1_mlp_not_1_mlps(tmp_path):
    """A combined dataset's one-MLP split, and a one-MLP bake's plan, printed "1 MLPs" (issue 35's
    fresh-clone run: `holdout: 1 MLPs, 2,000,000 samples each, ...`)."""
    from whestbench import create_dataset
    from whestbench.assemble.combine import combine_split_datasets

    pub = create_dataset(2, 300, 8, 2, mlp_seeds=[1, 2], output_path=tmp_path / "public")
    hold = create_dataset(1, 300, 8, 2, mlp_seeds=[5], split="holdout", config="holdout",
                          output_path=tmp_path / "holdout")
    both = combine_split_datasets([pub, hold], output_dir=tmp_path / "both", write_prepared_arrow=False)
    lines = status_lines(bake_status(both))
    assert "    holdout: 1 MLP, 300 samples each, width 8, depth 2" in lines
    assert "    public: 2 MLPs, 300 samples each, width 8, depth 2" in lines
    assert status_lines(bake_status(hold))[1].startswith("  1 MLP, 300 samples each")
    plan = {"plan": {"n_mlps": 1, "mlp_range": [0, 1], "n_samples": 300, "width": 8, "depth": 2, "sampler": "pcg64"}}
    assert any(line.startswith("  plan: 1 MLP (range [0, 1]), 300 samples each") for line in
               status_lines({"output": "x", "state": "stopped", **plan}))


def test_verify_merge_and_combine_name_each_phase_without_counts(tmp_path):
    """verify's target check (5-30 s) and the first 27 s of combine-splits were silent: each phase
    without counts is a stage event that the log's timer line names."""
    from whestbench import create_dataset
    from whestbench.assemble.combine import combine_split_datasets
    from whestbench.assemble.merge import merge_datasets
    from whestbench.verify.run import verify_dataset

    pub = create_dataset(3, 4096, 8, 2, mlp_seeds=[1, 2, 3], output_path=tmp_path / "public",
                         target_stderr=0.05)
    events = []
    assert verify_dataset(pub, on_event=events.append).ok
    stages = [e.message.split(":")[0] for e in events if e.kind == "stage"]
    assert stages == ["integrity", "statistics", "target check", "audit trail"], stages
    hold = create_dataset(2, 4096, 8, 2, mlp_seeds=[5, 6], split="holdout", config="holdout",
                          output_path=tmp_path / "holdout", target_stderr=0.05)
    events.clear()
    combine_split_datasets([pub, hold], output_dir=tmp_path / "both", write_prepared_arrow=False,
                           on_event=events.append)
    stages = [e.message for e in events if e.kind == "stage"]
    assert stages[:3] == ["opening the 2 inputs: their metadata", "checking each input's shards and reading its seeds",
                          "checking that no MLP seed is shared between splits"]
    assert f"verifying input {pub}: integrity: metadata, checksums, schema, seeds, weights re-derived from the seeds" \
        in stages
    assert stages[-1] == "writing the metadata, the card and the checksums"
    parts = [create_dataset(4, 4096, 8, 2, seed=9, mlp_range=r, output_path=tmp_path / f"p{r[0]}") for r in ((0, 2), (2, 4))]
    events.clear()
    merge_datasets(parts, output_dir=tmp_path / "merged", on_event=events.append)
    stages = [e.message for e in events if e.kind == "stage"]
    assert stages[0] == "opening the 2 partials: their metadata" and stages[-1].startswith("writing the metadata")
    assert any(s.startswith(f"verifying partial {parts[0]}: statistics") for s in stages), stages


def test_status_names_a_target_bakes_pilots(tmp_path, capsys, monkeypatch):
    from whestbench.work.units import WorkSpec

    out = tmp_path / "t"
    seen = []
    original = WorkSpec.planned_samples

    def pilot(self, index):
        if self.planned is None and not seen:
            seen.append(bake_status(out))
        return original(self, index)

    monkeypatch.setattr(WorkSpec, "planned_samples", pilot)
    rc, _, err = run([*BAKE, "--estimator", "control-variate", "--target-stderr", "0.05", "--output", str(out)], capsys)
    assert rc == 0, err
    assert seen[0]["state"] == "starting" and seen[0]["phase"]["phase"] == "pilots"
