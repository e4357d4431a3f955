"""``whest dataset merge``, ``combine-splits`` and ``prepare-arrow``: flags -> one library call each.

Errors are raised, not printed: ``whestbench.cli.app.main`` turns them into one line and an exit code
(2 for a wrong command: a missing input, an --output that exists or lies inside an input, a
--default-split that is not an input's split; 1 for data that cannot be merged). Notes (a killed
earlier run's staging, removed) and warnings (an input's stale checksums) go to stderr."""

from __future__ import annotations

import click

from whestbench.cli.common import NonEmptyPath, already_complete, out
from whestbench.cli.signals import complete_once_in_place
from whestbench.text import sanitize
from whestbench.assemble.combine import combine_split_datasets
from whestbench.assemble.combine import prepare_arrow as build_prepared_arrow
from whestbench.assemble.merge import merge_datasets
from whestbench.cli.hub import card_options
from whestbench.cli.progress import VerbEvents, log_every_option
from whestbench.format.finished import finished_combine, finished_merge
from whestbench.format.reader import open_dataset, read_metadata
from whestbench.format.schema import DatasetMeta

# Paths stay strings until the library checks them: ``Path("")`` would turn an empty argument into ".".
_PATH = NonEmptyPath()


@click.command("merge")
@click.argument("partials", nargs=-1, required=True, type=_PATH)
@click.option("--output", type=click.Path(), required=True, help="Directory to create (must not exist, nor lie inside a partial).")
@card_options
@log_every_option
def merge(partials: tuple[str, ...], output: str, log_every: float, card: dict) -> None:
    """Check the partials of one bake and assemble the complete dataset.

    \b
    whest dataset merge part-0 part-1 part-2 --output full
    """
    partials = tuple(open_dataset(p) for p in partials)  # each read once, by whichever check comes first
    target = open_dataset(output)
    done = finished_merge(partials, target)
    if done is not None:  # a re-run of this very merge (a requeued job): nothing to do
        already_complete(target, done, f"✓ {output} is already complete: the merge of these {len(partials)} partials "
                         f"({done.get('n_mlps')} MLPs); nothing to do.", card=card)
        return
    with complete_once_in_place("merge", output):
        with VerbEvents("merge", {"start"}, log_every=log_every) as events:
            merge_datasets(list(partials), output_dir=output, on_event=events,  # "start": once the paths are fine
                           card=card)
        n = read_metadata(output).get("n_mlps")
        out.print(f"✓ Merged {n} MLPs from {len(partials)} partials → {sanitize(str(output))}", markup=False)


@click.command("combine-splits")
@click.argument("inputs", nargs=-1, required=True, type=_PATH)
@click.option("--output", type=click.Path(), required=True, help="Directory to create (must not exist, nor lie inside an input).")
@click.option("--default-split", default=None, help="Split that load_dataset(repo) returns: one of the inputs' splits (default: the one input with config 'default').")
@click.option("--skip-prepared-arrow", is_flag=True, help="Do not write prepared/<split> Arrow copies.")
@card_options
@log_every_option
def combine_splits(inputs: tuple[str, ...], output: str, default_split: str | None, skip_prepared_arrow: bool,
                   log_every: float, card: dict) -> None:
    """Combine single-split datasets (one per split) into one multi-split dataset.

    \b
    whest dataset combine-splits public holdout --output combined
    """
    inputs = tuple(open_dataset(p) for p in inputs)  # each read once, by whichever check comes first
    target = open_dataset(output)
    done = finished_combine(inputs, target, default_split=default_split, prepared=not skip_prepared_arrow)
    if done is not None:  # a re-run of this very combine (a requeued job): nothing to do
        already_complete(target, done, f"✓ {output} is already complete: the splits {', '.join(sorted(done['splits']))} "
                         f"of these {len(inputs)} datasets; nothing to do.", card=card)
        return
    with complete_once_in_place("combine-splits", output):
        with VerbEvents("combine-splits", {"start"}, log_every=log_every) as events:
            combine_split_datasets(list(inputs), output_dir=output, default_split=default_split,
                                   write_prepared_arrow=not skip_prepared_arrow, on_event=events, card=card)
        md = read_metadata(output)
        splits = DatasetMeta.of(md).blocks
        out.print(f"Combined {len(splits)} splits into {sanitize(str(output))}:", markup=False)
        for name in sorted(splits):
            entry = splits[name]
            seed = f", seed={entry['seed']}" if "seed" in entry else ""
            out.print(f"  - {name}  (n_mlps={entry['n_mlps']}{seed})", markup=False)
        if md.get("prepared_splits"):
            out.print(f"  prepared Arrow artifacts: {', '.join(sorted(md['prepared_splits']))}", markup=False)


@click.command("prepare-arrow")
@click.argument("dataset_dir", type=_PATH)
def prepare_arrow(dataset_dir: str) -> None:
    """(Re)build the prepared Arrow copies (prepared/<split>/) of a multi-split dataset.

    \b
    whest dataset prepare-arrow combined
    """
    with VerbEvents("prepare-arrow", {"start"}) as events:
        names = build_prepared_arrow(dataset_dir, on_event=events)
    out.print(f"Patched {sanitize(str(dataset_dir))} with prepared Arrow artifacts for {len(names)} split(s): "
              f"{', '.join(sorted(names))}", markup=False)


COMMANDS = [merge, combine_splits, prepare_arrow]
