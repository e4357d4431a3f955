"""describe(): whestbench 0.16's info lines first, then ours; plot_means(): a PNG of the layer means."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest


from whestbench.bake.pipeline import create_dataset
from whestbench.errors import InvalidDatasetError
from whestbench.errors import HubError
from whestbench.verify.inspect import describe, plot_means
from whestbench.errors import UsageError

from helpers.datasets import tampered_copy
from helpers.hub_fake import FakeHub, clock, no_network  # noqa: F401  (autouse fixtures)


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def baked(small_bake) -> Path:
    return small_bake


def reference_lines(golden_dir: Path, name: str) -> list[str]:
    """What whestbench 0.16.2's `whest dataset info` printed for the golden dataset."""
    return (golden_dir / f"{name}.info.txt").read_text().splitlines()


def test_single_split_starts_with_the_reference_info_lines(golden_dir):
    ref = reference_lines(golden_dir, "full-w64-d4")
    lines = describe(golden_dir / "full-w64-d4")
    assert lines[: len(ref)] == ref


def test_multi_split_starts_with_the_reference_info_lines(golden_dir):
    ref = reference_lines(golden_dir, "combined-w64-d4")
    lines = describe(golden_dir / "combined-w64-d4")
    assert lines[: len(ref)] == ref
    extra = lines[len(ref):]
    kib = {s: (golden_dir / "combined-w64-d4" / "data" / f"{s}-00000-of-00001.parquet").stat().st_size / 1024 for s in ("public", "holdout")}
    assert f"    public: 6 rows in 1 shard, {kib['public']:.1f} KiB" in extra
    assert f"    holdout: 3 rows in 1 shard, {kib['holdout']:.1f} KiB" in extra
    assert "  prepared Arrow: holdout, public" in extra


def test_a_merged_dataset_prints_like_a_bake_with_its_merged_count(golden_dir):
    # Observed from whestbench 0.16.2 on this fixture.
    ref = [
        "WhestBench dataset",
        "  schema_version: 3.0",
        "  format: hf-datasets-parquet",
        "  backend: flopscope",
        "  split: public",
        "  config: default",
        "  n_mlps: 6",
        "  n_samples: 20001",
        "  width: 64",
        "  depth: 4",
        f"  created_at_utc: {json.loads((golden_dir / 'merged-w64-d4' / 'metadata.json').read_text())['created_at_utc']}",
        "  seed_protocol:  whestbench_explicit_per_mlp_seeds (version 3.0)",
    ]
    assert describe(golden_dir / "merged-w64-d4")[: len(ref)] == ref


def test_a_dataset_without_a_sampler_block_gets_the_inferred_sampler(golden_dir):
    lines = describe(golden_dir / "full-w64-d4")
    assert "  sampler: pcg64 (not recorded; inferred from backend 'flopscope')" in lines
    assert any(line.startswith("  integrity: checksums absent") for line in lines)


def test_a_partial_names_its_range(golden_dir):
    lines = describe(golden_dir / "part-0-of-3")
    assert "  n_mlps: 2" in lines
    assert any(line.startswith("  partial: MLPs [0, 2) of 6") for line in lines)


def test_our_bake_reports_sampler_seed_source_sizes_and_checksums(baked):
    lines = describe(baked)
    assert lines[0] == "WhestBench dataset"
    assert "  sampler: pcg64 (version 1, block 16,384 samples)" in lines
    assert "  seed source: derived from root seed 1 (--seed)" in lines
    assert any(line.startswith("    public: 3 rows in 1 shard, ") for line in lines)
    assert any(line.startswith("  total size: ") for line in lines)
    assert lines[-1] == "  integrity: checksums ok (2 files match their sha256)"


def test_a_tampered_dataset_is_reported_not_raised(baked, tmp_path):
    copy, shard = tampered_copy(baked, tmp_path / "tampered", mask=0x01)
    lines = describe(copy)
    assert lines[-1].startswith("  integrity: checksums MISMATCH")
    assert f"data/{shard.name} modified or truncated" in lines[-1]


def test_a_missing_shard_is_reported(baked, tmp_path):
    copy = tmp_path / "noshard"
    shutil.copytree(baked, copy)
    for p in (copy / "data").glob("*.parquet"):
        p.unlink()
    lines = describe(copy)
    assert any("public: no Parquet shards found" in line for line in lines)
    assert "missing" in lines[-1] and "MISMATCH" in lines[-1]


@pytest.fixture
def hub(monkeypatch, tmp_path) -> FakeHub:
    return FakeHub().install(monkeypatch, tmp_path / "hf-cache")


