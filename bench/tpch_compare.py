#!/usr/bin/env python3
"""TPC-H side by side: Apiary, DuckDB and Tableau Hyper on the same .tbl data, in the same run.

    bench/tpch_compare.py --sf 1 --threads 2 --runs 5 [--queries 1,6] [--data DIR]

Builds Apiary (release), writes the TPC-H .tbl files once (bench/data/sf<SF>/, with
`apiary tpch-gen`), loads them into both engines with the same DDL, runs every query once
to warm up and --runs times more, and prints the median times, the ratios Apiary/DuckDB and
Apiary/Hyper per query and the geometric means. Hyper runs in its own process (hyperd); with
--threads below the machine's cores every engine is pinned to that many cores (Hyper has no
thread setting), so all engines get the same cores. Answers are checked against tpch/answers where the
repository has them, else (SF10) Apiary's and DuckDB's answers are compared. Needs the duckdb
and tableauhyperapi Python packages (bench/setup.sh installs them into bench/.venv).
Also prints each engine's peak resident size (for DuckDB, this Python process's).
"""

import argparse
import contextlib
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLES = ["region", "nation", "part", "supplier", "partsupp", "customer", "orders", "lineitem"]


def schema_sql():
    """The TPC-H DDL Apiary uses (crates/engine/src/tpch.rs), so both engines get the same."""
    source = open(os.path.join(ROOT, "crates/engine/src/tpch.rs")).read()
    return re.search(r'pub const SCHEMA: &str = "(.*?)";', source, re.S).group(1)


def query_text(q):
    return open(os.path.join(ROOT, f"tpch/queries/q{q:02d}.sql")).read()


def answer_rows(sf, q, directory=None):
    path = os.path.join(directory or os.path.join(ROOT, f"tpch/answers/sf{sf:g}"), f"q{q:02d}.csv")
    if not os.path.exists(path):
        return None
    text = open(path).read()
    if text.endswith("\n"):
        text = text[:-1]
    lines = text.split("\n")[1:]
    return [line.split("|") for line in lines]


def same(expected, actual):
    if len(expected) != len(actual):
        return False
    for erow, arow in zip(expected, actual):
        if len(erow) != len(arow):
            return False
        for e, a in zip(erow, arow):
            a = "" if a is None else str(a)
            try:
                x, y = float(e), float(a)
                if abs(x - y) > 0.01 and abs(x - y) > 1e-6 * max(abs(x), abs(y)):
                    return False
            except ValueError:
                if e.rstrip() != a.rstrip():
                    return False
    return True


def ensure_data(sf, data_dir, apiary):
    if all(os.path.exists(os.path.join(data_dir, f"{t}.tbl")) for t in TABLES):
        return
    os.makedirs(data_dir, exist_ok=True)
    print(f"writing TPC-H SF{sf:g} .tbl files to {data_dir}", file=sys.stderr)
    subprocess.run([apiary, "tpch-gen", "--sf", str(sf), "--dir", data_dir], check=True)


def run_apiary(apiary, sf, threads, runs, data_dir, queries, extra_settings, results_dir):
    cmd = [apiary, "bench", "tpch", "--sf", str(sf), "--threads", str(threads), "--runs", str(runs), "--data", data_dir,
           "--queries", ",".join(map(str, queries)), "--results", results_dir]
    for setting in extra_settings:
        cmd += ["--set", setting]
    # wait4 gives this child's own peak resident size (RUSAGE_CHILDREN would include cargo's).
    with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        with pinned(threads):
            process = subprocess.Popen(cmd, stdout=stdout, stderr=stderr, text=True)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        stderr.seek(0)
        sys.stderr.write(stderr.read())
        stdout.seek(0)
        output = stdout.read()
    results = {}
    for line in output.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            results[r["q"]] = r
    PEAK_RSS_GB["apiary"] = usage.ru_maxrss / 2**20
    return results


# Peak resident size of each engine's process, in GiB: Apiary's own process, this Python
# process for DuckDB (which runs in it; Python itself adds about 0.1 GB), and hyperd.
PEAK_RSS_GB = {}


def peak_rss_gb(pid):
    """VmHWM, the peak resident size, of a running process."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 2**20
    return float("nan")


def run_duckdb(sf, threads, runs, data_dir, queries, apiary_results):
    """Times DuckDB; `correct` compares with the reference answers, or where the repository
    has none (SF10), with Apiary's answers ("agree")."""
    with pinned(threads):
        return run_duckdb_pinned(sf, threads, runs, data_dir, queries, apiary_results)


