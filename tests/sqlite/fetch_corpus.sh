#!/usr/bin/env bash
# Brings SQLite's sqllogictest corpus (public domain) onto this machine for
# crates/engine/tests/sqlite_corpus.rs.
#
# Source: the Maven Central artifact net.hydromatic:sql-logic-test:0.3, whose jar carries
# SQLite's test scripts under test/ (select1-5.test, random/**, index/**, evidence/**; the
# random/ and select files are byte-identical to SQLite's apart from CRLF line endings).
# The jar is fetched with Maven (`mvn dependency:copy`), checked against the SHA-256
# pinned below, and only test/select*.test, test/random/**, test/index/delete/** and
# test/evidence/slt_lang_update.test are unpacked.
#
# Usage: tests/sqlite/fetch_corpus.sh [DIR]
#   DIR defaults to $APIARY_SQLITE_CORPUS_DIR, else <repo>/target/sqlite-corpus.
#   The corpus lands in DIR/test. Idempotent: a complete DIR is left alone (checked by a
#   stamp file holding the pinned checksum), so repeated runs cost nothing.
set -euo pipefail

readonly ARTIFACT="net.hydromatic:sql-logic-test:0.3"
readonly JAR_NAME="sql-logic-test-0.3.jar"
readonly JAR_SHA256="801efc1904e802795a20ce30559025c0b5a7a21840114722717c0466089c13f0"
# Files unpacked from the jar: 5 select files, 391 random/ files, 14 index/delete/ files
# and 1 evidence/ file.
readonly EXPECTED_FILES=411
# What the stamp of a complete directory holds: the jar and how many files came out of it.
readonly STAMP="$JAR_SHA256 $EXPECTED_FILES"

repo_root="$(cd "$(dirname "$0")/../.." && pwd)"
dir="${1:-${APIARY_SQLITE_CORPUS_DIR:-$repo_root/target/sqlite-corpus}}"
stamp="$dir/.complete"

if [[ -f "$stamp" && "$(cat "$stamp")" == "$STAMP" ]]; then
    exit 0
fi

if ! command -v mvn >/dev/null 2>&1; then
    echo "fetch_corpus.sh: Maven (mvn) is needed to fetch $ARTIFACT; install it (e.g. apt-get install maven)" >&2
    exit 1
fi

mkdir -p "$dir"
download="$dir/download"
rm -rf "$download" "$dir/test"
mkdir -p "$download"

echo "fetch_corpus.sh: fetching $ARTIFACT into $dir" >&2
if ! mvn -B -q -Dstyle.color=never dependency:copy -Dartifact="$ARTIFACT" -DoutputDirectory="$download" \
    >"$dir/mvn.log" 2>&1; then
    cat "$dir/mvn.log" >&2
    echo "fetch_corpus.sh: Maven could not fetch $ARTIFACT (log above)" >&2
    exit 1
fi

actual="$(sha256sum "$download/$JAR_NAME" | cut -d' ' -f1)"
if [[ "$actual" != "$JAR_SHA256" ]]; then
    echo "fetch_corpus.sh: checksum mismatch for $JAR_NAME: expected $JAR_SHA256, got $actual" >&2
    exit 1
fi

# The jar is a zip file; unzip it with Python when `unzip` is not installed.
if command -v unzip >/dev/null 2>&1; then
    unzip -q -o "$download/$JAR_NAME" 'test/select*.test' 'test/random/*' 'test/index/delete/*' \
        'test/evidence/slt_lang_update.test' -d "$dir"
else
    python3 - "$download/$JAR_NAME" "$dir" <<'EOF'
import sys, zipfile
jar, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(jar) as z:
    names = [n for n in z.namelist()
             if (n.startswith("test/select") and n.endswith(".test")) or n.startswith("test/random/")
             or n.startswith("test/index/delete/") or n == "test/evidence/slt_lang_update.test"]
    z.extractall(out, names)
EOF
fi

count="$(find "$dir/test" -type f -name '*.test' | wc -l)"
if [[ "$count" -ne "$EXPECTED_FILES" ]]; then
    echo "fetch_corpus.sh: expected $EXPECTED_FILES test files, found $count" >&2
    exit 1
fi
rm -rf "$download" "$dir/mvn.log"
echo "$STAMP" > "$stamp"
echo "fetch_corpus.sh: $count files in $dir/test" >&2
