#!/usr/bin/env bash
# Installs what the TPC-DS benchmark needs (PyPI only, nothing downloaded at run time):
# bench/.venv (DuckDB for the timing runs, via bench/setup.sh) and the generator's own
# environment bench/.venv/tpcds: DuckDB 1.5.5 with its tpcds extension (dsdgen, the 99
# queries), which the PyPI wheel duckdb-extension-tpcds ships for that DuckDB version only.
set -euo pipefail
cd "$(dirname "$0")"
[ -x .venv/bin/python ] || bash setup.sh
python3 -m venv .venv/tpcds
.venv/tpcds/bin/pip install --quiet duckdb==1.5.5 duckdb-extension-tpcds==1.5.5
echo "ready: bench/.venv/bin/python bench/tpcds_compare.py --sf 1 --threads 2"
