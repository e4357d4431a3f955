"""``whest dataset push`` (alias ``upload``) and ``pull`` (alias ``download``): flags -> ``hub.push``, ``hub.pull``.

The token is handed to huggingface_hub and never printed. The safe way to give it is HF_TOKEN (or
the stored ``hf auth login``); ``--token-file PATH`` (``-``: standard input) reads it from a file,
and ``--token`` still works but shows in ``ps`` and in the shell history."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import click

from whestbench.atomic import read_regular, read_stream
from whestbench.cli.common import DIR_ARG, out
from whestbench.cli.progress import VerbEvents, log_every_option
from whestbench.errors import FileTooLarge, UsageError
from whestbench.format.card import LICENSE, ORGANISERS, TOOL_URL
from whestbench.format.card_rules import CARD_FIELDS, check_card_fields
from whestbench.hub import pull as hub_pull, push as hub_push
from whestbench.hub.client import TOKEN_FILE_MAX_BYTES, check_token, require_settings, token_source
from whestbench.hub.ref import hf_ref
from whestbench.text import format_bytes, plural, sanitize

_TOKEN_HELP = (
    "Hub token. Visible to other users in `ps` and kept in shell history: prefer HF_TOKEN (the safe "
    "way) or --token-file. Default: HF_TOKEN, or the token `hf auth login` stored. Never printed or saved."
)
_TOKEN_FILE_HELP = "Read the Hub token from this file (its first line), or from standard input with '-'."
# Events whose message is a line of the verb's output; others (progress) are for cli/progress.py.
_SAID = {"start", "planned", "compared", "commit", "tagged", "preflight"}


def read_token(token: str | None, token_file: str | None) -> str | None:
    """The token from ``--token`` or ``--token-file`` (``-``: stdin; a pipe such as ``<(pass hf)`` works,
    at most ``TOKEN_FILE_MAX_BYTES``), checked as the Python API checks one (``hub.client.check_token``);
    None means HF_TOKEN / the stored login."""
    if token_file is None:
        if token is not None and not token.strip():
            raise UsageError("--token is empty;", fix="pass a Hub token, or leave it out to use HF_TOKEN.")
        check_token(token)
        return token
    if token is not None:
        raise UsageError("give the token once:", fix="--token or --token-file, not both.")
    where = "standard input" if token_file == "-" else token_file
    try:
        raw = (read_stream(getattr(sys.stdin, "buffer", sys.stdin), TOKEN_FILE_MAX_BYTES, "token file") if token_file == "-" else
               read_regular(token_file, TOKEN_FILE_MAX_BYTES, "token file", streams=True))
        text = raw.decode("utf-8")
    except FileTooLarge as e:
        raise UsageError.from_error(e, where="--token-file", fix="Put the token on the file's first line.") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read it ({getattr(e, 'strerror', None) or type(e).__name__});", where=f"--token-file {token_file}",
                         fix="pass a readable file holding the token, or '-' for standard input.") from None
    lines = text.strip().splitlines()
    if not lines or not lines[0].strip():
        raise UsageError(f"{where} holds no token;", where="--token-file", fix="put the token on its first line.")
    check_token(lines[0].strip())
    return lines[0].strip()


def card_options(f):
    """``--card FILE|PRESET``, ``--pretty-name``, ``--license``, ``--homepage``: the dataset card's (bake
    records them, push renders them; each defaults to what the bake recorded, else the neutral card's;
    the flags override the file's fields). The verb gets them as one ``card``: the fields given, checked
    (``card_rules.check_card_fields``, a UsageError naming the fix) before the verb does any work."""
    @functools.wraps(f)  # click's parameters attached so far go with it
    def verb(*args, card_file, pretty_name, license, homepage, **kwargs):
        card = check_card_fields(pretty_name=pretty_name, license=license, homepage=homepage, card_file=card_file)
        return f(*args, card=card, **kwargs)

    verb = click.option("--card", "card_file", default=None, metavar="FILE|PRESET",
                        help=f"A YAML or JSON card file with any of {', '.join(CARD_FIELDS[:-1])} (docs/hub.md), or "
                             f"the built-in card {ORGANISERS} (the WhestBench organisers' title, page, repository and "
                             "citation, for their own datasets). Without one the card describes the data and credits "
                             "no organisation.")(verb)
    verb = click.option("--homepage", default=None, metavar="URL", help=f"The card's homepage (default: {TOOL_URL}).")(verb)
    verb = click.option("--license", default=None, metavar="ID",
                        help=f"The card's license, a Hugging Face license id (default: {LICENSE}).")(verb)
    return click.option("--pretty-name", default=None, metavar="TEXT",
                        help="The card's title (default: one from the data, such as 'Ground truth of 16 random "
                             "ReLU MLPs of width 64 and depth 6').")(verb)


def _dry_run(directory: Path, config, token_flag: str | None) -> None:
    """``push --dry-run``: every check push makes before the network, then what it would send: the target,
    the card, and last (what the operator sees) the files, their size and whether a token was found."""
    plan = hub_push.plan_push(directory, config)
    require_settings()  # a Hugging Face setting the push would refuse (HF_ENDPOINT, a proxy): refused here too
    target = hf_ref(plan.repo_id, plan.revision) + (f" (tag {config.tag})" if config.tag else "")
    _say(f"Dry run: would upload {plan.directory} → {target}; nothing is sent.")
    _say("Card (README.md):")
    _say(sanitize(plan.card.content.decode("utf-8")).rstrip("\n"))  # the card is rendered in memory
    files = plan.files
    _say(f"Files ({plural(len(files), 'file')}, {format_bytes(plan.total_bytes)}):")
    for f in files:
        _say(f"  {format_bytes(f.size):>10}  {sanitize(f.path)}")
    if plan.ignored:
        _say(f"Not part of the dataset, not uploaded: {', '.join(sanitize(p) for p in plan.ignored)}")
    source = token_source(token_flag)
    _say(f"Token: found ({source}; not shown)." if source else
         "Token: none found, and a push needs one: set HF_TOKEN, run `hf auth login`, or pass --token-file.")
    _say(f"Dry run done: {plural(len(files), 'file')}, {format_bytes(plan.total_bytes)} would go to {target}; "
         "nothing was sent.")


def _say(text: str) -> None:
    out.print(text, markup=False, emoji=False)


def _token_options(f):
    f = log_every_option(f)
    f = click.option("--token-file", default=None, metavar="PATH", help=_TOKEN_FILE_HELP)(f)
    return click.option("--token", default=None, metavar="TOKEN", help=_TOKEN_HELP)(f)


@click.command("push")
@click.argument("directory", type=DIR_ARG)
@click.option("--repo", "repo", required=True, metavar="ORG/NAME",
              help="Hub dataset repo (created if needed); hf://ORG/NAME works too.")
@click.option("--tag", default=None, help="Tag the published commit (for example v1); the card links to it.")
@click.option("--message", default=None, help="Commit message (default: 'Upload whestbench dataset').")
@click.option("--private", is_flag=True, help="Create the repo private (an existing public repo is refused).")
@click.option("--dry-run", is_flag=True, help="Print the files, their sizes, the target and the card; upload nothing.")
@click.option("--allow-unchecked-device", is_flag=True,
              help="Publish a torch bake whose device check was skipped or a failure accepted (refused otherwise).")
@card_options
@_token_options
def push(directory: Path, repo: str, tag: str | None, message: str | None, private: bool, dry_run: bool,
         allow_unchecked_device: bool, card: dict, token: str | None, token_file: str | None, log_every: float) -> None:
    """Publish a complete dataset to the Hugging Face Hub.

    Partial and damaged datasets, and datasets with a symlink in data/, are refused before anything
    is sent. Files the Hub already holds are skipped, so re-running an interrupted push resumes it;
    metadata.json and the card (rendered for this repo and revision) go last, with the removal of
    shards an earlier push left behind. The token: HF_TOKEN is the safe way (--token shows in `ps`).

    \b
    whest dataset push ./ds --repo aicrowd/whestbench-public --tag v1
    """
    token = read_token(token, token_file)  # a dry run checks everything the push would, but the network
    config = hub_push.PushConfig(repo, tag=tag, message=message, private=private, card=card,
                                 allow_unchecked_device=allow_unchecked_device)
    if dry_run:
        _dry_run(directory, config, "--token-file" if token_file is not None else "--token" if token is not None else None)
        return
    with VerbEvents("push", _SAID, log_every=log_every) as events:
        result = hub_push.push_dataset(directory, config, token=token, on_event=events)
    where = hf_ref(result.repo_id, result.revision)
    _say(f"✓ Uploaded {directory} → {where}" if result.commits else
         f"✓ Already up to date: {where} holds exactly this dataset")
    _say(f"Commit: {result.commit}")
    _say(f"Visible at: {result.url}")


@click.command("pull")
@click.argument("repo", metavar="ORG/NAME")
@click.option("--revision", default=None, help="Branch, tag or commit (default: main). ORG/NAME@REV works too.")
@click.option("--output", type=click.Path(path_type=Path), default=None,
              help="Directory to create (must not exist); default: the Hugging Face cache.")
@click.option("--split", default=None, help="Fetch only this split's shards (plus metadata.json and README.md).")
@_token_options
def pull(repo: str, revision: str | None, output: Path | None, split: str | None, token: str | None,
         token_file: str | None, log_every: float) -> None:
    """Download a dataset from the Hugging Face Hub and check its checksums.

    With --output the directory appears complete or not at all (an interrupted download is kept
    beside it and resumed by re-running the command). The token: HF_TOKEN is the safe way
    (--token shows in `ps`).

    \b
    whest dataset pull aicrowd/whestbench-public --revision v1 --output ./ds
    whest dataset pull aicrowd/whestbench-public --split holdout --output ./holdout
    """
    with VerbEvents("pull", _SAID, log_every=log_every) as events:
        result = hub_pull.pull_dataset(repo, revision=revision, output=output, split=split,
                              token=read_token(token, token_file), on_event=events)
    where = hf_ref(result.repo_id, result.revision or "main")
    what = f"split {result.split!r} of {where}" if result.split else where
    size = f"{plural(len(result.files), 'file')}, {format_bytes(result.bytes)}"
    _say(f"Cached {what} ({size}) in the Hugging Face cache." if result.cached else
         f"Downloaded {what} ({size}) → {result.path}")
    _say(f"Checksums: {plural(result.verified, 'data file')} verified." if result.verified else
         "Checksums: metadata.json has none (made by whestbench 0.16?); files not verified.")
    _say(f"Location: {result.path}")


COMMANDS = [push, pull]
