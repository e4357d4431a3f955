"""``whest dataset push`` (alias ``upload``) and ``pull`` (alias ``download``): flags -> ``dataset.hub``.

The token is handed to huggingface_hub and never printed; without ``--token`` it comes from
HF_TOKEN or the stored ``hf auth login``.
"""

from __future__ import annotations

from pathlib import Path

import click

from whestbench.cli.common import err, out

_TOKEN_HELP = "Hub token (default: HF_TOKEN, or the one `hf auth login` stored). Never printed or saved."


def _size(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def _files(n: int) -> str:
    return f"{n} file" if n == 1 else f"{n} files"


def _say(text: str) -> None:
    out.print(text, markup=False)


@click.command("push")
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--repo", "repo_id", required=True, metavar="ORG/NAME", help="Hub dataset repo (created if needed).")
@click.option("--tag", default=None, help="Tag the published commit (for example v1); the card links to it.")
@click.option("--message", default=None, help="Commit message (default: 'Upload whestbench dataset').")
@click.option("--private", is_flag=True, help="Create the repo private (an existing public repo is refused).")
@click.option("--token", default=None, metavar="TOKEN", help=_TOKEN_HELP)
def push(directory: Path, repo_id: str, tag: str | None, message: str | None, private: bool, token: str | None) -> None:
    """Publish a complete dataset to the Hugging Face Hub.

    Partial and damaged datasets are refused before anything is sent. Files the Hub already holds
    are skipped, so re-running an interrupted push resumes it; metadata.json and the card (rendered
    for this repo and revision) go last, with the removal of shards an earlier push left behind.

    \b
    whest dataset push ./ds --repo aicrowd/whestbench-public --tag v1
    """
    from whestbench.dataset.hub import hf_ref, push_dataset

    def on_event(e: dict) -> None:
        kind = e["event"]
        if kind == "planned":
            _say(f"Uploading {directory} → {hf_ref(e['repo_id'], e['revision'])}")
            _say(f"Total: {_size(e['bytes'])} ({_files(e['files'])}) — will create repo if needed.")
            if e["ignored"]:
                more = len(e["ignored"]) - 5
                shown = ", ".join(e["ignored"][:5]) + (f" (+{more} more)" if more > 0 else "")
                err.print(f"note: not part of the dataset, not uploaded: {shown}", markup=False)
        elif kind == "compared":
            parts = [f"{e['unchanged']} already on the Hub"] if e["unchanged"] else []
            if e["upload_files"]:
                parts.append(f"uploading {_files(e['upload_files'])} ({_size(e['upload_bytes'])}) "
                             f"in {e['commits']} commit{'s' if e['commits'] != 1 else ''}")
            if e["stale"]:
                parts.append(f"removing {len(e['stale'])} stale file{'s' if len(e['stale']) != 1 else ''} "
                             "from an earlier push")
            _say("Hub: " + ("; ".join(parts) if parts else "nothing to do"))
        elif kind == "commit":
            removed = f", {e['deleted']} removed" if e["deleted"] else ""
            _say(f"  commit {e['index']}/{e['total']}: {_files(e['files'])} ({_size(e['bytes'])}{removed}) "
                 f"→ {e['oid'][:12]}")
        elif kind == "tagged":
            _say(f"Tagged {e['oid'][:12]} as {e['tag']}")

    result = push_dataset(directory, repo_id, tag=tag, message=message, private=private, token=token,
                          on_event=on_event)
    where = hf_ref(result.repo_id, result.revision)
    if result.commits:
        _say(f"✓ Uploaded {directory} → {where}")
    else:
        _say(f"✓ Already up to date: {where} holds exactly this dataset")
    _say(f"Commit: {result.commit}")
    _say(f"Visible at: {result.url}")


@click.command("pull")
@click.argument("repo", metavar="ORG/NAME")
@click.option("--revision", default=None, help="Branch, tag or commit (default: main). ORG/NAME@REV works too.")
@click.option("--output", type=click.Path(path_type=Path), default=None,
              help="Directory to create (must not exist); default: the Hugging Face cache.")
@click.option("--split", default=None, help="Fetch only this split's shards (plus metadata.json and README.md).")
@click.option("--token", default=None, metavar="TOKEN", help=_TOKEN_HELP)
def pull(repo: str, revision: str | None, output: Path | None, split: str | None, token: str | None) -> None:
    """Download a dataset from the Hugging Face Hub and check its checksums.

    With --output the directory appears complete or not at all (an interrupted download is kept
    beside it and resumed by re-running the command).

    \b
    whest dataset pull aicrowd/whestbench-public --revision v1 --output ./ds
    whest dataset pull aicrowd/whestbench-public --split holdout --output ./holdout
    """
    from whestbench.dataset.hub import hf_ref, pull_dataset

    def on_event(e: dict) -> None:
        if e["event"] == "preflight":
            _say(f"Preflight: {_files(e['files'])}, {_size(e['bytes'])} at commit {e['commit'][:12]}.")

    result = pull_dataset(repo, revision=revision, output=output, split=split, token=token, on_event=on_event)
    where = hf_ref(result.repo_id, result.revision or "main")
    what = f"split {result.split!r} of {where}" if result.split else where
    if result.cached:
        _say(f"Cached {what} ({_files(len(result.files))}, {_size(result.bytes)}) in the Hugging Face cache.")
    else:
        _say(f"Downloaded {what} ({_files(len(result.files))}, {_size(result.bytes)}) → {result.path}")
    if result.verified:
        _say(f"Checksums: {_files(result.verified).replace('file', 'data file')} verified.")
    else:
        _say("Checksums: metadata.json has none (made by whestbench 0.16?); files not verified.")
    _say(f"Location: {result.path}")


COMMANDS = [push, pull]