def test_a_hub_repo_fetches_only_metadata(golden_dir, hub):
    hub.add_dir("aicrowd/evals", golden_dir / "combined-w64-d4")
    hub.repos["aicrowd/evals"]["tags"]["v1"] = hub.head("aicrowd/evals")
    lines = describe("aicrowd/evals", revision="v1")
    assert [name for name, _ in hub.calls] == ["dataset_info", "hf_hub_download"]
    assert hub.calls[1][1]["filename"] == "metadata.json"
    assert hub.calls[1][1]["revision"] == hub.head("aicrowd/evals")  # the commit v1 named, resolved first
    ref = reference_lines(golden_dir, "combined-w64-d4")
    assert lines[: len(ref)] == ref
    sha = hub.head("aicrowd/evals")[:12]
    assert f"  source: hf://aicrowd/evals@v1 (commit {sha}; only metadata.json fetched)" in lines
    assert "    public: 6 MLPs (from metadata)" in lines
    assert lines[-1].startswith("  integrity: not checked")


def test_an_hf_url_carries_its_revision(golden_dir, hub):
    hub.add_dir("aicrowd/evals", golden_dir / "full-w64-d4")
    hub.repos["aicrowd/evals"]["tags"]["round-1"] = hub.head("aicrowd/evals")
    describe("hf://aicrowd/evals@round-1")
    assert hub.calls[0][1]["revision"] == "round-1"
    with pytest.raises(UsageError, match="--revision"):
        describe("hf://aicrowd/evals@round-1", revision="main")


def test_a_missing_hub_repo_names_the_repo_and_the_login(hub):
    with pytest.raises(HubError) as info:
        describe("aicrowd/missing")
    text = str(info.value)
    assert "'aicrowd/missing' was not found" in text and "hf auth login" in text
    assert "huggingface-cli" not in text and "\n" not in text


def test_a_hub_repo_without_metadata_is_not_a_whestbench_dataset(hub):
    hub.add_repo("aicrowd/plain", {"data/train.csv": b"a,b\n"})
    with pytest.raises(InvalidDatasetError, match="has no metadata.json, so it is not a WhestBench dataset"):
        describe("aicrowd/plain")
    assert "hf_hub_download" not in hub.names()


def test_an_unreachable_hub_is_retried_for_the_announced_time_then_named(hub, clock):
    hub.offline = True
    events = []
    with pytest.raises(HubError) as info:
        describe("aicrowd/evals", on_event=events.append)
    assert [e.kind for e in events] == ["note"] and "retrying for up to 20 s" in events[0].message
    assert sum(clock.sleeps) == pytest.approx(20)
    assert "could not reach the Hugging Face Hub" in str(info.value)
    assert "huggingface-cli" not in str(info.value)


def test_a_missing_local_path_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="no such dataset directory"):
        describe(str(tmp_path / "no-such-dataset"))


# Escape sequences a hostile metadata.json could carry: clear screen, window title, cursor up, C1 CSI.
ESC = "\x1b[2J\x1b]0;pwned\x07\x1b[1A\x9b31m"


def _hostile(md: dict) -> dict:
    md = dict(md)
    md["seed_source"] = {"method": "derived", "root_seed": f"7{ESC}"}
    md["created_at_utc"] = f"2026{ESC}"
    md["backend"] = f"numpy{ESC}\nintegrity: checksums ok"
    md["sampler"] = {"name": f"pcg64{ESC}", "version": 1}
    return md


def test_escape_codes_in_local_metadata_are_never_printed(golden_dir, tmp_path):
    ds = Path(shutil.copytree(golden_dir / "full-w64-d4", tmp_path / "ds"))
    md = json.loads((ds / "metadata.json").read_text())
    (ds / "metadata.json").write_text(json.dumps(_hostile(md)))
    lines = describe(ds)
    text = "\n".join(lines)
    assert "\x1b" not in text and "\x9b" not in text and "\x07" not in text
    assert any(line.startswith("  seed source: derived from root seed 7") for line in lines)
    assert not any(line.startswith("integrity") for line in lines)  # an embedded newline makes no line


def test_escape_codes_in_hub_metadata_are_never_printed(golden_dir, tmp_path, hub):
    ds = Path(shutil.copytree(golden_dir / "full-w64-d4", tmp_path / "ds"))
    md = json.loads((ds / "metadata.json").read_text())
    (ds / "metadata.json").write_text(json.dumps(_hostile(md)))
    hub.add_dir("aicrowd/hostile", ds)
    text = "\n".join(describe("aicrowd/hostile"))
    assert "\x1b" not in text and "\x9b" not in text and "\x07" not in text
    assert any(line.startswith("  created_at_utc: 2026") for line in text.splitlines())
    assert not any(line.startswith("integrity") for line in text.splitlines())


