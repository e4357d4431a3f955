"""The operator's and attacker's adversarial round (issue 34): secrets in every Hub setting, resource bombs in
every file the tool reads, hostile inputs to every verb, tried as a tired operator and an attacker would.

    .venv/bin/python benchmarks/hostile_round.py [--only WORD] [--json FILE] [--keep DIR] [--src DIR]

``--src`` runs the cases against another tree's ``src/`` (``git archive main src | tar -x -C /tmp/main``:
the round before and after a change, on the same fixtures).

Each case runs in a fresh interpreter (huggingface_hub reads its settings once, when imported), in its own
directory, under a 120 s timeout and an 8 GiB address-space limit, with every Hugging Face variable
cleared but the case's own and the Hub at a closed local port (``http://127.0.0.1:9``: nothing leaves the
machine; ``WHEST_HUB_RETRY_SECONDS=0``). The verdict, first that applies:

- ``secret``: a secret of the case (a password, a token) appears in stdout or stderr;
- ``crash``: killed, timed out, over 2 GiB of peak RSS, or an exit code that is no verb's (0, 1, 2, 75);
- ``raw``: a traceback, huggingface_hub's ``Error importing``, a Python repr or message (``PosixPath(``,
  ``Cannot specify``, ``object has no attribute``, ...), the CLI's fallback for an unknown exception
  (``set WHEST_DEBUG=1 for a traceback``), more than one ``error:`` line, or an API call raising an
  exception that is no ``whestbench.errors`` class;
- ``silent``: exit 0 (or no exception) where the case must be refused; ``silent-doc`` where docs/cli.md
  states that it passes (a forgery rewritten to match, which costs compute: left to ``--spot-check``);
- ``misleading``: another exit code than the case's, or a message without what it must say;
- ``held``: otherwise.

It prints one markdown table (case, what was tried, verdict, exit code, wall seconds, peak RSS) and the
count per verdict; the exit code is 1 if any case is not ``held`` or ``silent-doc``. 178 cases (45 of them the careful
forger's, benchmarks/forgery_round.py), about 7 minutes on a
2-core machine. Not part of the test suite (every finding became a test: tests/test_hubenv.py,
tests/test_text.py, tests/format/test_card_given.py, tests/hub/test_api_arguments.py,
tests/bake/test_status_hostile.py, tests/bake/test_cost.py, tests/verify/test_trail_state.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
CLOSED = "http://127.0.0.1:9"  # a closed port on this machine: a Hub call fails at once, nothing leaves
TOKEN = "hf_QwErTyUiOpAsDfGhJkLzXcVbNm123456"
PW = "pw9Secret"


@dataclass
class Case:
    name: str
    group: str
    what: str
    argv: list[str] | None = None  # whest's arguments, or
    code: str | None = None  # a Python snippet (the API), its body run under API_WRAP
    env: dict[str, str] = field(default_factory=dict)
    setup: Callable[[Path, Path], None] | None = None  # (fixtures root, the case's directory)
    rc: tuple[int, ...] = (2,)  # the exit codes that hold (an API snippet: 1 when it raised a whestbench error)
    want: str = ""  # a regex the output must hold
    secrets: tuple[str, ...] = ()
    stdin: bytes | None = None
    cwd: str = ""  # run inside this subdirectory of the case's directory
    documented: str = ""  # a pass docs/cli.md states (a forgery left to --spot-check): exit 0 is "silent-doc"


API_WRAP = """
import sys
try:
{body}
    print("RESULT ok")
except BaseException as e:
    mod = type(e).__module__
    print(f"EXC {{mod}}.{{type(e).__name__}}: {{e}}")
    sys.exit(1 if mod == "whestbench.errors" else 3)
