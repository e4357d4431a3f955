"""``whest doctor``: versions, the device, the device check of every bake path, and a throughput probe.

The one command to run on a new machine, and to paste into a bug report (docs/gpu.md, "First run on
a new GPU machine"). Exit 0 when every check passes, 1 otherwise."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from whestbench.atomic import write_file_atomic
from whestbench.bake import doctor as bake_doctor
from whestbench.cli.common import err, out
from whestbench.errors import WorkFailed
from whestbench.paths import check_output_file
from whestbench.text import format_duration


@click.command("doctor")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda", "mps"]), default="auto", show_default=True,
              help="The torch device to check (auto: cuda, then mps, then cpu). The CPU default path is always checked.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the report as JSON to this file.")
@click.option("--quick", is_flag=True, help="About 1 s per throughput probe instead of 20 (the checks are unchanged).")
def doctor(device: str, json_path: Path | None, quick: bool) -> None:
    """Check this machine: versions, device, the device checks of every bake path, throughput.

    \b
    whest doctor                       # the GPU if there is one
    whest doctor --device cpu --json doctor.json
    """
    if json_path is not None:
        check_output_file(json_path, "--json")
    diag = bake_doctor.diagnose(device, quick=quick, on_note=lambda s: err.print(f"… {s}", markup=False, emoji=False))
    for line in report_lines(diag.record()):
        out.print(line, markup=False, emoji=False)
    if json_path is not None:
        write_file_atomic(json_path, (json.dumps(diag.record(), indent=2) + "\n").encode())
        out.print(f"report: {json_path}", markup=False)
    if not diag.passed:
        failed = [f"{c['name']} ({c['path']}, {c['shape']})" for c in diag.checks if not c["passed"]]
        raise WorkFailed(f"{len(failed)} device check(s) failed: {', '.join(failed)};",
                         fix="do not bake on this path; send this report to the whestbench maintainers")


def _on(flag: Any) -> str:
    return "on" if flag else "off"


def report_lines(rec: dict[str, Any]) -> list[str]:
    """The report as lines: versions, device, one line per check, one per throughput probe."""
    v, d = rec["versions"], rec["device"]
    blas = v.get("blas") or {}
    lines = ["versions:",
             f"  whestbench {v.get('whestbench')}, python {v.get('python')}, numpy {v.get('numpy')} with "
             f"{blas.get('library')} {blas.get('version') or ''} ({blas.get('kernel')}, {blas.get('threads')} threads), "
             f"numba {v.get('numba')}",
             f"  torch {v.get('torch') or 'not installed'}, CUDA {v.get('cuda') or 'none'}, "
             f"driver {v.get('cuda_driver') or 'none'}, triton {v.get('triton') or 'not installed'}",
             "device:"]
    facts = [str(d.get("name"))]
    if d.get("capability"):
        facts.append(f"capability {'.'.join(map(str, d['capability']))}")
    if d.get("memory_bytes"):
        facts.append(f"{d['memory_bytes'] / 2**30:.1f} GiB")
    if d.get("cores"):
        facts.append(f"{d['cores']} cores")
    if "matmul_precision" in d:
        facts.append(f"float32 matmul precision {d['matmul_precision']}, TF32 matmul {_on(d.get('allow_tf32_matmul'))}, "
                     f"cuDNN TF32 {_on(d.get('allow_tf32_cudnn'))}")
    lines.append(f"  {d.get('type')}: " + ", ".join(facts))
    lines.append("checks:")
    for c in rec["checks"]:
        mark = "ok    " if c["passed"] else "FAILED"
        lines.append(f"  {mark} {c['path']:<22} {c['shape']:<8} {c['name']:<16} {c['detail']}")
    peak = rec.get("peak_gflops")
    lines.append(f"throughput (effective GFLOP/s = 2·width²·depth·samples/s; reference = {bake_doctor.describe_reference(rec.get('peak'))}, "
                 f"{peak:.1f} GFLOP/s):" if peak else "throughput:")
    for t in rec["throughput"]:
        ratio = t.get("ratio_to_reference", t.get("fraction_of_peak"))
        share = f", {ratio:.2f}× the reference" if ratio is not None else ""
        if ratio is not None and ratio > 1:
            share += (" (above the reference: the reference is not this device's peak — a busy machine, or kernels "
                      "faster than one large sgemm)")
        lines.append(f"  {t['path']:<22} {t['shape']:<8} {t['gflops']:.1f} GFLOP/s{share} "
                     f"({t['mlps']} MLPs × {t['samples_per_mlp']:,} samples in {t['seconds']:.1f} s); "
                     f"{t['projected']}: {format_duration(t['projected_s'])}")
    for note in rec.get("notes") or []:
        lines.append(f"note: {note}")
    n = len(rec["checks"])
    failed = sum(1 for c in rec["checks"] if not c["passed"])
    lines.append(f"all {n} checks passed" if not failed else f"{failed} of {n} checks FAILED")
    return lines


COMMANDS = [doctor]
