"""The GIL is released while a statement runs; statements can be cancelled."""

import _thread
import threading
import time

import pytest

import apiary

# A cross join of 4e10 pairs: minutes of work in almost no memory.
SLOW = "SELECT count(*) FROM range(200000) a(x), range(200000) b(y) WHERE (x + y) % 7 = 3"


def interrupt_after(con, seconds):
    """Interrupts `con` after `seconds`, and again every 0.2 s until the returned event is
    set: an interrupt that comes before the statement started (a loaded machine can take
    longer than `seconds` to parse and plan it) does not cancel it, so one alone could
    leave the test waiting for minutes."""
    done = threading.Event()

    def keep_interrupting():
        if done.wait(seconds):
            return
        while True:
            con.interrupt()
            if done.wait(0.2):
                return

    threading.Thread(target=keep_interrupting, daemon=True).start()
    return done


def test_keyboard_interrupt_cancels_the_query():
    con = apiary.connect()

    def interrupt_soon():
        time.sleep(0.3)
        _thread.interrupt_main()

    threading.Thread(target=interrupt_soon).start()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        con.execute(SLOW)
    assert time.monotonic() - started < 20
    # The connection still works.
    assert con.execute("SELECT 1").fetchone() == (1,)


def test_interrupt_from_another_thread():
    con = apiary.connect()
    done = interrupt_after(con, 0.3)
    with pytest.raises(apiary.OperationalError) as raised:
        con.execute(SLOW)
    done.set()
    assert raised.value.sqlstate == "57014"


def test_gil_is_released_while_a_query_runs():
    con = apiary.connect()
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.01)

    thread = threading.Thread(target=ticker)
    thread.start()
    done = interrupt_after(con, 1.0)
    with pytest.raises(apiary.OperationalError):
        con.execute(SLOW)
    done.set()
    stop.set()
    thread.join()
    assert len(ticks) > 20


def test_threads_with_their_own_cursors():
    con = apiary.connect()
    con.execute("CREATE TABLE t AS SELECT x, x % 10 AS g FROM range(100000) r(x)")
    errors = []
    results = []

    def worker(n):
        try:
            cur = con.cursor()
            for _ in range(5):
                results.append((n % 10, cur.execute("SELECT sum(x) FROM t WHERE g = ?", [n % 10]).fetchone()[0]))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(results) == 40
    for group, total in results:
        assert total == sum(range(group, 100000, 10))


def test_one_connection_shared_by_threads():
    # Relations hold their own results, so threads can share a connection's sql().
    con = apiary.connect()
    errors = []

    def worker():
        try:
            for i in range(20):
                assert con.sql("SELECT ?", [i]).fetchone() == (i,)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors


def test_progress_bar_on_stderr(capfd):
    # A statement longer than a second draws the bar on stderr, redrawn over one line,
    # and clears it when the statement ends (here: cancelled after 1.6 s).
    con = apiary.connect(config={"progress_bar": True, "threads": 1})
    done = interrupt_after(con, 1.6)
    with pytest.raises(apiary.OperationalError):
        con.execute(SLOW)
    done.set()
    err = capfd.readouterr().err
    assert "%" in err and "s elapsed" in err and err.count("[") >= 2, err
    assert err.endswith("\r"), err
    # Short statements draw nothing; a cursor draws like its connection.
    assert con.cursor().execute("SELECT 1").fetchone() == (1,)
    assert capfd.readouterr().err == ""
    # Without the option, nothing is drawn.
    plain = apiary.connect()
    done = interrupt_after(plain, 1.3)
    with pytest.raises(apiary.OperationalError):
        plain.execute(SLOW)
    done.set()
    assert capfd.readouterr().err == ""


def test_ctrl_c_inside_the_progress_bar_cancels(capfd):
    # Python raises a KeyboardInterrupt in whatever Python code runs when Ctrl-C comes:
    # while the bar draws, that is the drawing callback. It still cancels the statement.
    con = apiary.connect(config={"progress_bar": True})

    def interrupted_drawing(line):
        raise KeyboardInterrupt

    con._progress = interrupted_drawing
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        con.execute(SLOW)
    assert time.monotonic() - started < 20
    assert con.execute("SELECT 1").fetchone() == (1,)
