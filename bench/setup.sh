#!/usr/bin/env bash
# Installs the comparison engines into bench/.venv (PyPI): DuckDB and Tableau Hyper.
set -euo pipefail
cd "$(dirname "$0")"
python3 -m venv .venv
.venv/bin/pip install --quiet duckdb tableauhyperapi
echo "ready: bench/.venv/bin/python bench/tpch_compare.py --sf 1 --threads 2"