def run_duckdb_pinned(sf, threads, runs, data_dir, queries, apiary_results):
    import duckdb
    con = duckdb.connect()
    con.execute(f"SET threads = {threads}")
    started = time.perf_counter()
    load_duckdb(con, data_dir)
    print(f"duckdb loaded SF{sf:g} in {time.perf_counter() - started:.2f} s", file=sys.stderr)
    results = {}
    for q in queries:
        sql = query_text(q)
        rows = con.execute(sql).fetchall()
        times = []
        for _ in range(max(runs, 1)):
            t = time.perf_counter()
            con.execute(sql).fetchall()
            times.append(time.perf_counter() - t)
        expected = answer_rows(sf, q)
        result = {"engine": "duckdb", "sf": sf, "threads": threads, "q": q, "median_s": statistics.median(times),
                  "min_s": min(times), "rows": len(rows), "correct": None if expected is None else same(expected, rows)}
        ours = answer_rows(sf, q, apiary_results)
        if expected is None and ours is not None:
            result["agree"] = same(ours, rows)
        results[q] = result
    PEAK_RSS_GB["duckdb"] = peak_rss_gb(os.getpid())
    return results


def hyper_pids():
    """Process ids of running Hyper server processes. The executable is hyperd, but its main
    thread renames itself (to hyperdMain), so match the prefix."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/comm") as f:
                    if f.read().strip().startswith("hyperd"):
                        pids.append(int(entry))
            except OSError:
                pass
    return pids


def allowed_cpus(pid):
    """The cores each thread of process `pid` may run on, as a set of Cpus_allowed_list strings."""
    lists = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("Cpus_allowed_list:"):
                        lists.add(line.split()[1])
        except OSError:
            pass
    return lists


def load_duckdb(con, data_dir):
    """Creates the TPC-H tables on DuckDB connection `con` and loads data_dir's .tbl files."""
    con.execute(schema_sql())
    for t in TABLES:
        con.execute(f"COPY {t} FROM '{os.path.join(data_dir, t + '.tbl')}' (DELIMITER '|')")


def load_hyper(con, data_dir):
    """Creates the TPC-H tables on Hyper connection `con` and loads data_dir's .tbl files."""
    for statement in schema_sql().split(";"):
        if statement.strip():
            con.execute_command(statement)
    for t in TABLES:
        # .tbl lines end with the delimiter: a throw-away column takes the empty last field.
        path = os.path.join(data_dir, t + ".tbl")
        con.execute_command(f"ALTER TABLE {t} ADD COLUMN trailing_delimiter TEXT")
        con.execute_command(f"COPY {t} FROM '{path}' WITH (FORMAT csv, DELIMITER '|')")
        con.execute_command(f"ALTER TABLE {t} DROP COLUMN trailing_delimiter")


@contextlib.contextmanager
def pinned(threads):
    """Runs the block with this process pinned to cores 0..threads-1 when that is fewer
    than the machine's, then restores its mask. Affinity is per thread and inherited when
    a thread or process is made, so what the block starts (Apiary's process, DuckDB's
    threads, hyperd) keeps the mask: with --threads 1 every engine gets the same one core
    instead of one engine being pinned while the others may move to a quieter core.
    Yields whether it pinned."""
    ours = os.sched_getaffinity(0)
    pin = threads < os.cpu_count()
    if pin:
        os.sched_setaffinity(0, set(range(threads)))
    try:
        yield pin
    finally:
        os.sched_setaffinity(0, ours)


