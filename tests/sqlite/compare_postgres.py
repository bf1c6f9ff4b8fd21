#!/usr/bin/env python3
"""Runs the corpus records Apiary fails on PostgreSQL, to tell Apiary's bugs from
expectations that hold only for SQLite (the corpus marks few of them `skipif postgresql`).

Reads the failures the corpus test wrote (`<corpus>/failures-<mode>.tsv`), runs each
failing record's file on PostgreSQL (its statements, and the failing queries) with the
corpus test's conventions (values formatted by declared type, rowsort/valuesort, MD5 above
the hash threshold), and writes one verdict per record:

  pg-matches-expected  PostgreSQL gives the corpus's answer: Apiary is wrong or lacks a feature
  pg-matches-apiary    PostgreSQL gives Apiary's (different) answer: a SQLite-only expectation
  pg-error             PostgreSQL raises an error too: a SQLite-only expectation
  pg-differs           PostgreSQL gives a third answer

With --annotate, the entries of tests/sqlite/expected_failures.txt whose verdict is
pg-matches-apiary or pg-error (with an Apiary error) get the prefix `[pg-agrees]`.

usage: pip install psycopg2-binary
       compare_postgres.py CORPUS_TEST_DIR FAILURES_TSV OUT_TSV [--annotate LIST]
The server is found through the libpq variables (PGHOST, PGPORT, PGUSER, PGDATABASE); the
records run in a schema `corpus` that is dropped and created per file.
"""
import hashlib
import math
import sys
from collections import defaultdict
from decimal import Decimal

import psycopg2

HASH_THRESHOLD_DEFAULT = 8


def parse(path):
    """Yields records: dict(kind, line, conds, sql, types, sort, expected, hash_threshold)."""
    lines = open(path).read().split("\n")
    i = 0
    conds = []
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.startswith("#"):
            i += 1
            continue
        tok = line.split("#")[0].split() if line.startswith(("skipif", "onlyif")) else line.split()
        if tok[0] in ("skipif", "onlyif"):
            conds.append((tok[0], tok[1]))
            i += 1
            continue
        if tok[0] == "hash-threshold":
            yield dict(kind="hash", value=int(tok[1]), line=i + 1)
            i += 1
            continue
        if tok[0] == "halt":
            return
        if tok[0] == "statement":
            start = i + 1
            i += 1
            sql = []
            while i < len(lines) and lines[i] != "":
                sql.append(lines[i])
                i += 1
            yield dict(kind="statement", line=start, conds=conds, sql="\n".join(sql), ok=tok[1] == "ok")
            conds = []
            continue
        if tok[0] == "query":
            start = i + 1
            types = tok[1]
            sort = tok[2] if len(tok) > 2 else "nosort"
            i += 1
            sql = []
            while i < len(lines) and lines[i] != "" and lines[i] != "----":
                sql.append(lines[i])
                i += 1
            expected = []
            if i < len(lines) and lines[i] == "----":
                i += 1
                while i < len(lines) and lines[i] != "":
                    expected.append(lines[i])
                    i += 1
            yield dict(kind="query", line=start, conds=conds, sql="\n".join(sql), types=types, sort=sort,
                       expected=expected)
            conds = []
            continue
        raise SystemExit(f"{path}:{i+1}: cannot parse {line!r}")


def skipped(conds):
    for kind, label in conds:
        if kind == "skipif" and label == "postgresql":
            return True
        if kind == "onlyif" and label != "postgresql":
            return True
    return False


def atol(text):
    text = text.lstrip()
    sign = 1
    if text[:1] in "+-" and text:
        sign = -1 if text[0] == "-" else 1
        text = text[1:]
    digits = ""
    for c in text:
        if not c.isdigit():
            break
        digits += c
    return sign * int(digits) if digits else 0


def fmt(value, t):
    if value is None:
        return "NULL"
    if t == "I":
        if isinstance(value, bool):
            return str(int(value))
        if isinstance(value, int):
            return str(value)
        if isinstance(value, (float, Decimal)):
            if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
                return "0"
            return str(int(value))
        return str(atol(str(value)))
    if t == "R":
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                value = 0.0
        return "%.3f" % float(value)
    if isinstance(value, bool):
        text = "1" if value else "0"
    else:
        text = str(value)
    if text == "":
        return "(empty)"
    return "".join(c if " " <= c <= "~" else "@" for c in text)


