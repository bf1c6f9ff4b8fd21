#!/usr/bin/env bash
# Creates python/.venv with what the Python package's tests need, pinned: maturin (to
# build the package), pytest, pyarrow, pandas, Polars and NumPy (and DuckDB, which the
# benchmarks in bench/python_compare.py compare with).
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c "import pytest, pyarrow, pandas, polars, numpy, maturin" 2>/dev/null; then
    python3 -m venv .venv
    .venv/bin/pip install --quiet --upgrade pip
    .venv/bin/pip install --quiet -r requirements-dev.txt
fi
echo "python ready: $(.venv/bin/python -c 'import pyarrow, pandas, polars; print("pyarrow", pyarrow.__version__, "pandas", pandas.__version__, "polars", polars.__version__)')"