"""

_MEASURE = ("import resource, subprocess, sys; rc = subprocess.call(sys.argv[1:]); "
            "sys.stderr.write(f'\\nRSS_KIB {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss} RC {rc}\\n')")
"""Runs the case's command and reports its peak RSS and exit code as stderr's last line."""

_RAW = re.compile(r"Traceback \(most recent|Error importing|PosixPath\(|Cannot specify|object has no attribute|"
                  r"not subscriptable|unhashable type|expected string or bytes|positional argument|"
                  r"set WHEST_DEBUG=1 for a traceback|quote_from_bytes|Exception ignored")


# --------------------------------------------------------------------------------------------------
# Fixtures (built once) and the edits the cases make to copies of them


def build_fixtures(root: Path) -> None:
    from whestbench import create_dataset
    from whestbench.bake.pipeline import BakeConfig, bake
    from whestbench.errors import BakeInterrupted

    create_dataset(2, 20_000, 8, 2, seed=1, output_path=root / "ds")
    for k in range(2):
        create_dataset(4, 3000, 4, 2, seed=5, mlp_range=(2 * k, 2 * k + 2), output_path=root / f"p{k}")
    create_dataset(2, 20_000, 8, 2, seed=6, split="holdout", config="holdout", output_path=root / "holdout")
    stop = threading.Event()
    try:
        bake(BakeConfig(n_mlps=4, n_samples=400_000, width=16, depth=3, seed=5, max_threads=1, checkpoint_every=0.05,
                        output=root / "stopped"), on_event=lambda e: e.kind == "unit_done" and stop.set(), stop=stop)
    except BakeInterrupted:
        pass
    stop = threading.Event()
    try:  # random seeds: the bake keeps them in auto-seeds.json
        bake(BakeConfig(n_mlps=2, n_samples=400_000, width=16, depth=3, max_threads=1, checkpoint_every=0.05,
                        output=root / "rand"), on_event=lambda e: e.kind == "unit_done" and stop.set(), stop=stop)
    except BakeInterrupted:
        pass
    (root / "token").write_text(TOKEN + "\n")


STOPPED_ARGV = ["dataset", "bake", "--n-mlps", "4", "--n-samples", "400000", "--width", "16", "--depth", "3",
                "--seed", "5", "--max-threads", "1", "--output", "stopped"]


def copy(*names: str) -> Callable[[Path, Path], None]:
    def setup(root: Path, here: Path) -> None:
        for n in names:
            if (root / n).exists():
                shutil.copytree(root / n, here / n, symlinks=True)
            if (root / f"{n}.whest-work").exists():
                shutil.copytree(root / f"{n}.whest-work", here / f"{n}.whest-work")
    return setup


def then(*steps: Callable[[Path, Path], None]) -> Callable[[Path, Path], None]:
    def setup(root: Path, here: Path) -> None:
        for s in steps:
            s(root, here)
    return setup


def resign(here: Path, name: str = "ds") -> None:
    from whestbench.format.checksums import bind_checksums, dataset_checksums

    md = json.loads((here / name / "metadata.json").read_text())
    md.pop("checksums", None)
    bind_checksums(md, dataset_checksums(here / name))
    (here / name / "metadata.json").write_text(json.dumps(md))


def edit_md(update: dict, name: str = "ds", sign: bool = True) -> Callable[[Path, Path], None]:
    def setup(root: Path, here: Path) -> None:
        md = json.loads((here / name / "metadata.json").read_text())
        md.update(update)
        (here / name / "metadata.json").write_text(json.dumps(md))
        if sign:
            resign(here, name)
    return setup


def sparse(rel: str, size: int) -> Callable[[Path, Path], None]:
    def setup(root: Path, here: Path) -> None:
        p = here / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "ab") as f:
            f.truncate(size)
    return setup


def write(rel: str, data: bytes | str) -> Callable[[Path, Path], None]:
    def setup(root: Path, here: Path) -> None:
        p = here / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data.encode() if isinstance(data, str) else data)
    return setup


def first_unit(ext: str) -> Callable[[Path, Path], None]:
    def setup(root: Path, here: Path) -> None:
        units = sorted((here / "stopped.whest-work" / "units").glob(f"*.{ext}"))
        if not units:  # a checkpoint of the first unit stands in
            units = sorted((here / "stopped.whest-work" / "units").glob("*"))
        with open(units[0], "r+b") as f:
            f.truncate(5 * 1024**3)
    return setup


def resign_plan(update: dict) -> Callable[[Path, Path], None]:
    def setup(root: Path, here: Path) -> None:
        from whestbench.work.ledger import identity_digest

        p = here / "stopped.whest-work" / "plan.json"
        plan = json.loads(p.read_text())
        plan["identity"].update(update)
        plan["digest"] = identity_digest(plan["identity"])
        p.write_text(json.dumps(plan))
    return setup


def trail_state(text: str, row: int = 1) -> Callable[[Path, Path], None]:
    def setup(root: Path, here: Path) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = here / "ds" / "audit" / "public.parquet"
        t = pq.read_table(path)
        col = t.column("pcg64_state").to_pylist()
        col[row] = text
        pq.write_table(t.set_column(t.schema.get_field_index("pcg64_state"), "pcg64_state", pa.array(col, pa.string())),
                       path)
        resign(here)
    return setup


def footer_bomb(root: Path, here: Path) -> None:
    """The shard's footer length field claims 2 GiB: a reader that trusts it allocates that much."""
    shard = next((here / "ds" / "data").glob("*.parquet"))
    data = bytearray(shard.read_bytes())
    data[-8:-4] = (2**31 - 1).to_bytes(4, "little")
    shard.write_bytes(bytes(data))
    resign(here)


def status_json(doc: dict) -> Callable[[Path, Path], None]:
    def setup(root: Path, here: Path) -> None:
        p = here / "stopped.whest-work" / "status.json"
        p.write_text(json.dumps({"format": "whestbench-status/1", **doc}))
    return setup


ALIAS_BOMB = "\n".join(["a: &a [" + ",".join(['"lol"'] * 9) + "]"] +
                       [f"{c}: &{c} [" + ",".join([f"*{p}"] * 9) + "]" for p, c in zip("abcdefgh", "bcdefghi")]) + "\n"
HUB = {"HF_ENDPOINT": CLOSED}


