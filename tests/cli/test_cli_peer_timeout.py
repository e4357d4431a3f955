"""``--peer-timeout`` is bounded at parse time to what the protocol and its store accept (issue 21).

Outside [2 s, 10⁶ s] the value used to pass the parser and fail later: 1e10 with 30 C++ ``frame #``
lines under torchrun (the store's deadline overflows int64 nanoseconds), 1e308 with an
``OverflowError``, 0.001 and 1e-300 with C++ frames. Now each is one line, exit 2, before any work.
"""

from __future__ import annotations

import pytest

from whestbench.cli import main

TINY = ["dataset", "bake", "--n-mlps", "2", "--n-samples", "100", "--width", "4", "--depth", "1", "--seed", "1",
        "--quiet"]


@pytest.mark.parametrize("value", ["1e10", "1e308", "0.001", "1e-300", "1.9", "1000001"])
def test_a_peer_timeout_the_store_cannot_take_is_refused_at_parse_time(tmp_path, capsys, value):
    try:
        rc = main([*TINY, "--peer-timeout", value, "--output", str(tmp_path / "o")])
    except SystemExit as exc:
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = [line for line in err.strip().splitlines() if line]
    assert len(lines) == 1 and "--peer-timeout" in lines[0] and "between 2 s" in lines[0], err
    assert "frame #" not in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("value", ["2", "300", "1e6"])
def test_a_peer_timeout_inside_the_bounds_is_taken(tmp_path, capsys, value):
    assert main([*TINY, "--peer-timeout", value, "--output", str(tmp_path / "o")]) == 0


def test_the_python_api_refuses_the_same_peer_timeouts():
    from whestbench.errors import UsageError
    from whestbench.work.distributed.store_executor import StoreExecutor
    from whestbench.work.launch_env import DistEnv

    env = DistEnv(0, 2, 0, "127.0.0.1", 29500)
    for bad in (1e10, 0.001, float("nan")):
        with pytest.raises(UsageError, match="peer timeout must be between"):
            StoreExecutor(env, peer_timeout_s=bad)