def test_metadata_missing_keys_never_crash_the_multi_split_summary(tmp_path):
    (tmp_path / "metadata.json").write_text(json.dumps({"splits": {"public": {"n_mlps": 1234}}}))
    lines = describe(tmp_path)
    assert lines[:4] == [
        "WhestBench dataset (multi-split)",
        "  width: ?  depth: ?  n_samples: ?",
        "  splits:",
        "    public:  n_mlps=1,234",
    ]


def test_plot_writes_a_png(baked, tmp_path):
    path = plot_means(baked, tmp_path / "means.png")
    assert path.read_bytes()[:8] == PNG_SIGNATURE


def test_plot_overlays_the_splits_of_a_multi_split_dataset(golden_dir, tmp_path):
    path = plot_means(golden_dir / "combined-w64-d4", tmp_path / "combined.png")
    assert path.read_bytes()[:8] == PNG_SIGNATURE


def test_plot_refuses_an_unknown_format(baked, tmp_path):
    with pytest.raises(UsageError) as info:
        plot_means(baked, tmp_path / "means.bmp")
    assert (info.value.where, info.value.fix) == (f"--plot {tmp_path / 'means.bmp'}", "name a .png, .svg or .pdf file.")
    assert not (tmp_path / "means.bmp").exists()


def test_plot_without_matplotlib_names_the_install_command(baked, tmp_path, monkeypatch):
    import builtins
    import sys

    real = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.split(".")[0] == "matplotlib":
            raise ImportError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    for name in [m for m in sys.modules if m.split(".")[0] == "matplotlib"]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(UsageError) as info:
        plot_means(baked, tmp_path / "means.png")
    assert str(info.value) == "--plot needs matplotlib: pip install 'whestbench[plot]'."
    assert not (tmp_path / "means.png").exists()


# --- the plot: means and standard errors per layer, on shared axes (issue 35) ------------------------


def _figure(d):
    pytest.importorskip("matplotlib")
    from whestbench.verify.inspect import plot_figure

    return plot_figure(d)


def _counts(ax) -> list[float]:
    """A panel's histogram: the counts of its one StepPatch."""
    (patch,) = ax.patches
    return patch.get_data().values.tolist()


def _stored(d, column):
    import numpy as np
    import pyarrow.parquet as pq

    return np.asarray(pq.read_table(d / "data").column(column).to_pylist(), dtype=np.float32)


def test_the_plot_shows_each_layers_standard_errors_beside_its_means_on_shared_axes(baked):
    """The plot showed the means' histograms only, each panel on its own x-axis."""
    import matplotlib.pyplot as plt
    import numpy as np

    fig = _figure(baked)
    try:
        axes = [ax for ax in fig.axes if ax.has_data() or ax.texts]
        means, errors = axes[:3], axes[3:]
        assert len(means) == len(errors) == 3
        assert [ax.get_xlabel() for ax in (means[0], errors[0])] == ["mean", "standard error"]
        for group in (means, errors):
            assert all(group[0].get_shared_x_axes().joined(group[0], ax) for ax in group)
            assert all(group[0].get_shared_y_axes().joined(group[0], ax) for ax in group)
            assert len({ax.get_xlim() for ax in group}) == 1
        assert not means[0].get_shared_x_axes().joined(means[0], errors[0])
        se, m = _stored(baked, "all_layer_stderr"), _stored(baked, "all_layer_means")
        for layer in range(3):
            heights = _counts(errors[layer])
            bins = np.linspace(0.0, float(se.max()), 41)
            assert heights == np.histogram(se[:, layer].ravel(), bins=bins)[0].tolist()
            assert sum(_counts(means[layer])) == m[:, layer].size
            live = m[:, layer] > 0  # a dead neuron (mean 0) has no relative error
            rel = np.median(se[:, layer][live] / m[:, layer][live])
            assert errors[layer].get_title() == (f"layer {layer + 1}: median {np.median(se[:, layer]):.3g}, "
                                                 f"{rel:.2%} of the mean")
        assert "means and standard errors per layer" in fig._suptitle.get_text()
    finally:
        plt.close(fig)


def test_a_control_variate_plot_says_layer_1_is_exact(tmp_path):
    import matplotlib.pyplot as plt

    ds = create_dataset(n_mlps=2, n_samples=40_000, width=8, depth=2, seed=1, output_path=tmp_path / "cv",
                        estimator="control-variate")
    fig = _figure(ds)
    try:
        errors = [ax for ax in fig.axes if ax.get_xlabel() == "standard error" or ax.texts][-2:]
        assert [t.get_text() for t in errors[0].texts] == ["exact means\n(standard error 0)"] and not errors[0].patches
        assert errors[1].get_title().startswith("layer 2: median ") and sum(_counts(errors[1])) == 16
    finally:
        plt.close(fig)