def cases() -> list[Case]:
    c: list[Case] = []
    add = c.append
    # ---------------------------------------------------------------- secrets in every Hub setting
    for ep, sec, label in ((f"alice:{PW}@127.0.0.1:9", PW, "no scheme"),
                           (f"http://alice:p/{PW}@127.0.0.1:9", PW, "password holding '/'"),
                           (f"http://127.0.0.1:9/?token={PW}", PW, "query token"),
                           ("http://127.0.0.1:99999", "", "port out of range")):
        env = {"HF_ENDPOINT": ep}
        for verb, argv in (("inspect", ["dataset", "inspect", "org/name"]), ("pull", ["dataset", "pull", "org/name"]),
                           ("push", ["dataset", "push", "ds", "--repo", "org/name"])):
            add(Case(f"endpoint-{label}-{verb}", "secret", f"HF_ENDPOINT ({label}) → {verb}", argv=argv, env=env,
                     setup=copy("ds") if verb == "push" else None, want=r"HF_ENDPOINT=.* cannot be used for the Hub",
                     secrets=(sec,) if sec else ()))
        add(Case(f"endpoint-{label}-load", "secret", f"HF_ENDPOINT ({label}) → load_dataset('org/name')",
                 code="from whestbench import load_dataset; load_dataset('org/name')", env=env, rc=(1,),
                 want=r"UsageError: HF_ENDPOINT=", secrets=(sec,) if sec else ()))
    for ep, label in ((f"http://alice:p/{PW}@127.0.0.1:9", "'/' in password"), ("http://127.0.0.1:99999", "bad port"),
                      ("http://[::1", "bad IPv6")):
        env = {"HF_ENDPOINT": ep}
        add(Case(f"local-verify-{label}", "secret", f"HF_ENDPOINT ({label}) → local verify", env=env, setup=copy("ds"),
                 argv=["dataset", "verify", "ds"], rc=(0,), want=r"^OK: all", secrets=(PW,)))
        add(Case(f"local-merge-{label}", "secret", f"HF_ENDPOINT ({label}) → local merge", env=env,
                 setup=copy("p0", "p1"), argv=["dataset", "merge", "p0", "p1", "--output", "m"], rc=(0,), want="Wrote|✓"))
        add(Case(f"local-load-{label}", "secret", f"HF_ENDPOINT ({label}) → load_dataset(local dir)", env=env,
                 setup=copy("ds"), code="from whestbench import load_dataset; print(len(load_dataset('ds')))",
                 rc=(0,), want="RESULT ok"))
    add(Case("local-inspect-bad-endpoint", "secret", "HF_ENDPOINT with '/' in the password → inspect DIR",
             env={"HF_ENDPOINT": f"http://alice:p/{PW}@127.0.0.1:9"}, setup=copy("ds"), argv=["dataset", "inspect", "ds"],
             rc=(0,), want="integrity", secrets=(PW,)))
    add(Case("local-combine-bad-endpoint", "secret", "HF_ENDPOINT port 99999 → combine-splits",
             env={"HF_ENDPOINT": "http://127.0.0.1:99999"}, setup=copy("ds", "holdout"),
             argv=["dataset", "combine-splits", "ds", "holdout", "--output", "c"], rc=(0,), want="prepared Arrow"))
    add(Case("dry-run-bad-endpoint", "secret", "HF_ENDPOINT no scheme → push --dry-run (refused as the push is)",
             env={"HF_ENDPOINT": f"alice:{PW}@x:9"}, setup=copy("ds"),
             argv=["dataset", "push", "ds", "--repo", "org/name", "--dry-run"], want="HF_ENDPOINT=.* cannot be used",
             secrets=(PW,)))
    add(Case("dry-run-bad-endpoint-token-source", "secret", "HF_ENDPOINT port 99999, HF_TOKEN set → push --dry-run",
             env={"HF_ENDPOINT": "http://127.0.0.1:99999", "HF_TOKEN": TOKEN}, setup=copy("ds"),
             argv=["dataset", "push", "ds", "--repo", "org/name", "--dry-run"], want="HF_ENDPOINT=.* cannot be used",
             secrets=(TOKEN,)))
    add(Case("endpoint-empty", "secret", "HF_ENDPOINT='' → pull", env={"HF_ENDPOINT": ""},
             argv=["dataset", "pull", "org/name"], want="HF_ENDPOINT='' cannot be used for the Hub: it is empty"))
    add(Case("etag-timeout", "secret", "HF_HUB_ETAG_TIMEOUT=abc → local verify", env={"HF_HUB_ETAG_TIMEOUT": "abc"},
             setup=copy("ds"), argv=["dataset", "verify", "ds"], rc=(0,), want="^OK"))
    add(Case("etag-timeout-hub", "secret", "HF_HUB_DOWNLOAD_TIMEOUT=1.5 → pull",
             env={"HF_HUB_DOWNLOAD_TIMEOUT": "1.5"}, argv=["dataset", "pull", "org/name"],
             want="HF_HUB_DOWNLOAD_TIMEOUT='1.5' cannot be used"))
    add(Case("endpoint-at-in-password", "secret", "HF_ENDPOINT password holding an unescaped '@' → inspect (closed port)",
             env={"HF_ENDPOINT": f"http://alice:p@{PW}@127.0.0.1:9"}, argv=["dataset", "inspect", "org/name"], rc=(1,),
             want=r"could not reach the Hugging Face Hub at http://\*\*\*@127\.0\.0\.1:9", secrets=(PW,)))
    add(Case("endpoint-at-in-password-load", "secret", "HF_ENDPOINT password holding '@' → load_dataset('org/name')",
             env={"HF_ENDPOINT": f"http://alice:p@{PW}@127.0.0.1:9"}, rc=(1,),
             code="from whestbench import load_dataset; load_dataset('org/name')", want="HubError: .*could not reach",
             secrets=(PW,)))
    add(Case("pct-userinfo", "secret", "HF_ENDPOINT percent-encoded userinfo → inspect (reaches the closed port)",
             env={"HF_ENDPOINT": "http://al%69ce:p%40ss9Secret@127.0.0.1:9"}, argv=["dataset", "inspect", "org/name"],
             rc=(1,), want=r"could not reach the Hugging Face Hub at http://\*\*\*@127\.0\.0\.1:9",
             secrets=("p%40ss9Secret", "p@ss9Secret")))
    add(Case("proxy-password", "secret", "HTTPS_PROXY with a password holding '/' → inspect",
             env={**HUB, "HTTP_PROXY": f"http://bob:x/{PW}@127.0.0.1:9", "HTTPS_PROXY": f"http://bob:x/{PW}@127.0.0.1:9"},
             argv=["dataset", "inspect", "org/name"], want="HTTPS?_PROXY=.* cannot be used for the Hub", secrets=(PW,)))
    add(Case("proxy-password-ok", "secret", "HTTP_PROXY with a password (closed port) → pull",
             env={**HUB, "HTTP_PROXY": f"http://bob:{PW}@127.0.0.1:9"}, argv=["dataset", "pull", "org/name"], rc=(1,),
             want="could not reach", secrets=(PW,)))
    add(Case("hf-token-debug", "secret", "HF_TOKEN set, WHEST_DEBUG=1 → pull (closed port)",
             env={**HUB, "HF_TOKEN": TOKEN, "WHEST_DEBUG": "1"}, argv=["dataset", "pull", "org/name"], rc=(1,),
             want="could not reach", secrets=(TOKEN, TOKEN[3:])))
    add(Case("token-flag-debug", "secret", "--token T, WHEST_DEBUG=1 → pull", env={**HUB, "WHEST_DEBUG": "1"},
             argv=["dataset", "pull", "org/name", "--token", TOKEN], rc=(1,), want="could not reach",
             secrets=(TOKEN, TOKEN[3:])))
    add(Case("token-file-push", "secret", "--token-file → push (closed port)", env=HUB, setup=copy("ds"),
             argv=["dataset", "push", "ds", "--repo", "org/name", "--token-file", str("TOKENFILE")], rc=(1,),
             want="could not reach", secrets=(TOKEN, TOKEN[3:])))
    add(Case("token-stdin", "secret", "--token-file - (the token on stdin) → pull (closed port)", env=HUB,
             argv=["dataset", "pull", "org/name", "--token-file", "-"], stdin=(TOKEN + "\n").encode(), rc=(1,),
             want="could not reach", secrets=(TOKEN, TOKEN[3:])))
    add(Case("token-with-space", "secret", "--token 'hf_… x' (pasted with a space)", env=HUB,
             argv=["dataset", "pull", "org/name", "--token", TOKEN + " x"], want="the Hub token must be one word",
             secrets=(TOKEN, TOKEN[3:])))
    add(Case("token-api-newline", "secret", "pull_dataset(token='hf_…\\n')", env=HUB, rc=(1,),
             code=f"from whestbench.hub.pull import pull_dataset; pull_dataset('org/name', token={TOKEN + chr(10)!r})",
             want="the Hub token must be one word", secrets=(TOKEN,)))
    add(Case("repo-url-creds", "secret", "pull https://alice:PW@huggingface.co/datasets/org/name", env=HUB,
             argv=["dataset", "pull", f"https://alice:{PW}@huggingface.co/datasets/org/name"],
             want="is not a Hub dataset id", secrets=(PW,)))
    add(Case("repo-bare-creds", "secret", "pull alice:PW@org/name", env=HUB,
             argv=["dataset", "pull", f"alice:{PW}@org/name"], want="is not a Hub dataset id", secrets=(PW,)))
    add(Case("repo-api-creds", "secret", "load_dataset('https://alice:PW@hf.co/org/name') (the exception text)",
             env=HUB, rc=(1,), code=f"from whestbench import load_dataset; load_dataset('https://alice:{PW}@hf.co/o/n')",
             want="is not a Hub dataset id", secrets=(PW,)))
    add(Case("revision-token", "secret", "pull org/name --revision hf_… (a token pasted as revision)", env=HUB,
             argv=["dataset", "pull", "org/name", "--revision", TOKEN], rc=(1,), want="could not reach",
             secrets=(TOKEN, TOKEN[3:])))
    add(Case("homepage-creds-push", "secret", "push --dry-run --homepage https://user:PW@host/", setup=copy("ds"),
             argv=["dataset", "push", "ds", "--repo", "org/name", "--dry-run", "--homepage", f"https://user:{PW}@h.org/"],
             want="--homepage holds what looks like a credential", secrets=(PW,)))
    add(Case("homepage-creds-bake", "secret", "bake --homepage https://TOKEN@host/",
             argv=["dataset", "bake", "--n-mlps", "1", "--n-samples", "100", "--width", "2", "--depth", "1", "--seed", "1",
                   "--output", "o", "--homepage", f"https://{TOKEN}@h.org/"],
             want="--homepage holds what looks like a credential", secrets=(TOKEN,)))
    add(Case("card-file-badge-creds", "secret", "--card FILE with a badge URL holding a password", setup=then(
        copy("ds"), write("card.yaml", f"badges:\n  - {{label: x, url: 'https://u:{PW}@h.org/b'}}\n")),
        argv=["dataset", "push", "ds", "--repo", "org/name", "--dry-run", "--card", "card.yaml"],
        want="badges holds what looks like a credential", secrets=(PW,)))
    add(Case("card-api-creds", "secret", "plan_push(card={'homepage': 'https://u:PW@h/'})", setup=copy("ds"), rc=(1,),
             code=f"from whestbench.hub.push import plan_push; plan_push('ds', 'o/n', card={{'homepage': 'https://u:{PW}@h.org/'}})",
             want="homepage holds what looks like a credential", secrets=(PW,)))
    add(Case("pretty-name-token", "secret", "merge --pretty-name 'set hf_…'", setup=copy("p0", "p1"),
             argv=["dataset", "merge", "p0", "p1", "--output", "m", "--pretty-name", f"set {TOKEN}"],
             want="--pretty-name holds what looks like a credential", secrets=(TOKEN,)))
    add(Case("message-token", "secret", "push --message 'token hf_…'", env=HUB, setup=copy("ds"),
             argv=["dataset", "push", "ds", "--repo", "org/name", "--message", f"token {TOKEN}"],
             want="--message holds what looks like a credential", secrets=(TOKEN,)))
    add(Case("metadata-pretty-name-token", "secret", "a 0.16 pretty_name holding a token, re-signed → push --dry-run",
             setup=then(copy("ds"), edit_md({"pretty_name": f"set {TOKEN}"})),
             argv=["dataset", "push", "ds", "--repo", "org/name", "--dry-run"], rc=(1,),
             want="holds what looks like a credential", secrets=(TOKEN,)))
    add(Case("metadata-card-creds", "secret", "metadata card.homepage with a password, re-signed → verify",
             setup=then(copy("ds"), edit_md({"card": {"homepage": f"https://u:{PW}@h.org/"}})),
             argv=["dataset", "verify", "ds"], rc=(1,), want="metadata", secrets=(PW,)))
    # ---------------------------------------------------------------- resource bombs
    add(Case("token-file-dev-zero", "bomb", "--token-file /dev/zero", argv=["dataset", "pull", "org/name", "--token-file",
                                                                            "/dev/zero"], want="more than any token file"))
    add(Case("token-stdin-1gb", "bomb", "--token-file - fed 200 MB", argv=["dataset", "pull", "org/name", "--token-file", "-"],
             stdin=b"x" * (200 << 20), want="more than any token file"))
    add(Case("card-dev-zero", "bomb", "--card /dev/zero", setup=copy("ds"),
             argv=["dataset", "push", "ds", "--repo", "o/n", "--dry-run", "--card", "/dev/zero"], want="not a regular file"))
    add(Case("card-alias-bomb", "bomb", f"--card: a {len(ALIAS_BOMB)}-byte YAML alias bomb", setup=then(
        copy("ds"), write("bomb.yaml", ALIAS_BOMB)), argv=["dataset", "push", "ds", "--repo", "o/n", "--dry-run", "--card",
                                                          "bomb.yaml"], want="aliases"))
    add(Case("card-huge", "bomb", "--card: a 50 MB sparse file", setup=then(copy("ds"), sparse("big.yaml", 50 << 20)),
             argv=["dataset", "push", "ds", "--repo", "o/n", "--dry-run", "--card", "big.yaml"], want="more than any card file"))
    add(Case("card-nested", "bomb", "--card: YAML nested 50,000 deep", setup=then(copy("ds"), write("n.yaml", "a: " + "[" * 50000)),
             argv=["dataset", "push", "ds", "--repo", "o/n", "--dry-run", "--card", "n.yaml"], want="not UTF-8 YAML or JSON"))
    add(Case("readme-alias-bomb", "bomb", "README.md front matter: an alias bomb → verify", setup=then(
        copy("ds"), write("ds/README.md", "---\n" + ALIAS_BOMB + "---\n")), argv=["dataset", "verify", "ds"], rc=(1,),
        want="card"))
    add(Case("readme-huge", "bomb", "README.md: 200 MB sparse → verify", setup=then(copy("ds"), sparse("ds/README.md", 200 << 20)),
             argv=["dataset", "verify", "ds"], rc=(1,), want="card"))
    add(Case("seeds-dev-zero", "bomb", "--mlp-seeds /dev/zero",
             argv=["dataset", "bake", "--n-mlps", "2", "--n-samples", "10", "--width", "2", "--depth", "1", "--mlp-seeds",
                   "/dev/zero", "--output", "o"], want="character device"))
    add(Case("seeds-nested", "bomb", "--mlp-seeds: JSON nested 100,000 deep", setup=write("s.json", "[" * 100000),
             argv=["dataset", "bake", "--n-mlps", "2", "--n-samples", "10", "--width", "2", "--depth", "1", "--mlp-seeds",
                   "s.json", "--output", "o"], want="nested too deeply|not valid JSON"))
    add(Case("seeds-long-int", "bomb", "--mlp-seeds: an integer of 100,000 digits", setup=write("s.json", "[" + "9" * 100000 + "]"),
             argv=["dataset", "bake", "--n-mlps", "1", "--n-samples", "10", "--width", "2", "--depth", "1", "--mlp-seeds",
                   "s.json", "--output", "o"], want="not a usable seed|seed"))
    add(Case("plan-6gb-resume", "bomb", "plan.json 6 GB sparse → resume", setup=then(copy("stopped"),
                                                                                  sparse("stopped.whest-work/plan.json", 6 << 30)),
             argv=STOPPED_ARGV, want="more than any plan.json holds"))
    add(Case("plan-6gb-status", "bomb", "plan.json 6 GB sparse → status", setup=then(copy("stopped"),
                                                                                  sparse("stopped.whest-work/plan.json", 6 << 30)),
             argv=["dataset", "status", "stopped"], rc=(0,), want="more than any plan.json holds"))
    add(Case("plan-fifo", "bomb", "plan.json a FIFO → status", setup=then(
        copy("stopped"), lambda r, h: ((h / "stopped.whest-work" / "plan.json").unlink(),
                                        os.mkfifo(h / "stopped.whest-work" / "plan.json"))),
        argv=["dataset", "status", "stopped"], rc=(0,), want="unreadable, damaged"))
    add(Case("unit-5gb-status", "bomb", "a unit file 5 GB sparse → status", setup=then(copy("stopped"), first_unit("unit")),
             argv=["dataset", "status", "stopped"], rc=(0,), want="damaged files"))
    add(Case("unit-5gb-resume", "bomb", "a unit file 5 GB sparse → resume", setup=then(copy("stopped"), first_unit("unit")),
             argv=STOPPED_ARGV, rc=(0,), want="✓ Wrote"))
    add(Case("ckpt-5gb-status", "bomb", "a checkpoint 5 GB sparse → status", setup=then(copy("stopped"), first_unit("ckpt")),
             argv=["dataset", "status", "stopped"], rc=(0,), want="damaged files|units finished"))
    add(Case("lock-5gb", "bomb", "lock 5 GB sparse → status", setup=then(copy("stopped"), sparse("stopped.whest-work/lock", 5 << 30)),
             argv=["dataset", "status", "stopped"], rc=(0,), want="stopped"))
    add(Case("status-json-1gb", "bomb", "status.json 1 GB sparse → status", setup=then(
        copy("stopped"), sparse("stopped.whest-work/status.json", 1 << 30)), argv=["dataset", "status", "stopped"], rc=(0,),
        want="units finished"))
    add(Case("status-world-1e9", "bomb", "status.json world_size 10^9 → status", setup=then(
        copy("stopped"), status_json({"world_size": 10**9, "ranks_recorded_utc": "2026-11-27T10:00:05Z", "ranks": {}})),
        argv=["dataset", "status", "stopped"], rc=(0,), want="units finished"))
    add(Case("status-world-1e9-json", "bomb", "status.json world_size 10^9 → status --json", setup=then(
        copy("stopped"), status_json({"world_size": 10**9, "ranks_recorded_utc": "2026-11-27T10:00:05Z", "ranks": {}})),
        argv=["dataset", "status", "stopped", "--json"], rc=(0,), want='"state"'))
    add(Case("status-many-ranks", "bomb", "status.json with 100,000 rank entries → status", setup=then(
        copy("stopped"), status_json({"world_size": 100_000, "ranks_recorded_utc": "2026-11-27T10:00:05Z", "ranks": {
            str(r): {"last_heartbeat_utc": "2026-11-27T10:00:04Z", "host": "n", "pid": r} for r in range(100_000)}})),
        argv=["dataset", "status", "stopped"], rc=(0,), want="rank 99999"))
    add(Case("seeds-file-6gb", "bomb", "auto-seeds.json 6 GB sparse → resume", setup=then(
        copy("rand"), sparse("rand.whest-work/auto-seeds.json", 6 << 30)),
        argv=["dataset", "bake", "--n-mlps", "2", "--n-samples", "400000", "--width", "16", "--depth", "3", "--max-threads",
              "1", "--output", "rand"], want="more than any seed file"))
    add(Case("metadata-200mb", "bomb", "metadata.json 200 MB sparse → verify", setup=then(copy("ds"), sparse("ds/metadata.json", 200 << 20)),
             argv=["dataset", "verify", "ds"], rc=(1,), want="more than any metadata.json holds"))
    add(Case("metadata-200mb-inspect", "bomb", "metadata.json 200 MB sparse → inspect", setup=then(
        copy("ds"), sparse("ds/metadata.json", 200 << 20)), argv=["dataset", "inspect", "ds"], rc=(1,),
        want="more than any metadata.json holds"))
    add(Case("metadata-200mb-load", "bomb", "metadata.json 200 MB sparse → load_dataset", setup=then(
        copy("ds"), sparse("ds/metadata.json", 200 << 20)), code="from whestbench import load_dataset; load_dataset('ds')",
        rc=(1,), want="more than any metadata.json holds"))
    add(Case("metadata-nested", "bomb", "metadata.json nested 100,000 deep → verify", setup=then(
        copy("ds"), write("ds/metadata.json", "[" * 100000)), argv=["dataset", "verify", "ds"], rc=(1,), want="nested too deeply"))
    add(Case("metadata-fifo", "bomb", "metadata.json a FIFO → inspect", setup=then(
        copy("ds"), lambda r, h: ((h / "ds" / "metadata.json").unlink(), os.mkfifo(h / "ds" / "metadata.json"))),
        argv=["dataset", "inspect", "ds"], rc=(1,), want="not a regular file"))
    add(Case("metadata-width-1e9", "bomb", "metadata width 10^9, re-signed → verify", setup=then(
        copy("ds"), edit_md({"width": 10**9})), argv=["dataset", "verify", "ds"], rc=(1,), want="✗|error"))
    add(Case("metadata-n-mlps-1e12", "bomb", "metadata n_mlps 10^12, re-signed → inspect", setup=then(
        copy("ds"), edit_md({"n_mlps": 10**12})), argv=["dataset", "inspect", "ds"], rc=(0, 1), want="."))
    add(Case("footer-bomb", "bomb", "a shard's footer length 2 GiB, re-signed → verify", setup=then(copy("ds"), footer_bomb),
             argv=["dataset", "verify", "ds"], rc=(1,), want="✗"))
    add(Case("footer-bomb-load", "bomb", "a shard's footer length 2 GiB, re-signed → load_dataset", setup=then(
        copy("ds"), footer_bomb), code="from whestbench import load_dataset; load_dataset('ds')", rc=(1,), want="EXC whestbench"))
    add(Case("trail-garbage", "bomb", "the audit trail replaced by 10 MB of zeros, re-signed → verify", setup=then(
        copy("ds"), write("ds/audit/public.parquet", b"\0" * (10 << 20)), lambda r, h: resign(h)),
        argv=["dataset", "verify", "ds"], rc=(1,), want="trail"))
    add(Case("spot-record-1gb", "bomb", "a 1 GB sparse spot-check record in the cache → verify --spot-check", setup=then(
        copy("ds"), sparse("cache/spot-0000000000000000.json", 1 << 30)),
        argv=["dataset", "verify", "ds", "--spot-check", "2", "--recompute-dir", "cache"], rc=(0,), want="spot-check"))
    # ---------------------------------------------------------------- raw errors, misleading output
    for text, label in (("{}", "{}"), ("null", "null"), ("-5", "-5"), ("1e400", "1e400")):
        add(Case(f"trail-state-{label}", "raw", f"trail pcg64_state {label} (segment 1), re-signed → verify --spot-check",
                 setup=then(copy("ds"), trail_state(text)), argv=["dataset", "verify", "ds", "--spot-check", "8", "--no-cache"],
                 rc=(1,), want="pcg64_state"))
    add(Case("plan-string-numbers-status", "raw", "plan.json n_samples '400000', re-signed → status", setup=then(
        copy("stopped"), resign_plan({"n_samples": "400000"})), argv=["dataset", "status", "stopped"], rc=(0,),
        want="which no bake writes"))
    add(Case("plan-string-numbers-resume", "raw", "plan.json n_samples '400000', re-signed → resume", setup=then(
        copy("stopped"), resign_plan({"n_samples": "400000"})), argv=STOPPED_ARGV, want="holds results of a different bake"))
    add(Case("plan-corrupt-status", "raw", "plan.json cut short → status", setup=then(
        copy("stopped"), write("stopped.whest-work/plan.json", '{"format": "whestbench-plan/2", "ident')),
        argv=["dataset", "status", "stopped"], rc=(0,), want="unreadable, damaged"))
    for key, value in (("n_samples", "20000"), ("n_mlps", "2"), ("width", "8")):
        for verb in ("status", "inspect", "verify"):
            add(Case(f"md-string-{key}-{verb}", "raw", f"complete dataset, metadata {key} {value!r} (re-signed) → {verb}",
                     setup=then(copy("ds"), edit_md({key: value})), argv=["dataset", verb, "ds"],
                     rc=(1,) if verb == "verify" else (0,),
                     want={"status": ".", "inspect": "metadata: INVALID", "verify": "is not a positive integer"}[verb]))
    for arg, verb in (("''", "status"), ("/", "status"), ("''", "verify"), ("''", "inspect"), ("''", "push")):
        argv = ["dataset", verb, "" if arg == "''" else arg] + (["--repo", "o/n", "--dry-run"] if verb == "push" else [])
        add(Case(f"empty-{verb}-{arg}", "raw", f"{verb} {arg}", argv=argv, want="empty path|no bake's output|names no"))
    add(Case("lock-escapes", "raw", "lock host/pid/start holding escape codes → status", setup=then(
        copy("stopped"), write("stopped.whest-work/lock", json.dumps({"pid": "1\x1b]0;pwned\x07", "host": "vm\x1b[2J",
                                                                      "started": "\x1b[31mnow\x9b", "command": "x"}))),
        argv=["dataset", "status", "stopped"], rc=(0,), want="last run: pid 1 on host vm, started now"))
    add(Case("ranks-escapes", "raw", "status.json rank host holding escape codes → status", setup=then(
        copy("stopped"), status_json({"world_size": 2, "ranks_recorded_utc": "2026-11-27T10:00:05Z", "ranks": {
            "1": {"last_heartbeat_utc": "2026-11-27T10:00:04Z", "host": "n\x1b[2J\x1b]0;x\x07", "pid": 3}}})),
        argv=["dataset", "status", "stopped"], rc=(0,), want="rank 1: on n "))
    add(Case("api-card-js", "raw", "plan_push(card={'homepage': 'javascript:alert(1)'})", setup=copy("ds"), rc=(1,),
             code="from whestbench.hub.push import plan_push; plan_push('ds', 'o/n', card={'homepage': 'javascript:alert(1)'})",
             want="homepage must be an http"))
    add(Case("api-card-license", "raw", "BakeConfig(card={'license': 'bogus'})", rc=(1,),
             code="from whestbench.bake.plan import BakeConfig; BakeConfig(n_mlps=1, n_samples=9, width=2, depth=1, output='o', card={'license': 'bogus'})",
             want="license must be"))
    add(Case("api-card-bidi", "raw", "merge_datasets(card={'pretty_name': 'a\\u202eb'})", setup=copy("p0", "p1"), rc=(1,),
             code="from whestbench import merge_datasets; merge_datasets(['p0', 'p1'], output_dir='m', card={'pretty_name': 'a\\u202eb'})",
             want="pretty_name must be one line"))
    add(Case("api-card-preset", "raw", "plan_push(card='whestbench-organisers')", setup=copy("ds"), rc=(0,),
             code="from whestbench.hub.push import plan_push; assert 'ARC White-Box' in plan_push('ds', 'o/n', card='whestbench-organisers').card.content.decode()",
             want="RESULT ok"))
    add(Case("api-card-int", "raw", "PushConfig('o/n', card=42)", rc=(1,),
             code="from whestbench.hub.push import PushConfig; PushConfig('o/n', card=42)", want="card must be a mapping"))
    add(Case("api-tag-int", "raw", "PushConfig('o/n', tag=5)", rc=(1,),
             code="from whestbench.hub.push import PushConfig; PushConfig('o/n', tag=5)", want="not a valid git tag"))
    add(Case("api-private-str", "raw", "PushConfig('o/n', private='yes')", rc=(1,),
             code="from whestbench.hub.push import PushConfig; PushConfig('o/n', private='yes')", want="True or False"))
    add(Case("api-revision-int", "raw", "pull_dataset('o/n', revision=5)", env=HUB, rc=(1,),
             code="from whestbench.hub.pull import pull_dataset; pull_dataset('o/n', revision=5)", want="a revision is"))
    add(Case("api-repo-none", "raw", "push_dataset('ds', None)", setup=copy("ds"), env=HUB, rc=(1,),
             code="from whestbench.hub.push import push_dataset; push_dataset('ds', None)", want="named by a string"))
    add(Case("api-load-token-list", "raw", "load_dataset('o/n', token=[])", env=HUB, rc=(1,),
             code="from whestbench import load_dataset; load_dataset('o/n', token=[])", want="token must be one word"))
    add(Case("api-verify-empty", "raw", "verify_dataset('')", rc=(1,),
             code="from whestbench.verify.run import verify_dataset; verify_dataset('')", want="empty path"))
    add(Case("api-merge-out-none", "raw", "merge_datasets(['p0','p1'], output_dir=None)", setup=copy("p0", "p1"), rc=(1,),
             code="from whestbench import merge_datasets; merge_datasets(['p0', 'p1'], output_dir=None)", want="output"))
    add(Case("retry-seconds", "raw", "WHEST_HUB_RETRY_SECONDS=abc → pull", env={**HUB, "WHEST_HUB_RETRY_SECONDS": "abc"},
             argv=["dataset", "pull", "org/name"], want="WHEST_HUB_RETRY_SECONDS"))
    add(Case("spot-check-huge", "raw", "verify --spot-check 1e30", setup=copy("ds"),
             argv=["dataset", "verify", "ds", "--spot-check", "1e30"], rc=(2, 0, 1), want="."))
    add(Case("spot-seed-negative", "raw", "verify --spot-check 2 --spot-seed -1", setup=copy("ds"),
             argv=["dataset", "verify", "ds", "--spot-check", "2", "--spot-seed", "-1"], rc=(0, 2), want="spot"))
    add(Case("generate-seeds-huge", "raw", "generate-seeds --n-mlps 1e12", argv=["dataset", "generate-seeds", "--n-mlps", "1e12"],
             want="n-mlps"))
    add(Case("pull-split-dotdot", "raw", "pull org/name --split ../x", env=HUB, argv=["dataset", "pull", "org/name", "--split", "../x"],
             want="split"))
    add(Case("plot-dev-full", "raw", "inspect --plot /dev/full", setup=copy("ds"), argv=["dataset", "inspect", "ds", "--plot", "/dev/full"],
             want="plot"))
    add(Case("seeds-dir", "raw", "--mlp-seeds a directory", argv=["dataset", "bake", "--n-mlps", "2", "--n-samples", "10", "--width",
                                                                "2", "--depth", "1", "--mlp-seeds", ".", "--output", "o"],
             want="directory"))
    add(Case("against-empty", "raw", "verify ds --against ''", setup=copy("ds"), argv=["dataset", "verify", "ds", "--against", ""],
             want="empty path"))
    add(Case("status-dot-in-output", "raw", "status . (inside a complete dataset)", setup=copy("ds"),
             argv=["dataset", "status", "."], rc=(0,), want="complete", cwd="ds"))
    return c + _forgery_round().cases()


