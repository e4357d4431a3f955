"""Every command README.md and docs/*.md show runs as written (issue 35: docs/error-bars.md's
`whest dataset calibrate --width W --depth D --target-stderr E` failed, missing --n-mlps and --n-samples).

The rules are tests/helpers/doc_commands.py's (what a documented command is, the small sizes, the skips). In the
default suite every documented ``whest`` command line is parsed by the CLI itself (an unknown verb or flag,
a missing required flag or a bad value fails), the skipped ones too, and every line is either run or
skipped for a listed reason. ``test_the_documented_commands_run`` (slow) runs them: each doc's ```bash
blocks in order in one bash in an empty directory (README's are tests/test_readme.py's tour), then each
``$`` line and inline command in a directory holding the datasets their placeholders name.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from test_readme import shell_env  # noqa: F401  (the fixture: whest on PATH, offline, caches in tmp)

from helpers.doc_commands import (DOCS, PLACEHOLDERS, REPO, SKIP, Doc, collect, command, parse_error, skip_reason, small,
                          variants, whest_argv)


BENCH_TESTS = REPO / "tests" / "benchmarks"


def _assignments(docs: list[Doc]) -> dict[Path, dict[str, str]]:
    """Shell variables a doc's bash lines set (``shape="--n-mlps 8 ..."``), to read the lines that use them."""
    out: dict[Path, dict[str, str]] = {}
    for d in docs:
        m = re.fullmatch(r'(\w+)="([^"$`]*)"', command(d.text).strip()) if d.kind == "bash" else None
        if m:
            out.setdefault(d.path, {})[m[1]] = m[2]
    return out


def _expand(text: str, names: dict[str, str]) -> str:
    return re.sub(r"\$(\w+)|\$\{(\w+)\}", lambda m: names.get(m[1] or m[2], m[0]), text)


def plan(docs: list[Doc] | None = None) -> list[tuple[Doc, str, str | None]]:
    """``(doc, line as run, skip reason or None)`` for every documented command: inline synopses become
    their variants; a line that reads what a skipped line wrote (its ``--output`` or ``> file``) is skipped
    with it."""
    docs = collect() if docs is None else docs
    names = _assignments(docs)
    out, written = [], {}
    for d in docs:
        for text in (variants(d.text) if d.kind == "inline" else [d.text]):
            text = _expand(text, names.get(d.path, {}))
            why = "needs a SLURM cluster" if d.job_script else skip_reason(text)
            if why is None and d.kind == "bash":
                reads = [w for w in written.get(d.path, ()) if w and w in command(text)]
                if reads:
                    why = f"reads what a skipped line wrote ({reads[0]})"
            if why is not None and d.kind == "bash":
                words = command(text).split()
                for k, w in enumerate(words):
                    if w == "--output" and k + 1 < len(words) or w == ">" and k + 1 < len(words):
                        target = words[k + 1].strip("\"'")
                        written.setdefault(d.path, []).append(re.split(r"\$", target)[0].rstrip("-_/") or target)
            out.append((d, text, why))
    return out


def test_every_documented_whest_command_parses():
    """The CLI accepts every documented command line as written (placeholders filled in), skipped or not."""
    bad = []
    for d, text, _ in plan():
        argv = whest_argv(text)
        if argv is not None and (error := parse_error(argv)):
            bad.append(f"{d.where}: {text.strip()[:120]}\n    -> {error}")
    assert not bad, "documented commands the CLI refuses:\n" + "\n".join(bad)


def test_each_documented_command_is_run_or_skipped_for_a_listed_reason():
    listing, reasons = [], set()
    for d, text, why in plan():
        listing.append(f"{d.where} [{d.kind}] {'run' if why is None else 'skip: ' + why}: {text.strip()[:100]}")
        if why is not None:
            reasons.add(why)
        if why and why.startswith("is a benchmark"):  # its own test runs it at small sizes
            script = re.search(r"benchmarks/(\w+)\.py", text)[1]
            assert (BENCH_TESTS / f"test_{script}.py").is_file(), f"{d.where}: no tests/benchmarks/test_{script}.py"
    allowed = set(SKIP) | {r for r in reasons if r.startswith("reads what a skipped line wrote")}
    assert reasons <= allowed, reasons - allowed
    ran = [line for line in listing if "] run:" in line]
    assert len(ran) > 20, "\n".join(listing)
    # the commands this issue found broken now run
    assert any("error-bars.md" in line and "calibrate --n-mlps" in line for line in ran), "\n".join(listing)


