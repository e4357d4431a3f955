#!/usr/bin/env bash
# Create (idempotently) a virtual environment holding the released whestbench 0.16.2, the reference
# our bakes are compared with, and print the path of its python.
#
#   tools/make-reference-venv.sh [DIR]          # DIR defaults to <repo>/.refvenv (gitignored)
#   PYTHON=.venv/bin/python tools/make-reference-venv.sh /tmp/refvenv
#
# The reference shares our package name and our `whest` command, so it lives in its own venv and is
# only ever run as a subprocess. It gets the SAME numpy version as the environment whose python is
# in $PYTHON (default: python3): numpy's PCG64 draws and its bundled OpenBLAS decide the numbers, so
# bit-identity is only meaningful between equal numpy builds. Needs network access to PyPI (or the
# pip index configured on this machine) the first time; later runs only check and print.
# Everything but the final path goes to stderr, so `REF=$(tools/make-reference-venv.sh)` works.
set -euo pipefail

REFERENCE_VERSION="0.16.2"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
dir="${1:-$repo/.refvenv}"
# Absolute, so the printed python works from any working directory (tests run it with cwd= a temp folder).
mkdir -p "$(dirname "$dir")"
dir="$(cd "$(dirname "$dir")" && pwd)/$(basename "$dir")"
python="${PYTHON:-python3}"

log() { echo "make-reference-venv: $*" >&2; }

if ! command -v "$python" >/dev/null 2>&1; then
    log "python not found: '$python'. Set PYTHON to the interpreter of the environment to match."
    exit 1
fi
numpy_version="$("$python" -c 'import numpy; print(numpy.__version__)' 2>/dev/null)" || {
    log "'$python' cannot import numpy; set PYTHON to the python of our environment (e.g. .venv/bin/python)."
    exit 1
}

ref_python="$dir/bin/python"

installed_ok() {
    [ -x "$ref_python" ] && "$ref_python" - "$REFERENCE_VERSION" "$numpy_version" >/dev/null 2>&1 <<'EOF'
import sys
from importlib.metadata import version
want_ref, want_np = sys.argv[1], sys.argv[2]
sys.exit(0 if version("whestbench") == want_ref and version("numpy") == want_np else 1)
EOF
}

if installed_ok; then
    log "reusing $dir (whestbench==$REFERENCE_VERSION, numpy==$numpy_version)"
    echo "$ref_python"
    exit 0
fi

if [ ! -x "$ref_python" ]; then
    log "creating $dir with $("$python" -c 'import sys; print(sys.executable)')"
    # A venv made from inside another venv is based on the same base interpreter: same Python version.
    "$python" -m venv "$dir"
fi
log "installing whestbench==$REFERENCE_VERSION numpy==$numpy_version into $dir"
"$ref_python" -m pip install --quiet "whestbench==$REFERENCE_VERSION" "numpy==$numpy_version" >&2

if ! installed_ok; then
    log "$dir does not hold whestbench==$REFERENCE_VERSION with numpy==$numpy_version after installing; remove it and re-run."
    exit 1
fi
echo "$ref_python"
