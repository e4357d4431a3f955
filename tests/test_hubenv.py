"""Hugging Face settings the libraries cannot parse (issue 34): local verbs ignore them, Hub verbs refuse
them in one line (exit 2) without printing a secret, and every import of ``datasets`` or
``huggingface_hub`` in src/ goes through ``hubenv.import_hub``.

Each case runs in a fresh interpreter: huggingface_hub reads the environment once, when imported.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "src" / "whestbench"


def test_every_import_of_the_hugging_face_libraries_goes_through_import_hub():
    found = []
    for path in sorted(PKG.rglob("*.py")):
        if path.name == "hubenv.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.relative_to(PKG)}: {n}" for n in names if n.split(".")[0] in ("datasets", "huggingface_hub")]
    assert found == []


@pytest.fixture
def two_partials(tiny) -> Path:
    """The folder holding ``p0`` and ``p1``, the halves of one 4-MLP bake."""
    return tiny["root"]


_SCRIPT = r"""
import contextlib, io, json, sys
from whestbench.cli import main
from whestbench import load_dataset
root, out = sys.argv[1], sys.argv[2]
codes = {}
codes["merge"] = main(["dataset", "merge", root + "/p0", root + "/p1", "--output", out])
codes["verify"] = main(["dataset", "verify", out])
codes["inspect"] = main(["dataset", "inspect", out])
codes["load"] = len(load_dataset(out))
codes["dry-run"] = main(["dataset", "push", out, "--repo", "org/name", "--dry-run"])
codes["pull"] = main(["dataset", "pull", "org/name"])
codes["inspect-hub"] = main(["dataset", "inspect", "org/name"])
codes["push"] = main(["dataset", "push", out, "--repo", "org/name"])
try:
    load_dataset("org/name")
    codes["load-hub"] = "loaded"
except Exception as e:
    codes["load-hub"] = type(e).__name__ + ": " + str(e)
print("CODES " + json.dumps(codes))
"""


def _run(tmp_path: Path, partials: Path, env_extra: dict[str, str]) -> tuple[dict, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(env_extra, HF_HOME=str(tmp_path / "hf"), WHEST_HUB_RETRY_SECONDS="0",
               PYTHONPATH=os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, "-c", _SCRIPT, str(partials), str(tmp_path / "merged")], env=env,
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    text = p.stdout + p.stderr
    line = [x for x in p.stdout.splitlines() if x.startswith("CODES ")]
    assert line, text
    return json.loads(line[-1][6:]), text


@pytest.mark.parametrize("endpoint, secret", [
    ("http://alice:p/w9secret@127.0.0.1:9", "w9secret"),  # the port reads as 'p': huggingface_hub fails to import
    ("http://127.0.0.1:99999", None),  # a port out of range: the same
    ("alice:pw9secret@127.0.0.1:9", "pw9secret"),  # no scheme
    ("http://127.0.0.1:9/?token=sekretsekret", "sekretsekret"),  # a query token
])
def test_local_verbs_ignore_an_unusable_endpoint_and_hub_verbs_refuse_it_without_the_secret(
        tmp_path, two_partials, endpoint, secret):
    """issue 34: with such an HF_ENDPOINT a purely local verify, merge or load failed ("Error importing
    huggingface_hub.hf_api: Port could not be cast to integer value as 'p'"), and inspect, push, pull
    and load_dataset printed the password or the token."""
    codes, text = _run(tmp_path, two_partials, {"HF_ENDPOINT": endpoint})
    assert {k: codes[k] for k in ("merge", "verify", "inspect")} == dict.fromkeys(("merge", "verify", "inspect"), 0), text
    assert codes["load"] == 4
    # the Hub verbs refuse it, and so does a dry run, which checks everything the push would but the network
    hub_verbs = ("pull", "inspect-hub", "push", "dry-run")
    assert {k: codes[k] for k in hub_verbs} == dict.fromkeys(hub_verbs, 2), text
    assert codes["load-hub"].startswith("UsageError: HF_ENDPOINT=") and "cannot be used for the Hub" in codes["load-hub"]
    assert "Error importing" not in text and "Traceback" not in text
    errors = [x for x in text.splitlines() if x.startswith("error:")]
    assert len(errors) == 4 and all("HF_ENDPOINT=" in x and "fix it or unset it" in x for x in errors), text
    if secret:
        assert secret not in text


def test_a_timeout_that_is_no_number_is_ignored_locally_and_named_for_the_hub(tmp_path, two_partials):
    """HF_HUB_ETAG_TIMEOUT=abc made `import datasets` raise ValueError in any verb."""
    codes, text = _run(tmp_path, two_partials, {"HF_HUB_ETAG_TIMEOUT": "abc"})
    assert codes["merge"] == codes["verify"] == 0 and codes["load"] == 4, text
    assert codes["pull"] == 2 and "error: HF_HUB_ETAG_TIMEOUT='abc' cannot be used for the Hub: it is not a whole " \
                                  "number of seconds" in text


def test_the_settings_check_names_each_problem():
    from whestbench.hubenv import setting_problems

    env = {"HF_ENDPOINT": "", "HF_HUB_DOWNLOAD_TIMEOUT": "1.5", "HF_DATASETS_IN_MEMORY_MAX_SIZE": "lots"}
    old = {k: os.environ.get(k) for k in env}
    try:
        os.environ.update(env)
        assert dict(setting_problems()) == {"HF_ENDPOINT": "it is empty",
                                            "HF_HUB_DOWNLOAD_TIMEOUT": "it is not a whole number of seconds",
                                            "HF_DATASETS_IN_MEMORY_MAX_SIZE": "it is not a number of bytes"}
        os.environ.update({"HF_ENDPOINT": "https://hub.example.org:8443/mirror", "HF_HUB_DOWNLOAD_TIMEOUT": "30",
                           "HF_DATASETS_IN_MEMORY_MAX_SIZE": "1e9"})
        assert setting_problems() == []
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_a_proxy_whose_password_holds_a_slash_is_refused_for_the_hub_without_the_password(tmp_path, two_partials):
    """HTTPS_PROXY=http://bob:x/pw@host:9 failed inside the call: "InvalidURL: Invalid port: 'x'" (a piece of the
    password), through the CLI's fallback for an unknown error."""
    proxy = "http://bob:x/pw9secret@127.0.0.1:9"
    codes, text = _run(tmp_path, two_partials, {"HTTPS_PROXY": proxy, "HTTP_PROXY": proxy})
    assert codes["merge"] == codes["verify"] == 0, text
    assert codes["pull"] == 2 and "PROXY='http://***@127.0.0.1:9' cannot be used for the Hub" in text
    assert "pw9secret" not in text and "InvalidURL" not in text
