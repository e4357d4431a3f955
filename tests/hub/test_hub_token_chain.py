"""No public Hub entry point lets a token out through its exception chain.

A Hub that echoes the request's ``Authorization`` header in its error body (here a local HTTP
server on 127.0.0.1 answering every request with 400 "you sent Bearer <token>") makes
huggingface_hub's own exception carry the token. Each public entry point is called in a fresh
interpreter with ``HF_TOKEN`` set and ``HF_ENDPOINT`` pointing at that server; the error it raises,
printed the way Python prints an uncaught exception (every chained exception included), must not
show the token.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

TOKEN = "hf_LeakyT0kenValue0987654321"
REPO = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import json, sys, traceback
import whestbench
from whestbench.hub.pull import pull_dataset
from whestbench.hub.push import push_dataset
from whestbench.verify.inspect import describe

calls = {
    "whestbench.load_dataset": lambda: whestbench.load_dataset("org/x"),
    "describe (inspect)": lambda: describe("org/x"),
    "pull_dataset": lambda: pull_dataset("org/x", output=None),
    "push_dataset": lambda: push_dataset(sys.argv[1], "org/x"),
    "whestbench.publish_dataset": lambda: whestbench.publish_dataset(sys.argv[1], repo_id="org/x"),
}
report = {}
for name, fn in calls.items():
    try:
        fn()
        report[name] = "no error"
    except BaseException as exc:
        report[name] = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
print(json.dumps(report))
"""


class _Echo(http.server.BaseHTTPRequestHandler):
    def _answer(self) -> None:
        body = f"bad request: you sent {self.headers.get('Authorization')}".encode()
        self.send_response(400)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_POST = do_HEAD = do_PUT = _answer

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def echoing_hub():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_no_public_hub_entry_point_shows_the_token_in_its_exception_chain(echoing_hub, tmp_path):
    from whestbench.dataset import create_dataset

    ds = create_dataset(n_mlps=1, n_samples=64, width=4, depth=2, mlp_seeds=[5], output_path=tmp_path / "ds")
    env = {**os.environ, "HF_TOKEN": TOKEN, "HF_ENDPOINT": echoing_hub, "HF_HUB_DISABLE_TELEMETRY": "1",
           "HF_HOME": str(tmp_path / "hf"), "HF_HUB_ETAG_TIMEOUT": "5", "HF_HUB_DOWNLOAD_TIMEOUT": "5",
           "WHEST_HUB_RETRY_SECONDS": "0", "PYTHONPATH": str(REPO / "src")}
    env.pop("HF_HUB_OFFLINE", None)
    run = subprocess.run([sys.executable, "-c", SCRIPT, str(ds)], env=env, capture_output=True, text=True,
                         timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    # the server really echoed the token: otherwise this test checks nothing
    for name, text in report.items():
        assert text != "no error", name
        assert "Traceback" in text, name
        assert TOKEN not in text, f"{name} shows the token:\n{text}"
        assert TOKEN[3:] not in text, f"{name} shows the token:\n{text}"


def test_an_untranslated_failure_that_quotes_the_token_becomes_a_scrubbed_error_with_no_chain(monkeypatch):
    from whestbench.hub.client import call
    from whestbench.hub.ref import HubRef
    from whestbench.errors import HubError

    monkeypatch.setenv("HF_TOKEN", TOKEN)

    def fails():
        raise ValueError(f"the server said: you sent Bearer {TOKEN}")

    with pytest.raises(HubError) as info:
        call(fails, what="loading hf://org/x", ref=HubRef("org/x"), translate=False)
    assert TOKEN not in str(info.value)
    assert info.value.__cause__ is None and info.value.__context__ is None