def test_the_calibrate_synopsis_in_error_bars_was_refused_and_is_not_any_more():
    old = Doc(DOCS[0], 0, "inline", "whest dataset calibrate --width W --depth D --target-stderr E "
                                    "[--estimator control-variate]")
    assert all(parse_error(whest_argv(text)) == "Missing option '--n-mlps'." for text in variants(old.text))
    (now,) = [d for d in collect() if d.kind == "inline" and "calibrate --n-mlps M" in d.text]
    assert all(parse_error(whest_argv(t)) is None for t in variants(now.text))


def test_the_rules_find_commands_in_every_form(tmp_path):
    bash = "x\n```bash\nwhest dataset bake --n-mlps 2 \\\n    --n-samples 1e9 --width 256 --depth 8 --output ./a   # note\n```\n"
    prompt = "```\n$ whest dataset inspect ./a\nnot a command\n```\n"
    inline = "Run `whest dataset verify DIR [--n-check K]`, a verb's name `whest dataset bake` is not a command.\n"
    path = tmp_path / "probe.md"
    path.write_text(bash + prompt + inline)
    found = collect([path])
    assert [(d.kind, d.text) for d in found] == [
        ("bash", "whest dataset bake --n-mlps 2 --n-samples 1e9 --width 256 --depth 8 --output ./a   # note"),
        ("prompt", "whest dataset inspect ./a"),
        ("inline", "whest dataset verify DIR [--n-check K]")]
    assert variants(found[2].text) == ["whest dataset verify ds", "whest dataset verify ds --n-check 1"]
    assert small(found[0].text).startswith("whest dataset bake --n-mlps 2 --n-samples 4096 --width 8 --depth 2")
    assert PLACEHOLDERS["DIR"] == "ds"


# --- the runs ----------------------------------------------------------------------------------------------


def _script(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


def _fixture_datasets(work: Path, env: dict[str, str]) -> None:
    """What the placeholders name: ``ds`` and ``eval`` a two-split dataset (README's ./eval), ``ds2`` a copy of
    ds's public split; and the seeds file the SLURM recipe's generate-seeds line writes."""
    script = """
whest dataset bake --n-mlps 2 --n-samples 4096 --width 8 --depth 2 --seed 1 --output pub --quiet
whest dataset bake --n-mlps 2 --n-samples 4096 --width 8 --depth 2 --seed 2 --split holdout --config holdout --output hold --quiet
whest dataset combine-splits pub hold --output ds --default-split public
cp -r ds eval
cp -r pub ds2
"""
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=work, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.slow
def test_the_documented_commands_run(tmp_path, shell_env):  # noqa: F811
    """Each doc's bash blocks in order (one bash, an empty directory); then every ``$`` line and inline
    command once, in a directory holding the datasets the placeholders name."""
    env = dict(shell_env)
    bin_dir = Path(env["PATH"].split(":")[0])
    for name, run in (("python", ""), ("torchrun", " -m torch.distributed.run")):  # as a venv puts them on PATH
        wrapper = bin_dir / name
        wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}"{run} "$@"\n')
        wrapper.chmod(0o755)
    failures = []
    planned = plan()
    seen = {small(command(text)).strip() for d, text, why in planned if d.kind == "bash" and why is None
            and d.path != DOCS[0]}  # ran in their doc's script
    for path in DOCS[1:]:  # README.md's blocks: tests/test_readme.py's tour
        lines = [small(text) if why is None else ": " + shlex.quote(text[:60]) for d, text, why in planned
                 if d.path == path and d.kind == "bash"]
        if not any(not line.startswith(": ") for line in lines):
            continue
        work = tmp_path / path.stem
        work.mkdir()
        proc = subprocess.run(["bash", "-euo", "pipefail", "-c", _script(lines)], cwd=work, env=env,
                              capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            failures.append(f"{path.name} (bash blocks): exit {proc.returncode}\n{proc.stderr[-2000:]}")
    work = tmp_path / "spans"
    work.mkdir()
    _fixture_datasets(work, env)
    for d, text, why in planned:
        if d.kind == "bash" or why is not None or small(command(text)).strip() in seen:
            continue
        seen.add(small(command(text)).strip())
        proc = subprocess.run(["bash", "-euo", "pipefail", "-c", small(command(text))], cwd=work, env=env,
                              capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            failures.append(f"{d.where}: {text}: exit {proc.returncode}\n{proc.stdout[-1000:]}{proc.stderr[-2000:]}")
    assert not failures, "\n\n".join(failures)