def _forgery_round():
    """The careful forger's cases (benchmarks/forgery_round.py), imported as a package module or beside this script."""
    try:
        from benchmarks import forgery_round
    except ImportError:
        import forgery_round
    return forgery_round


# --------------------------------------------------------------------------------------------------
# Running and judging


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))


def run_case(case: Case, root: Path, work: Path, src: Path) -> dict:
    here = work / case.name
    here.mkdir(parents=True)
    if case.setup is not None:
        case.setup(root, here)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING", "WHEST_", "HTTP", "ALL_PROXY"))
           and k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
    env.update(HF_HOME=str(here / ".hf"), WHEST_HUB_RETRY_SECONDS="0", HF_HUB_DISABLE_TELEMETRY="1",
               PYTHONPATH=os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")]))
    env.update(case.env)
    if case.argv is not None:
        argv = [a.replace("TOKENFILE", str(root / "token")) for a in case.argv]
        cmd = [sys.executable, "-m", "whestbench", *argv]
    else:
        body = "\n".join("    " + line for line in case.code.splitlines())
        cmd = [sys.executable, "-c", API_WRAP.format(body=body)]
    cmd = [sys.executable, "-c", _MEASURE, *cmd]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=here / case.cwd, env=env, stdin=subprocess.PIPE if case.stdin is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_limits, start_new_session=True)
    timed_out = False
    try:
        out, err = proc.communicate(case.stdin, timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)  # the case's command too, not only the measuring wrapper
        out, err = proc.communicate()
        timed_out = True
    wall = time.monotonic() - start
    err_text = err.decode("utf-8", "replace")
    m = re.search(r"\nRSS_KIB (\d+) RC (-?\d+)\n?$", "\n" + err_text)
    rss, rc = (int(m.group(1)), int(m.group(2))) if m else (0, proc.returncode)
    err_text = err_text[: m.start()] if m else err_text
    text = out.decode("utf-8", "replace") + err_text
    verdict = judge(case, rc, text, err_text, timed_out, rss)
    return {"name": case.name, "group": case.group, "what": case.what, "rc": rc, "wall_s": round(wall, 1),
            "rss_mib": rss // 1024, "verdict": verdict[0], "why": verdict[1],
            "tail": [line for line in text.splitlines() if line.strip()][-2:]}


