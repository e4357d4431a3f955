#!/usr/bin/env python
"""Start-up benchmark: the fixed cost of a small bake, ours (default and torch CPU paths) against
whestbench 0.16.2's, side by side, and the whole-command ratios at 256×8.

The fixed cost of a command is the wall time of a tiny bake (default: 1 MLP × 1,000 samples at
64×4): interpreter start-up, imports, planning, writing the dataset, exit. It is paid by every bake,
so it dominates small ones. Runs alternate (ours, ours --torch --device cpu, reference, ours, ...)
so drifting machine load hits all three alike; medians are reported. The targets (issue 12 §5):

- the default path's fixed cost <= the reference's;
- the torch path's fixed cost <= the reference's + the cost of ``import torch`` (measured in the
  same rounds: ``python -c "import numpy, torch"`` minus ``python -c "import numpy"``, which is what
  a process pays for torch, its exit included);
- no cold-cache compile a user can notice: the first bake after an install (numba's cache empty,
  here a fresh ``NUMBA_CACHE_DIR``) is timed for both paths. A small default bake compiles nothing
  (it runs without numba); the torch CPU path compiles its kernels once (seconds) and says so.

Then, unless ``--skip-big``, one alternating run each of the 256×8 bake of 2 MLPs × 1.2M samples,
and the whole-command ratios reference seconds / our seconds (start-up included, as a user sees it).
The exit code is 1 if a start-up target is missed.

    .venv/bin/python benchmarks/bench_startup.py --reference-python .refvenv/bin/python
    .venv/bin/python benchmarks/bench_startup.py --repeats 9 --skip-big --json startup.json

Our runs use this checkout's ``src/`` (``PYTHONPATH``); see ``bench_cpu.py`` for the reference venv.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

try:
    from .bench_cpu import Bakers, log, machine_info, reference_python, run_timed
    from .shapes import Shape, shape_arg
except ImportError:  # run as a script, ``python benchmarks/bench_startup.py``: its folder is on sys.path
    from bench_cpu import Bakers, log, machine_info, reference_python, run_timed
    from shapes import Shape, shape_arg

CONTENDERS = ("ours", "ours-torch", "reference")
COLD_NOTE = "compiling the CPU kernels for this machine"  # dataset.bake.KERNELS_NOTE's start


@dataclass
class StartupResult:
    tiny: str
    runs: dict[str, list[float]] = field(default_factory=dict)
    """Wall seconds of each tiny bake, per contender, in run order."""
    torch_import_s: list[float] = field(default_factory=list)
    """Per round: wall(python -c 'import numpy, torch') - wall(python -c 'import numpy')."""
    cold: dict[str, float] = field(default_factory=dict)
    """Wall seconds of one tiny bake with an empty numba cache, per path of ours."""
    cold_note: dict[str, bool] = field(default_factory=dict)
    """Whether that cold run printed the compiling note."""
    big: str = ""
    big_s: dict[str, float] = field(default_factory=dict)

    def median(self, who: str) -> float:
        return statistics.median(self.runs[who])

    @property
    def torch_import_median_s(self) -> float:
        return statistics.median(self.torch_import_s) if self.torch_import_s else 0.0


def targets(r: StartupResult) -> list[tuple[str, float, float, bool]]:
    """``(what, ours, limit, met)`` for each start-up target that was measured."""
    out = []
    ref = r.median("reference")
    out.append(("default path fixed cost <= reference's", r.median("ours"), ref, r.median("ours") <= ref))
    if "ours-torch" in r.runs:
        limit = ref + r.torch_import_median_s
        out.append(("torch CPU path fixed cost <= reference's + import torch", r.median("ours-torch"), limit,
                    r.median("ours-torch") <= limit))
    return out


def time_torch_import(our_python: str, env: dict[str, str], scratch: Path) -> float:
    """What importing torch adds to a process (its exit included), numpy already being there."""
    with_torch, _ = run_timed([our_python, "-c", "import numpy, torch"], env, scratch / "import-torch.log")
    without, _ = run_timed([our_python, "-c", "import numpy"], env, scratch / "import-numpy.log")
    return with_torch - without


def measure(args, ref_python: str, workdir: Path, with_torch: bool) -> StartupResult:
    bakers = Bakers(sys.executable, ref_python, workdir)
    who_all = [w for w in CONTENDERS if with_torch or w != "ours-torch"]
    r = StartupResult(tiny=f"{args.tiny.label} {args.tiny.n_mlps}x{args.tiny.n_samples:,}", runs={w: [] for w in who_all})

    log("warming up (imports, page cache, numba cache) ...")
    for who in who_all:
        bakers.bake(who, args.tiny)
    for i in range(args.repeats):
        for who in who_all:
            wall, _, _ = bakers.bake(who, args.tiny)
            r.runs[who].append(wall)
        if with_torch:
            r.torch_import_s.append(time_torch_import(sys.executable, bakers.env, workdir))
        log(f"  round {i + 1}/{args.repeats}: " + ", ".join(f"{w} {r.runs[w][-1]:.2f} s" for w in who_all)
            + (f", import torch {r.torch_import_s[-1]:.2f} s" if with_torch else ""))

    for who in [w for w in who_all if w.startswith("ours")]:
        cache = Path(tempfile.mkdtemp(prefix="numba-cold-", dir=workdir))
        wall, _, out = bakers.bake(who, args.tiny, extra_env={"NUMBA_CACHE_DIR": str(cache)})
        r.cold[who] = wall
        r.cold_note[who] = COLD_NOTE in out.with_suffix(".log").read_text(errors="replace")
        shutil.rmtree(cache, ignore_errors=True)
        log(f"  cold numba cache: {who} {wall:.2f} s" + (" (printed the compiling note)" if r.cold_note[who] else ""))

    if not args.skip_big:
        big = args.big
        r.big = f"{big.label} {big.n_mlps}x{big.n_samples:,}"
        for who in who_all:
            wall, _, _ = bakers.bake(who, big)
            r.big_s[who] = wall
            log(f"  {r.big} {who}: {wall:.2f} s ({big.flops / wall / 1e9:.1f} GFLOP/s)")
    return r


def report(info: dict, r: StartupResult) -> str:
    lines = [
        f"machine: {info['cpu']}, {info['logical_cpus']} logical CPUs; reference whestbench {info['reference_whestbench']}; "
        f"load avg {info['loadavg_start'][0]:.2f} -> {info['loadavg_end'][0]:.2f}",
        f"fixed cost = wall time of a tiny bake ({r.tiny}); medians of {len(r.runs['reference'])} alternating rounds",
        "",
        f"{'command':<28} {'median s':>9}  runs",
    ]
    for who, runs in r.runs.items():
        lines.append(f"{who:<28} {statistics.median(runs):>9.2f}  " + " ".join(f"{x:.2f}" for x in runs))
    if r.torch_import_s:
        lines.append(f"{'import torch (marginal)':<28} {r.torch_import_median_s:>9.2f}  " + " ".join(f"{x:.2f}" for x in r.torch_import_s))
    lines.append("")
    for what, ours, limit, met in targets(r):
        lines.append(f"{'PASS' if met else 'FAIL'}  {what}: {ours:.2f} s vs {limit:.2f} s ({ours / limit:.2f}x)")
    for who, wall in r.cold.items():
        extra = wall - r.median(who)
        note = "; printed the compiling note" if r.cold_note.get(who) else ""
        lines.append(f"cold numba cache, {who}: {wall:.2f} s ({extra:+.2f} s over a warm run{note})")
    if r.big_s:
        lines += ["", f"whole command at {r.big} (one run each, alternating): speed ratio = reference s / ours s"]
        ref = r.big_s["reference"]
        for who, wall in r.big_s.items():
            lines.append(f"{who:<28} {wall:>9.2f} s" + ("" if who == "reference" else f"   {ref / wall:.2f}x the reference"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=5, help="alternating rounds of tiny bakes (default 5)")
    p.add_argument("--tiny", type=shape_arg, default=Shape(64, 4, 1, 1000), metavar="WxD:N_MLPS:N_SAMPLES",
                   help="the tiny bake whose wall time is the fixed cost (default 64x4:1:1000)")
    p.add_argument("--big", type=shape_arg, default=Shape(256, 8, 2, 1_200_000), metavar="WxD:N_MLPS:N_SAMPLES",
                   help="the whole-command ratio's bake (default 256x8:2:1200000)")
    p.add_argument("--skip-big", action="store_true", help="skip the whole-command ratios (a few minutes on 2 cores)")
    p.add_argument("--no-torch", action="store_true", help="skip our torch CPU path")
    p.add_argument("--reference-python", help="python of a whestbench==0.16.2 venv (default: create/reuse .refvenv)")
    p.add_argument("--workdir", type=Path, default=None, help="scratch directory (default: a temporary one)")
    p.add_argument("--json", type=Path, default=None, metavar="OUT", help="also write the results as JSON")
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error("--repeats must be at least 1")
    with_torch = not args.no_torch
    if with_torch:
        try:
            import torch  # noqa: F401
        except ImportError:
            with_torch = False

    ref_python = reference_python(args.reference_python)
    info = machine_info(ref_python)
    if info["loadavg_start"][0] > 0.25 * (os.cpu_count() or 1):
        log(f"warning: load average {info['loadavg_start'][0]:.2f}: other work is running; timings will be noisy")
    started = time.strftime("%Y-%m-%d %H:%M")
    with tempfile.TemporaryDirectory(prefix="whest-startup-", dir=args.workdir) as tmp:
        r = measure(args, ref_python, Path(tmp), with_torch)
    info["loadavg_end"] = list(os.getloadavg())
    print(report(info, r))
    ok = all(met for *_, met in targets(r))
    if args.json:
        data = {"date": started, "machine": info, **asdict(r), "targets": [dict(zip(("what", "ours_s", "limit_s", "met"), t)) for t in targets(r)]}
        args.json.write_text(json.dumps(data, indent=2))
        log(f"wrote {args.json}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