def render(rows, types, sort, threshold):
    """The crate's `actual` string: rows joined by newlines, values by spaces (or the hash)."""
    rows = [[fmt(v, t) for v, t in zip(row, types)] for row in rows]
    if sort == "rowsort":
        rows.sort()
    elif sort == "valuesort":
        rows = sorted([[v] for row in rows for v in row])
    values = sum(len(r) for r in rows)
    if threshold > 0 and values > threshold:
        md5 = hashlib.md5()
        for row in rows:
            for v in row:
                md5.update(v.encode() + b"\n")
        return f"{values} values hashing to {md5.hexdigest()}"
    return "\n".join(" ".join(r) for r in rows)


def expected_text(record):
    exp = record["expected"]
    if len(exp) == 1 and "values hashing to" in exp[0]:
        return exp[0]
    n = len(record["types"])
    return "\n".join(" ".join(exp[i:i + n]) for i in range(0, len(exp), n))


AGREES = "[pg-agrees] "


def annotate(list_path, verdicts):
    lines = open(list_path).read().split("\n")
    out = []
    for line in lines:
        location = line.split(" ", 1)[0]
        verdict = verdicts.get(location)
        if verdict and not line.startswith("#") and AGREES.strip() not in line:
            class_text = line.split(" ", 1)[1] if " " in line else ""
            is_error = class_text != "wrong result"
            if verdict == "pg-matches-apiary" or (verdict == "pg-error" and is_error):
                line = f"{location} {AGREES}{class_text}"
        out.append(line)
    open(list_path, "w").write("\n".join(out))


def main():
    corpus, failures_tsv, out_path = sys.argv[1:4]
    annotate_path = sys.argv[5] if len(sys.argv) > 5 and sys.argv[4] == "--annotate" else None
    verdicts = {}
    wanted = defaultdict(dict)
    with open(failures_tsv) as f:
        next(f)
        for line in f:
            parts = line.rstrip("\n").split("\t")
            loc, cls, detail = parts[0], parts[1], parts[2]
            actual = parts[3].replace("\\n", "\n") if len(parts) > 3 else ""
            file, lineno = loc.rsplit(":", 1)
            wanted[file][int(lineno)] = (cls, actual)
    out = open(out_path, "w")
    out.write("location\tapiary_class\tpostgresql\tpg_detail\n")
    for file, targets in wanted.items():
        conn = psycopg2.connect("")
        conn.autocommit = True
        cur = conn.cursor()
        cur.execute("DROP SCHEMA IF EXISTS corpus CASCADE; CREATE SCHEMA corpus; SET search_path = corpus")
        cur.execute("SET statement_timeout = '20s'")
        threshold = HASH_THRESHOLD_DEFAULT
        for rec in parse(f"{corpus}/{file}"):
            if rec["kind"] == "hash":
                threshold = rec["value"]
                continue
            if skipped(rec["conds"]):
                continue
            if rec["kind"] == "statement":
                if rec["sql"].upper().startswith(("CREATE INDEX", "CREATE UNIQUE INDEX")):
                    continue
                try:
                    cur.execute(rec["sql"])
                    pg = "ok"
                except psycopg2.Error as e:
                    pg = "error: " + str(e).splitlines()[0]
                if rec["line"] in targets:
                    out.write(f"{file}:{rec['line']}\t{targets[rec['line']][0]}\tstatement {pg}\t\n")
                continue
            if rec["line"] not in targets:
                continue
            cls, apiary_actual = targets[rec["line"]]
            try:
                cur.execute(rec["sql"])
                rows = cur.fetchall()
                if len(cur.description) != len(rec["types"]):
                    verdict, detail = "pg-error", "wrong number of columns"
                else:
                    got = render(rows, rec["types"], rec["sort"], threshold)
                    exp = expected_text(rec)
                    if got == exp:
                        verdict, detail = "pg-matches-expected", ""
                    elif apiary_actual and got == apiary_actual:
                        verdict, detail = "pg-matches-apiary", ""
                    else:
                        verdict, detail = "pg-differs", got.replace("\n", "\\n")[:300]
            except psycopg2.Error as e:
                verdict, detail = "pg-error", str(e).splitlines()[0]
            out.write(f"{file}:{rec['line']}\t{cls}\t{verdict}\t{detail}\n")
            verdicts[f"{file}:{rec['line']}"] = verdict
        conn.close()
        out.flush()
    if annotate_path:
        annotate(annotate_path, verdicts)


if __name__ == "__main__":
    main()
