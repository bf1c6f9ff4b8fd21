#!/usr/bin/env bash
# Installs the PostgreSQL clients crates/server/tests/clients.rs drives, pinned:
#   tests/clients/.venv                     python with psycopg 3 (PyPI)
#   tests/clients/lib/postgresql-*.jar      the PostgreSQL JDBC driver (Maven Central)
# psql comes from the Debian package postgresql-client, java from a JDK (17+).
set -euo pipefail
cd "$(dirname "$0")"
PSYCOPG_VERSION=3.3.9
JDBC_VERSION=42.7.14
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c "import psycopg" 2>/dev/null; then
    python3 -m venv .venv
    .venv/bin/pip install --quiet "psycopg[binary]==${PSYCOPG_VERSION}"
fi
if [ ! -f "lib/postgresql-${JDBC_VERSION}.jar" ]; then
    mkdir -p lib
    mvn -q dependency:copy -Dartifact="org.postgresql:postgresql:${JDBC_VERSION}" -DoutputDirectory=lib
fi
echo "clients ready: $(.venv/bin/python -c 'import psycopg; print("psycopg", psycopg.__version__)'), $(ls lib/*.jar)"
