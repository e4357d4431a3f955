"""The progress reporter: rates count only this run's work, the count never steps backwards, log lines
carry no terminal codes."""

from __future__ import annotations

import io
import re

from whestbench.cli.progress import Reporter
from whestbench.events import Event, Progress


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def samples(done: int, total: int = 1000, recovered: int = 0, **kw) -> Progress:
    return Progress("samples", done, total, mlps_done=0, mlps_total=2, flops_per_item=1e8, recovered=recovered, **kw)


def reporter(clock: Clock) -> tuple[Reporter, io.StringIO]:
    stream = io.StringIO()
    return Reporter("bake", mode="log", log_every=3600, stream=stream, clock=clock), stream


def test_the_rate_counts_only_what_this_run_computed():
    clock = Clock()
    rep, _ = reporter(clock)
    with rep:
        rep(Event("start", progress=samples(400, recovered=400)))  # 400 finished by an earlier run
        clock.t += 10
        rep(Event("progress", progress=samples(700, recovered=600)))  # a unit resumed a 200-sample checkpoint
        status = rep.status(rep.last)
    assert rep.computed() == 100
    assert "10 samples/s" in status and "1.00 GFLOP/s" in status  # 100 samples in 10 s, not 300 or 700
    assert "ETA 0:00:30" in status


def test_the_count_never_steps_backwards():
    clock = Clock()
    rep, _ = reporter(clock)
    with rep:
        rep(Event("start", progress=samples(0)))
        rep(Event("progress", progress=samples(500)))
        rep(Event("progress", progress=samples(450)))  # a peer's running count dropped for a moment
        assert rep.last.done == 500
        rep(Event("progress", progress=samples(600)))
        assert rep.last.done == 600


def test_the_final_line_has_no_terminal_codes_and_each_kind_keeps_its_own_count():
    clock = Clock()
    rep, stream = reporter(clock)
    with rep:
        rep(Event("start", progress=samples(0)))
        clock.t += 2
        rep(Event("progress", progress=samples(1000)))
        rep(Event("note", message="a \x1b[31mred\x1b[0m note"))
        rep(Event("progress", progress=Progress("rows", 0, 2)))
        rep(Event("progress", progress=Progress("rows", 2, 2)))
    text = stream.getvalue()
    assert "\x1b" not in text and "note: a" in text
    assert re.search(r"bake: 2/2 rows \(100\.0%\)", text)
    assert rep.computed("samples") == 1000 and rep.computed("rows") == 2


def test_the_closing_line_is_not_a_repeat_of_the_last_one():
    clock = Clock()
    rep, stream = reporter(clock)
    with rep:
        rep(Event("progress", progress=Progress("rows", 0, 2)))
        rep(Event("progress", progress=Progress("rows", 2, 2)))
        rep._line()  # the timer showed the final count already
    assert stream.getvalue().count("2/2 rows") == 1


def test_notes_from_many_threads_come_out_as_whole_lines():
    import threading

    clock = Clock()
    rep, stream = reporter(clock)
    with rep:
        def note(k):
            for j in range(200):
                rep(Event("note", message=f"thread {k} note {j}"))

        threads = [threading.Thread(target=note, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 800 and all(re.fullmatch(r"note: thread \d note \d+", line) for line in lines)


def test_a_phase_that_ends_gets_its_final_line_before_the_next_phase_starts():
    clock = Clock()
    rep, stream = reporter(clock)
    with rep:
        rep(Event("start", progress=samples(0)))
        rep(Event("progress", progress=samples(1000)))  # between timer ticks: not printed yet
        rep(Event("progress", progress=Progress("rows", 0, 2)))
    lines = stream.getvalue().splitlines()
    assert "0/1,000 samples (0.0%)" in lines[0] and "1,000/1,000 samples (100.0%)" in lines[1]
    assert "0/2 rows" in lines[2]


def test_a_log_line_names_its_phase_and_each_phase_gets_its_final_count():
    """Issue 28: combine-splits' verification of its inputs showed nothing; its phases are named."""
    clock = Clock()
    rep, stream = reporter(clock)
    with rep:
        rep(Event("progress", progress=Progress("MLPs", 0, 4, phase="verifying input ./public")))
        clock.t += 1
        rep(Event("progress", progress=Progress("MLPs", 4, 4, phase="verifying input ./public")))
        rep(Event("progress", progress=Progress("MLPs", 0, 3, phase="verifying input ./holdout")))
    lines = stream.getvalue().splitlines()
    assert "] bake: verifying input ./public: 0/4 MLPs (0.0%)" in lines[0]
    assert "verifying input ./public: 4/4 MLPs (100.0%)" in lines[1]
    assert "verifying input ./holdout: 0/3 MLPs" in lines[2]


def test_the_eta_starts_from_the_timing_probes_rate_and_moves_to_the_measured_one():
    """Issue 28: a bake's first seconds (kernel loading, control-variate fits, cold caches) made its
    first ETA 30-70 % long. With the probe's rate (``expect``) the ETA starts there and weighs the
    measured rate in over ``ETA_SETTLE_S``; the rate shown stays the measured one."""
    from whestbench.cli.progress import ETA_SETTLE_S

    clock = Clock()
    rep, _ = reporter(clock)
    rep.expect("samples", 20.0)  # the probe: 20 samples/s
    with rep:
        rep(Event("start", progress=samples(0)))
        clock.t += ETA_SETTLE_S / 4
        rep(Event("progress", progress=samples(50)))  # 10 samples/s so far: the start-up
        status = rep.status(rep.last)
        assert "10 samples/s" in status
        # 950 left at 0.25 · 10 + 0.75 · 20 = 17.5 samples/s: 54 s (the measured rate alone: 95 s)
        assert "ETA 0:00:54" in status
        clock.t += ETA_SETTLE_S  # settled: the measured rate alone
        rep(Event("progress", progress=samples(500)))
        assert f"ETA 0:00:{round(500 / (500 / (ETA_SETTLE_S * 1.25))):02d}" in rep.status(rep.last)
    other, _ = reporter(Clock())
    other.expect("samples", None)  # no probe (a small bake): the measured rate, as before
    assert other.expected == {}
