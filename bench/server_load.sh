#!/usr/bin/env bash
# The long load-and-faults run of issue 11: 64 clients for 60 s running TPC-H SF0.1
# queries with 10% cancels and 10% abrupt disconnects (crates/server/tests/load.rs,
# release build). `cargo test` runs the same test short (8 clients, 5 s, SF0.01).
set -euo pipefail
cd "$(dirname "$0")/.."
APIARY_LOAD_CLIENTS=${APIARY_LOAD_CLIENTS:-64} APIARY_LOAD_SECONDS=${APIARY_LOAD_SECONDS:-60} APIARY_LOAD_SF=${APIARY_LOAD_SF:-0.1} \
    cargo test --release -j 2 -p apiary-server --test load -- --nocapture
