#!/usr/bin/env bash
# Installs the comparison engines and clients into bench/.venv (PyPI): DuckDB and Tableau
# Hyper, and psycopg 3 for the server benchmarks (bench/server_*.py).
set -euo pipefail
cd "$(dirname "$0")"
python3 -m venv .venv
.venv/bin/pip install --quiet duckdb tableauhyperapi "psycopg[binary]==3.3.9"
echo "ready: bench/.venv/bin/python bench/tpch_compare.py --sf 1 --threads 2"