@contextlib.contextmanager
def hyper_server(threads):
    """A running Hyper process (hyperd), pinned to `threads` cores when that is fewer than
    the machine's (Hyper has no thread setting), and a scratch directory for its logs and
    database files, removed afterwards; yields (hyper, workdir)."""
    from tableauhyperapi import HyperProcess, Telemetry
    workdir = tempfile.mkdtemp(prefix="apiary-hyper-")
    # Pinning hyperd's pid after it has started would pin its main thread only, not the
    # worker pool it has already made: it is started pinned (see `pinned`).
    try:
        with pinned(threads) as pin:
            hyper = HyperProcess(telemetry=Telemetry.DO_NOT_SEND_USAGE_DATA_TO_TABLEAU, parameters={"log_dir": workdir})
        with hyper:
            if pin:
                wanted = f"0-{threads - 1}" if threads > 1 else "0"
                masks = [allowed_cpus(pid) for pid in hyper_pids()]
                if not masks or any(m != {wanted} for m in masks):
                    raise RuntimeError(f"hyperd is not pinned to cores {wanted}: {masks}")
            yield hyper, workdir
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def run_hyper(sf, threads, runs, data_dir, queries, apiary_results):
    """Times Tableau Hyper like DuckDB above (same DDL, same .tbl files, same checks)."""
    from tableauhyperapi import Connection, CreateMode
    results = {}
    with hyper_server(threads) as (hyper, workdir):
        with Connection(hyper.endpoint, os.path.join(workdir, "tpch.hyper"), CreateMode.CREATE_AND_REPLACE) as con:
            started = time.perf_counter()
            load_hyper(con, data_dir)
            print(f"hyper loaded SF{sf:g} in {time.perf_counter() - started:.2f} s", file=sys.stderr)
            for q in queries:
                sql = query_text(q)
                rows = con.execute_list_query(sql)
                times = []
                for _ in range(max(runs, 1)):
                    t = time.perf_counter()
                    con.execute_list_query(sql)
                    times.append(time.perf_counter() - t)
                expected = answer_rows(sf, q)
                result = {"engine": "hyper", "sf": sf, "threads": threads, "q": q, "median_s": statistics.median(times),
                          "min_s": min(times), "rows": len(rows),
                          "correct": None if expected is None else same(expected, rows)}
                ours = answer_rows(sf, q, apiary_results)
                if expected is None and ours is not None:
                    result["agree"] = same(ours, rows)
                results[q] = result
            PEAK_RSS_GB["hyper"] = max((peak_rss_gb(pid) for pid in hyper_pids()), default=float("nan"))
    return results


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def benchmark_arguments(description):
    """The options every benchmark script takes: --sf, --threads, --runs, --queries, --data."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sf", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--queries", default=",".join(str(q) for q in range(1, 23)))
    parser.add_argument("--data", help="directory with <table>.tbl files (default bench/data/sf<SF>)")
    return parser


def prepare(args):
    """Builds Apiary (release) and writes the data if missing; returns (apiary binary, data dir)."""
    data_dir = args.data or os.path.join(ROOT, "bench", "data", f"sf{args.sf:g}")
    subprocess.run(["cargo", "build", "--release", "--quiet", "--bin", "apiary"], cwd=ROOT, check=True)
    apiary = os.path.join(ROOT, "target", "release", "apiary")
    ensure_data(args.sf, data_dir, apiary)
    return apiary, data_dir


def main():
    parser = benchmark_arguments(__doc__)
    parser.add_argument("--set", action="append", default=[], help="extra SET statement for Apiary")
    parser.add_argument("--no-duckdb", action="store_true")
    parser.add_argument("--no-hyper", action="store_true")
    parser.add_argument("--json", help="also write all results as JSON lines to this file")
    args = parser.parse_args()
    queries = [int(q) for q in args.queries.split(",")]
    apiary, data_dir = prepare(args)

    results_dir = tempfile.mkdtemp(prefix="apiary-answers-")
    ours = run_apiary(apiary, args.sf, args.threads, args.runs, data_dir, queries, args.set, results_dir)
    theirs = {} if args.no_duckdb else run_duckdb(args.sf, args.threads, args.runs, data_dir, queries, results_dir)
    hypers = {} if args.no_hyper else run_hyper(args.sf, args.threads, args.runs, data_dir, queries, results_dir)
    shutil.rmtree(results_dir, ignore_errors=True)

    print(f"TPC-H SF{args.sf:g}, {args.threads} threads, median of {args.runs} hot runs (ms); ratio = Apiary / other")
    print(f"{'query':>5} {'apiary':>10} {'duckdb':>10} {'hyper':>10} {'/duckdb':>8} {'/hyper':>8}  correct (apiary/duckdb/hyper)")
    times = {"apiary": [], "duckdb": [], "hyper": []}
    ratios = {"duckdb": [], "hyper": []}
    for q in queries:
        a, d, h = ours.get(q), theirs.get(q), hypers.get(q)
        ms = lambda r: r["median_s"] * 1e3 if r else float("nan")
        for name, r in (("apiary", a), ("duckdb", d), ("hyper", h)):
            if r:
                times[name].append(r["median_s"])
        row_ratios = {}
        for name, r in (("duckdb", d), ("hyper", h)):
            row_ratios[name] = ms(a) / ms(r) if a and r else float("nan")
            if a and r:
                ratios[name].append(row_ratios[name])
        verdict = lambda r: ("ERROR" if r is None else ("agree" if r.get("agree") else "DIFFER") if "agree" in r else str(r["correct"]))
        correct = f"{verdict(a) if a else 'ERROR'}/{verdict(d) if d else '-'}/{verdict(h) if h else '-'}"
        print(f"{'Q%02d' % q:>5} {ms(a):10.1f} {ms(d):10.1f} {ms(h):10.1f} {row_ratios['duckdb']:8.2f} {row_ratios['hyper']:8.2f}  {correct}")
    g = lambda v: geomean(v) * 1e3
    print(f"{'geo':>5} {g(times['apiary']):10.1f} {g(times['duckdb']):10.1f} {g(times['hyper']):10.1f} "
          f"{geomean(ratios['duckdb']):8.2f} {geomean(ratios['hyper']):8.2f}")
    print("peak resident size (GiB): " + ", ".join(f"{name} {gb:.2f}" for name, gb in PEAK_RSS_GB.items()))
    if args.json:
        with open(args.json, "w") as f:
            for r in list(ours.values()) + list(theirs.values()) + list(hypers.values()):
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
