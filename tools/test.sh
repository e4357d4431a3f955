#!/usr/bin/env bash
# Install whestbench with its test extras into ./.venv and run the test suite.
# Also provisions the released whestbench 0.16.2 in its own venv (./.refvenv) for the
# side-by-side identity and interop tests, and torch (CPU build) for the torch-backend tests.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
# torch: the pinned CPU build (the [gpu] extra would otherwise resolve to a multi-GB CUDA build).
# triton: its interpreter (TRITON_INTERPRET=1) runs the fused GPU kernel's logic on the CPU in the tests.
# One pip call resolves everything at once (quick when pip's cache is warm); where torch or triton
# cannot be installed, each is tried alone and the tests that need it are skipped.
if ! .venv/bin/python -m pip install -q "torch==2.13.0" "triton==3.7.1" -e ".[test,plot]"; then
    .venv/bin/python -m pip install -q "torch==2.13.0" || echo "warning: torch not installed; torch-backend tests will be skipped" >&2
    .venv/bin/python -m pip install -q "triton==3.7.1" || echo "warning: triton not installed; kernel-logic tests will be skipped" >&2
    .venv/bin/python -m pip install -q -e ".[test,plot]"
fi
export WHEST_REFERENCE_PYTHON
WHEST_REFERENCE_PYTHON=$(PYTHON=.venv/bin/python bash tools/make-reference-venv.sh .refvenv | tail -n 1)
export WHEST_REQUIRE_REFERENCE=${WHEST_REQUIRE_REFERENCE:-1}
# Unless told otherwise: leave out the tests marked slow (`-m slow` runs just those, `-m ""` every
# test), and run on pytest-xdist workers, one per core up to 4, each taking whole test files so a
# module's fixtures are made once (`-n 0`: one process).
# OpenMP threads (torch's, numba's) that wait sleep instead of spinning, so workers sharing the cores
# do not burn them on each other's waits (the numbers are the same either way).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
mark=(-m "not slow")
workers=(-n auto --maxprocesses 4 --dist loadfile)
for arg in "$@"; do
    case $arg in
        -m | -m?*) mark=() ;;
        -n | -n?* | --numprocesses | --numprocesses=*) workers=() ;;
    esac
done
exec .venv/bin/python -m pytest -q -p no:cacheprovider ${mark[@]+"${mark[@]}"} ${workers[@]+"${workers[@]}"} "$@"