def judge(case: Case, rc: int, text: str, err: str, timed_out: bool, rss_kib: int) -> tuple[str, str]:
    leaked = [s for s in case.secrets if s and s in text]
    if leaked:
        return "secret", f"printed {leaked[0][:4]}…"
    if timed_out or rc < 0 or rc not in (0, 1, 2, 3, 75):
        return "crash", "timed out" if timed_out else f"exit {rc}"
    if rss_kib > 2 << 20:
        return "crash", f"peak RSS {rss_kib >> 10} MiB"
    m = _RAW.search(text)
    if m and not (case.env.get("WHEST_DEBUG") == "1" and m.group(0).startswith("Traceback")):  # asked for
        return "raw", m.group(0)
    if case.code is not None and rc == 3:
        return "raw", [line for line in text.splitlines() if line.startswith("EXC")][-1][:80]
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    if len(errors) > 1:
        return "raw", f"{len(errors)} error lines"
    if rc not in case.rc:
        if rc == 0 and case.documented:
            return "silent-doc", case.documented
        return ("silent", f"exit {rc}") if rc == 0 else ("misleading", f"exit {rc}, not {case.rc}")
    if case.want and not re.search(case.want, text, re.M):
        return "misleading", f"no /{case.want[:40]}/"
    return "held", ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default=None, help="run the cases whose name holds this word")
    ap.add_argument("--json", default=None, help="write every result here")
    ap.add_argument("--keep", default=None, help="build the fixtures and case directories here (kept)")
    ap.add_argument("--src", default=str(REPO / "src"), help="the src/ whose whestbench the cases run (default: this tree's)")
    args = ap.parse_args()
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="hostile-"))
    base.mkdir(parents=True, exist_ok=True)
    root, work = base / "fixtures", base / "cases"
    t0 = time.monotonic()
    if not root.exists():
        root.mkdir()
        build_fixtures(root)
    shutil.rmtree(work, ignore_errors=True)
    todo = [c for c in cases() if args.only is None or args.only in c.name]
    results = []
    for case in todo:
        results.append(run_case(case, root, work, Path(args.src).resolve()))
        r = results[-1]
        print(f"{r['verdict']:>10}  {r['name']}  (exit {r['rc']}, {r['wall_s']} s) {r['why']}", file=sys.stderr)
    print("| # | case | what was tried | verdict | exit | wall s |")
    print("|---|---|---|---|---|---|")
    for i, r in enumerate(results, 1):
        why = f" ({r['why']})" if r["why"] else ""
        print(f"| {i} | {r['name']} | {r['what']} | {r['verdict']}{why} | {r['rc']} | {r['wall_s']} |")
    counts: dict[str, int] = {}
    for r in results:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    groups = sorted({r["group"] for r in results})
    print()
    print(f"{len(results)} cases in {time.monotonic() - t0:.0f} s: " + ", ".join(f"{v} {n}" for v, n in sorted(counts.items())))
    for g in groups:
        mine = [r for r in results if r["group"] == g]
        print(f"  {g}: {len(mine)} cases, " + ", ".join(
            f"{v} {sum(1 for r in mine if r['verdict'] == v)}" for v in sorted({r['verdict'] for r in mine})))
    print(f"largest peak RSS of a case: {max(r['rss_mib'] for r in results)} MiB")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)
    return 0 if all(r["verdict"] in ("held", "silent-doc") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