def test_a_plot_of_an_016_dataset_has_only_the_means_and_splits_overlaid(golden_dir):
    import matplotlib.pyplot as plt

    fig = _figure(golden_dir / "combined-w64-d4")
    try:
        panels = [ax for ax in fig.axes if ax.has_data()]
        assert len(panels) == 4 and {ax.get_xlabel() for ax in panels} <= {"mean", ""}
        labels = [t.get_text() for t in panels[0].get_legend().get_texts()]
        assert sorted(labels) == ["holdout", "public"]
        assert "ground-truth means per layer" in fig._suptitle.get_text()
    finally:
        plt.close(fig)

# --- the standard errors ---------------------------------------------------------------------------


def _stderr_summary(lines: list[str]) -> list[str]:
    start = next(i for i, line in enumerate(lines) if "median / max per layer" in line)
    return [line.strip() for line in lines[start + 1:] if line.strip().startswith("layer ")]


def test_the_stderr_summary_is_the_median_and_max_of_each_layer(baked):
    import numpy as np
    import pyarrow.parquet as pq

    lines = describe(baked)
    assert any("stderr (plain estimator), median / max per layer:" in line for line in lines)
    se = np.asarray(pq.read_table(baked / "data").column("all_layer_stderr").to_pylist(), dtype=np.float32)
    want = [f"layer {k + 1}: {np.median(se[:, k]):.3g} / {se[:, k].max():.3g}" for k in range(3)]
    assert _stderr_summary(lines) == want


def test_a_bake_too_small_for_a_standard_error_says_so_instead_of_nan(tmp_path):
    ds = create_dataset(n_mlps=2, n_samples=1, width=8, depth=2, seed=1, output_path=tmp_path / "one")
    summary = _stderr_summary(describe(ds))
    assert summary == [f"layer {k}: n/a (too few samples for a standard error)" for k in (1, 2)]
    assert not any("nan" in line for line in describe(ds))


def test_a_control_variate_bake_shows_layer_1_exact(tmp_path):
    ds = create_dataset(n_mlps=2, n_samples=20_000, width=8, depth=2, seed=1, output_path=tmp_path / "cv",
                        estimator="control-variate")
    summary = _stderr_summary(describe(ds))
    assert summary[0] == "layer 1: 0 / 0" and not summary[1].startswith("layer 2: 0 /")


def test_a_nan_where_a_standard_error_must_exist_is_called_damage_not_too_few_samples(baked, tmp_path, rewrite_dataset):
    def blank(i, row):
        if i == 1:
            row["all_layer_stderr"][1][2] = float("nan")

    summary = _stderr_summary(describe(rewrite_dataset(baked, tmp_path / "nan", edit_row=blank)))
    assert "1 NaN where a standard error must exist: damaged? run `whest dataset verify`" in summary[1]
    assert "too few samples" not in " ".join(summary)


def test_inspect_reports_a_differing_prepared_copy(golden_dir, tmp_path, damage_prepared):
    ds = Path(shutil.copytree(golden_dir / "combined-w64-d4", tmp_path / "comb"))
    honest = describe(ds)
    assert "    holdout: ok, prepared/holdout: 3 rows, 8 columns bit-identical to data/holdout-*.parquet" in honest
    damage_prepared(ds, "holdout", resign=True)
    lines = describe(ds)
    assert any(line.startswith("  integrity: checksums ok") for line in lines)
    bad = [line for line in lines if line.startswith("    holdout: DIFFERS")]
    assert len(bad) == 1 and "column all_layer_means, row 0" in bad[0], lines
    assert "    public: ok, prepared/public: 6 rows" in "\n".join(lines)


def test_a_target_bakes_plot_title_and_info_line_state_the_samples_used_not_the_cap(tmp_path):
    """Issue 28: the plot said N=1,000,000 and inspect "n_samples: 1000000", the cap of a target bake."""
    from whestbench.verify.inspect import _plot_title

    out = create_dataset(2, 10**6, 8, 3, seed=1, output_path=tmp_path / "t", estimator="control-variate",
                         target_stderr=0.05)
    md = json.loads((out / "metadata.json").read_text())
    title = _plot_title("t", 2, md)
    assert "N=524,288 (target 0.05, cap 1,000,000)" in title and "N=1,000,000" not in title
    lines = describe(out)
    (line,) = [x for x in lines if x.startswith("  n_samples: ")]
    assert line == "  n_samples: 1000000 (the cap of a --target-stderr bake; each MLP used 524,288)"
    plain = {k: v for k, v in md.items() if k not in ("target_stderr", "samples_used")}
    assert _plot_title("t", 2, plain).endswith("N=1,000,000)")
