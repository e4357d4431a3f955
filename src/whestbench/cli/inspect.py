"""``whest dataset inspect`` (alias ``info``) and ``whest dataset verify``."""

from __future__ import annotations

from pathlib import Path

import click

from whestbench.cli.common import DIR_ARG, err, out
from whestbench.cli.progress import DEFAULT_LOG_EVERY, Reporter, log_every_option
from whestbench.cli.signals import StopSignals
from whestbench.errors import UsageError, WorkFailed
from whestbench.format.reader import open_dataset
from whestbench.paths import check_output_file
from whestbench.verify.config import VerifyConfig
from whestbench.verify.inspect import describe, plot_means
from whestbench.verify import run as verify_run
from whestbench.text import sanitize


@click.command("inspect")
@click.argument("source")
@click.option("--revision", default=None, help="Hub revision (branch, tag or commit) when SOURCE is a repo id.")
@click.option("--plot", "plot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also draw each layer's means and standard errors (histograms on shared axes) to this .png, .svg or .pdf (needs matplotlib).")
def inspect(source: str, revision: str | None, plot: Path | None) -> None:
    """Summarise a dataset: metadata, per-split counts, sizes and checksum status.

    SOURCE is a local dataset directory or a Hub dataset (ORG/NAME, ORG/NAME@REV, hf://ORG/NAME@REV);
    for a private repo set HF_TOKEN or run `hf auth login`.

    \b
    whest dataset inspect ./final-eval
    whest dataset inspect aicrowd/arc-whestbench-2026 --revision v1
    whest dataset inspect ./final-eval --plot means.png
    """
    if plot is not None and not Path(source).is_dir():
        raise UsageError("--plot reads the data files, so SOURCE must be a local dataset directory;",
                         fix=f"`whest dataset pull {source}` first.")
    if plot is not None:
        check_output_file(plot, "--plot")
        source = open_dataset(source)  # the summary and the plot read it once
    with Reporter("inspect", mode="quiet") as notes:  # a retry's note, if the Hub is slow to answer
        lines = describe(source, revision=revision, on_event=notes)
    for line in lines:
        out.print(line, markup=False, emoji=False)
    if plot is not None:
        plot_means(source, plot)
        out.print(f"  plot: {sanitize(str(plot))}", markup=False, emoji=False)


@click.command("verify")
@click.argument("directory", type=DIR_ARG)
@click.option("--against", type=DIR_ARG, default=None,
              help="Another bake of (some of) the same seeds: compare weights and ground truth MLP by MLP.")
@click.option("--n-check", type=int, default=None, help="Run the statistical checks on the first K MLPs only.")
@click.option("--sample-mlps", type=int, default=None,
              help="Run the per-MLP pilot statistics on K MLPs chosen at random (huge datasets); default: every MLP.")
@click.option("--sample-seed", type=int, default=0, show_default=True,
              help="Seed of the --sample-mlps choice (printed).")
@click.option("--recompute", type=int, default=None,
              help="Bake K MLPs (drawn at random, printed) again with the dataset's own recipe and compare every "
                   "column: bit for bit where the recipe allows, else within the precision gate. Resumable.")
@click.option("--recompute-seed", type=int, default=None, metavar="S",
              help="Seed of the --recompute draw (default: a fresh, unpredictable one each run; printed). "
                   "Reproduces an earlier run, or resumes a stopped one.")
@click.option("--spot-check", type=str, default=None, metavar="K|K/mlp",
              help="Regenerate audit-trail segments drawn at random from their samples and compare them with the "
                   "stored ones: K segments for the whole dataset, or K/mlp for K of every MLP. The check states "
                   "what its draw catches: one bad segment in every MLP, and one forged segment in one MLP.")
@click.option("--spot-seed", type=int, default=None, metavar="S",
              help="Seed of the --spot-check draw (default: a fresh, unpredictable one each run; printed). "
                   "Reproduces an earlier run, or resumes a stopped one.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda", "mps"]), default=None,
              help="With --recompute or --spot-check, for philox (torch) datasets: where to compute (default cpu).")
@click.option("--recompute-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where --recompute keeps its bakes and a stopped --spot-check its record of the segments checked "
                   "(default $WHEST_RECOMPUTE_DIR or ~/.cache/whestbench/recompute); not inside DIR or --against.")
@click.option("--no-cache", is_flag=True, help="With --recompute: bake afresh (in a temporary directory under "
              "--recompute-dir, removed after); a cached bake is neither reused nor changed. With --spot-check: "
              "regenerate every segment, keeping no record to resume from.")
@log_every_option
def verify(directory: Path, against: Path | None, n_check: int | None, sample_mlps: int | None, sample_seed: int,
           recompute: int | None, device: str | None, recompute_dir: Path | None, no_cache: bool,
           spot_check: str | None = None, spot_seed: int | None = None, recompute_seed: int | None = None,
           log_every: float = DEFAULT_LOG_EVERY) -> None:
    """Check a dataset's integrity and ground truth; exit 1 if any check fails.

    \b
    Integrity: metadata, checksums, schema, mlp_id range, seeds, names, weights re-derived
    from the seeds, finite numbers, breakdowns that parse. Statistics: layer-1 means against
    their exact value; every MLP's later-layer means, standard errors and avg_variance against
    a fresh, independent pilot of that MLP (docs/cli.md: what verify proves and what it cannot).
    With --against: every numeric column compared with another bake of the same seeds.
    \b
    whest dataset verify ./final-eval
    whest dataset verify ./final-eval --against ./reference-4
    whest dataset verify ./huge-eval --sample-mlps 50
    whest dataset verify ./gpu-eval --recompute 1 --device cpu
    whest dataset verify ./gpu-eval --spot-check 8
    whest dataset verify ./gpu-eval --spot-check 2/mlp --spot-seed 3
    """
    config = VerifyConfig(against=against, n_check=n_check, sample_mlps=sample_mlps, sample_seed=sample_seed,
                          recompute=recompute, device=device, recompute_root=recompute_dir, cache=not no_cache,
                          spot_check=spot_check, spot_seed=spot_seed, recompute_seed=recompute_seed)

    def show(check) -> None:
        mark = "–" if check.skipped else ("✓" if check.ok else "✗")
        out.print(f"{mark} {check.name}: {check.detail}", markup=False, emoji=False)

    # the stop signals (a job's time limit, a dropped session) stop a --recompute bake at a checkpoint: the re-run resumes it
    with StopSignals(err) as signals, Reporter("verify", mode="auto", log_every=log_every) as reporter:
        def sink(event) -> None:
            signals.on_event(event)
            reporter(event)

        report = verify_run.verify_dataset(directory, config, on_check=show, on_event=sink, stop=signals.stop)
    failed = report.failures
    skipped = sum(c.skipped for c in report.checks)
    tail = f", {skipped} skipped" if skipped else ""
    if failed:
        # main() prints this on stderr and exits 1
        raise WorkFailed(f"{len(failed)} of {len(report.checks)} checks failed ({', '.join(c.name for c in failed)});",
                         where="verify", fix="see the ✗ lines above")
    if any(c.skipped and c.name.endswith("device check") for c in report.checks):
        tail += "; the device check was skipped or a failure accepted at bake (push needs --allow-unchecked-device)"
    covered = "; ".join(f"{k}: {v}" for k, v in report.coverage.items())
    tail += f" — {covered}" if covered else ""
    tail += f". {report.blind_spot[0].upper()}{report.blind_spot[1:]}" if report.blind_spot else ""
    out.print(f"OK: all {len(report.checks) - skipped} checks passed{tail}", markup=False, emoji=False)


COMMANDS = [inspect, verify]
