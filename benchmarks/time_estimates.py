"""How far the times whestbench announces are from the wall time they announce (issue 35, item 5).

Three bakes, each run as a user runs it (a fresh ``python -m whestbench`` process, timed from before
it starts to its exit):

- **fixed**: a plain bake of ``--n-mlps`` × ``--n-samples``;
- **target**: a control-variate bake to ``--target-stderr`` (its pilots plan each MLP's samples);
- **resumed**: the fixed bake stopped with SIGTERM once its progress passes ``--stop-at``, then
  re-run: the re-run's announcement against the re-run's wall time.

For each it reads the Plan line's "the whole command ≈ T" (start-up so far, sampling, writing) and
its sampling part alone (what the Plan line announced before issue 35), and, for fixed and target,
``whest dataset calibrate``'s "whole bake command, projected" (run just before, on the same shape),
and prints each against the measured wall time (ratio announced / real).

The timing probe runs for bakes over ``PROBE_FLOPS`` (5e12 FLOP, minutes of work); these shapes are
smaller, so the script lowers it in the baking process (``--probe-flops``) to get a Plan time at all:
the probe and the estimate are the bake's own code either way.

    python benchmarks/time_estimates.py                     # 4 × 4e6 at 64×4, E = 3e-4
    python benchmarks/time_estimates.py --n-samples 8e6 --json out.json

Report the machine and its load (``uptime``'s load averages are printed before and after): the
estimate is the rate measured at the start; a load that moves during the bake moves the real time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PRELUDE = ("import sys, whestbench.bake.plan as p; p.PROBE_FLOPS = float(sys.argv.pop(1)); "
           "sys.argv[0] = 'whest'; from whestbench.cli.entry import run; run()")


def _seconds(text: str) -> float:
    """``42.0 s`` / ``1.5 min`` / ``2.0 h`` (``text.format_duration``) in seconds."""
    value, unit = text.split()
    return float(value.replace(",", "")) * {"s": 1, "min": 60, "h": 3600, "days": 86400}[unit]


def _load() -> str:
    return " ".join(os.getloadavg().__repr__().strip("()").split(", ")[:3]) if hasattr(os, "getloadavg") else "?"


def _bake_argv(args, output: Path, target: bool) -> list[str]:
    argv = ["dataset", "bake", "--n-mlps", str(args.n_mlps), "--n-samples", args.n_samples, "--width", str(args.width),
            "--depth", str(args.depth), "--seed", "7", "--log-every", str(args.log_every), "--output", str(output)]
    if target:
        argv += ["--estimator", "control-variate", "--target-stderr", str(args.target_stderr)]
    return argv


def _run(argv: list[str], probe_flops: float, stop_at: float | None = None) -> dict:
    """Run ``whest ARGV`` in a fresh process; its wall time, stdout, stderr (SIGTERM once the progress
    passes ``stop_at``, a fraction)."""
    cmd = [sys.executable, "-c", PRELUDE, repr(probe_flops), *argv]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err_lines: list[str] = []
    if stop_at is not None:
        for line in proc.stderr:
            err_lines.append(line)
            m = re.search(r"samples \((\d+\.\d)%\)", line)
            if m and float(m.group(1)) >= 100 * stop_at:
                proc.send_signal(signal.SIGTERM)
                break
    out, err = proc.communicate()
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "rc": proc.returncode, "out": out, "err": "".join(err_lines) + err}


def _announced(run: dict) -> dict:
    """The Plan line's whole-command time and the first samples line's ETA + the time already gone."""
    found: dict = {}
    m = re.search(r"the whole command ≈ ([\d.,]+ \w+) \(start-up so far ([\d.,]+ \w+), sampling ≈ ([\d.,]+ \w+)",
                  run["out"])
    if m:
        found["plan_s"], found["startup_s"], found["sampling_s"] = (_seconds(m.group(i)) for i in (1, 2, 3))
    return found


def _calibrated(args, target: bool) -> float | None:
    argv = ["dataset", "calibrate", "--n-mlps", str(args.n_mlps), "--n-samples", args.n_samples, "--width",
            str(args.width), "--depth", str(args.depth)]
    if target:
        argv += ["--estimator", "control-variate", "--target-stderr", str(args.target_stderr)]
    run = _run(argv, args.probe_flops)
    text = re.sub(r"[│┃\s]+", " ", run["out"])
    m = re.search(r"whole bake command, projected ([\d.,]+ \w+)", text)
    return _seconds(m.group(1)) if m else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n-mlps", type=int, default=4)
    ap.add_argument("--n-samples", default="4e6")
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--target-stderr", type=float, default=3e-4)
    ap.add_argument("--stop-at", type=float, default=0.4, help="the resumed case stops its first run here")
    ap.add_argument("--probe-flops", type=float, default=1e9)
    ap.add_argument("--log-every", type=float, default=5)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    rows = []
    print(f"load averages before: {_load()}  (cores: {os.cpu_count()})", flush=True)
    with tempfile.TemporaryDirectory(prefix="whest-time-") as tmp:
        for case, target in (("fixed", False), ("target", True)):
            cal = _calibrated(args, target)
            run = _run(_bake_argv(args, Path(tmp) / case, target), args.probe_flops)
            assert run["rc"] == 0, run["err"][-2000:]
            rows.append({"case": case, "wall_s": run["wall_s"], "calibrate_s": cal, **_announced(run),
                         "load": _load()})
            print(rows[-1], flush=True)
        out = Path(tmp) / "resumed"
        first = _run(_bake_argv(args, out, False), args.probe_flops, stop_at=args.stop_at)
        assert first["rc"] == 75, first["err"][-2000:]
        run = _run(_bake_argv(args, out, False), args.probe_flops)
        assert run["rc"] == 0, run["err"][-2000:]
        rows.append({"case": "resumed", "wall_s": run["wall_s"], "calibrate_s": None, **_announced(run), "load": _load()})
        print(rows[-1], flush=True)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"load averages after: {_load()}")
    print(f"\n{'case':<9} {'real':>8} {'Plan (whole)':>17} {'Plan (sampling)':>17} {'calibrate':>17}")
    for r in rows:
        def cell(key):
            v = r.get(key)
            return f"{v:7.1f} s ({v / r['wall_s']:.2f}×)" if v else f"{'—':>16}"
        print(f"{r['case']:<9} {r['wall_s']:6.1f} s {cell('plan_s'):>17} {cell('sampling_s'):>17} {cell('calibrate_s'):>17}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
