"""A busy machine never changes a grade: the cell clock, nbgrader's real error, the retry of a submission
that failed outside the student's code. Fast, except the real-kernel tests marked slow (a few seconds each).
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from conftest import skip_or_fail
from course_lib.grading.autograder import scoring, submissions
from course_lib.grading.sandbox import execute, failures, worker
from course_lib.grading.sandbox.cell_clock import OVER_LIMIT, TOO_BUSY, WITHIN, CellClock, run_queue_waits

# What nbgrader 0.9 logs when a notebook fails: its traceback indented under an ERROR line.
KERNEL_START_LOG = """[AutogradeApp | INFO] Converting notebook /tmp/x/autograded/ann/probe/probe.ipynb
[AutogradeApp | ERROR] There was an error processing assignment: /tmp/x/submitted/ann/probe
[AutogradeApp | ERROR] Traceback (most recent call last):
      File "/venv/nbgrader/converters/base.py", line 390, in convert_notebooks
        self.convert_single_notebook(notebook_filename)
      File "/venv/nbclient/client.py", line 566, in async_start_new_kernel_client
        await ensure_async(self.kc.wait_for_ready(timeout=self.startup_timeout))
        ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
    RuntimeError: Kernel didn't respond in 120 seconds

[AutogradeApp | WARNING] Removing failed assignment: /tmp/x/autograded/ann/probe
[AutogradeApp | ERROR] There was an error processing assignment 'probe' for student 'ann'
[AutogradeApp | ERROR] Please see the the above traceback for details on the specific errors on the above \
failures.
"""
MISSING_LOG = """[AutogradeApp | WARNING] No notebooks were matched by '/tmp/x/submitted/ann/probe/*.ipynb'
[AutogradeApp | ERROR] No notebooks were matched by '/tmp/x/submitted/ann/probe'
[AutogradeApp | ERROR] Did you mean: /tmp/x/submitted/ann/probe
"""


def _clock(limit: float, stretch: float, stalls: list[dict[int, float]]) -> tuple[CellClock, list]:
    """A clock ticking 1 s per reading; stalls[i]: seconds each thread waited for a core during tick i."""
    now, waited = [0.0], {}

    def waits(_pid):
        return {tid: int(seconds * 1e9) for tid, seconds in waited.items()}

    clock = CellClock(limit, stretch, root_pid=1, now=lambda: now[0], waits=waits)
    verdicts = []
    for stall in stalls:
        now[0] += 1
        for tid, seconds in stall.items():
            waited[tid] = waited.get(tid, 0) + seconds
        verdicts.append(clock.verdict())
    return clock, verdicts


def test_on_an_idle_machine_a_cell_is_charged_its_wall_time():
    clock, verdicts = _clock(5, 6, [{1: 0.0}] * 5)
    assert verdicts == [WITHIN] * 4 + [OVER_LIMIT] and clock.charged == 5


def test_time_spent_waiting_for_a_core_is_not_charged():
    clock, verdicts = _clock(5, 6, [{1: 0.75}] * 20)   # a quarter of a core: 4x oversubscribed
    assert verdicts == [WITHIN] * 19 + [OVER_LIMIT] and clock.charged == pytest.approx(5)


def test_no_cell_runs_longer_than_stretch_times_its_limit_in_wall_time():
    clock, verdicts = _clock(5, 6, [{1: 1.0}] * 30)    # never given a core
    assert verdicts == [WITHIN] * 29 + [TOO_BUSY] and clock.charged == 0 and clock.wall == 30


def test_the_most_delayed_thread_sets_the_pace_and_a_new_thread_counts_from_its_start():
    clock, _ = _clock(100, 6, [{1: 0.2, 2: 0.5}, {1: 0.2, 3: 0.9}])
    assert clock.charged == pytest.approx((1 - 0.5) + (1 - 0.9))


def test_a_clock_without_a_process_is_a_wall_clock():
    now = [0.0]
    clock = CellClock(3, 6, root_pid=None, now=lambda: now[0])
    now[0] = 3.0
    assert clock.verdict() == OVER_LIMIT and "3 s of the machine's time in 3 s" in clock.describe()


def test_run_queue_waits_reads_a_process_and_everything_it_started():
    if not Path("/proc/self/schedstat").exists():
        skip_or_fail("no /proc/<pid>/schedstat on this kernel: a cell's limit is counted in wall time")
    parent = subprocess.Popen([sys.executable, "-c", "import subprocess, time\n"
                               "child = subprocess.Popen(['sleep', '20'])\nprint(child.pid, flush=True)\n"
                               "time.sleep(20)"], stdout=subprocess.PIPE, text=True)
    try:
        child_pid = int(parent.stdout.readline())
        waits = run_queue_waits(parent.pid)
        assert {parent.pid, child_pid} <= set(waits) and all(ns >= 0 for ns in waits.values())
        assert run_queue_waits(child_pid).keys() == {child_pid}
    finally:
        parent.kill()
        parent.wait()


def test_nbgrader_error_is_the_tracebacks_exception_not_a_pointer_to_it():
    assert failures.nbgrader_error(KERNEL_START_LOG) == "RuntimeError: Kernel didn't respond in 120 seconds"
    assert failures.nbgrader_error(MISSING_LOG) == "No notebooks were matched by '/tmp/x/submitted/ann/probe'"
    stopped = "stopped after 900 s (the whole notebook's time limit)\n[AutogradeApp | INFO] Converting"
    assert failures.nbgrader_error(stopped) == "stopped after 900 s (the whole notebook's time limit)"
    assert failures.nbgrader_error("") == "nbgrader printed nothing"


def _write_notebook(folder: Path, outputs: list) -> Path:
    folder.mkdir(parents=True)
    cell = new_code_cell("x = 1")
    cell.outputs = outputs
    nbformat.write(new_notebook(cells=[cell]), folder / "probe.ipynb")
    return folder


BUSY_LOG = "[AutogradeApp | ERROR] cell test_x: GradingMachineBusy: the grading machine was too busy"


def test_a_kernel_that_could_not_start_or_a_busy_machine_is_the_machines_fault(tmp_path):
    clean = _write_notebook(tmp_path / "clean", [])
    starved = execute.error_output(execute.MACHINE_BUSY, "it had 3 s in 120 s")
    busy = _write_notebook(tmp_path / "busy", [starved])
    assert "Kernel didn't respond" in failures.machine_fault(False, KERNEL_START_LOG, clean)
    assert "it had 3 s in 120 s" in failures.machine_fault(True, BUSY_LOG, busy)
    # the same output raised by the notebook's own code, which the grader's log does not confirm
    assert failures.machine_fault(True, "[AutogradeApp | INFO] Converting", busy) is None
    assert failures.machine_fault(False, MISSING_LOG, clean) is None      # the submission's own fault
    assert failures.machine_fault(True, "", clean) is None
    ran_past = execute.error_output(execute.CELL_TIMEOUT, "ran past")
    timed_out = _write_notebook(tmp_path / "timeout", [ran_past])
    assert failures.machine_fault(True, "", timed_out) is None            # the student's cell ran too long


@pytest.mark.parametrize("busy", [True, False])
def test_the_whole_notebook_limit_is_the_machines_fault_only_on_a_machine_with_more_work_than_cores(
        monkeypatch, tmp_path, busy):
    monkeypatch.setattr(failures, "busy_machine", lambda: busy)
    stopped = "stopped after 900 s (the whole notebook's time limit)\n[AutogradeApp | INFO] Converting"
    fault = failures.machine_fault(False, stopped, tmp_path)
    assert (fault is not None) == busy and (not busy or "more work than cores" in fault)


def _fake_attempts(monkeypatch, tmp_path, runs: list[tuple[bool, str]]) -> list[int]:
    calls = []

    def attempt(setup, student, submission, scratch, uid, number):
        calls.append(number)
        ok, log = runs[len(calls) - 1]
        course = tmp_path / f"course-{number}"
        course.mkdir()
        return worker.AutogradeRun(student, ok, 1.0, course, log)

    monkeypatch.setattr(worker, "_attempt", attempt)
    return calls


def _setup(tmp_path) -> worker.AssignmentSetup:
    source = tmp_path / "source" / "probe"
    source.mkdir(parents=True, exist_ok=True)
    (tmp_path / "template.db").write_bytes(b"")
    return worker.AssignmentSetup("course", "probe", source, tmp_path / "template.db", [])


def test_a_submission_that_failed_outside_the_students_code_is_graded_once_more(monkeypatch, tmp_path):
    calls = _fake_attempts(monkeypatch, tmp_path, [(False, KERNEL_START_LOG), (False, KERNEL_START_LOG)])
    result = worker.autograde(_setup(tmp_path), "ann", {}, tmp_path, 61000)
    assert calls == [1, 2], "once more, and only once"
    assert "Kernel didn't respond in 120 seconds" in result.regraded
    assert not (tmp_path / "course-1").exists(), "the first attempt's course is set aside"
    outcome = scoring.Outcome(submissions.Submission("ann", {}), result.course_dir, result.ok, result.log,
                              result.seconds, {}, {}, regraded=result.regraded)
    first, second = scoring.attempt_notes(outcome)
    assert first.startswith("graded twice: the first attempt failed for a reason outside the student's code")
    assert second == ("nbgrader could not grade this submission: RuntimeError: Kernel didn't respond in 120 "
                      "seconds")   # what was merged is said once merged (scoring._merged_note)


def test_a_submission_that_failed_by_its_own_fault_is_graded_once(monkeypatch, tmp_path):
    calls = _fake_attempts(monkeypatch, tmp_path, [(False, MISSING_LOG)])
    result = worker.autograde(_setup(tmp_path), "ann", {}, tmp_path, 61000)
    assert calls == [1] and result.regraded == ""


def test_each_assignment_and_attempt_of_a_student_gets_its_own_course(tmp_path):
    first, other = _setup(tmp_path), _setup(tmp_path)
    other.assignment = "probe_other"
    folders = {worker.build_course(first, "ann", {}, tmp_path, 61000),
               worker.build_course(other, "ann", {}, tmp_path, 61001),
               worker.build_course(first, "ann", {}, tmp_path, 61000, attempt=2)}
    assert len(folders) == 3


RUN_LOG: list[str] = []   # what the last _run_cells logged, as nbgrader's log shows it


class _LogLines(logging.Handler):
    def __init__(self):
        super().__init__()
        RUN_LOG.clear()

    def emit(self, record):
        RUN_LOG.append(f"[AutogradeApp | {record.levelname}] {record.getMessage()}")


def _run_cells(*sources: str, limit: int = 3, stretch: float = 6.0, idle_s: int = 5):
    notebook = new_notebook(cells=[new_code_cell(source) for source in sources],
                            metadata={"kernelspec": {"name": "python3", "language": "python",
                                                     "display_name": "Python 3"}})
    step = execute.SandboxedExecute(timeout=limit, busy_stretch=stretch, iopub_timeout=idle_s,
                                    kernel_name="python3")
    handler = _LogLines()
    step.log.addHandler(handler)
    start = time.monotonic()
    try:
        notebook, _ = step.preprocess(notebook, {"metadata": {"path": "."}})
    finally:
        step.log.removeHandler(handler)
    return [[(o.get("ename"), o.get("evalue", "") or o.get("text", "")) for o in cell.outputs]
            for cell in notebook.cells], time.monotonic() - start


@pytest.mark.slow
def test_an_endless_cell_costs_that_cell_and_the_cells_after_it_run():
    outputs, seconds = _run_cells("x = 1", "while True:\n    pass", "print('after', x)")
    assert {name for name, _ in outputs[1]} & {execute.CELL_TIMEOUT, execute.MACHINE_BUSY}, outputs
    assert outputs[2] == [(None, "after 1\n")], outputs
    assert seconds < 3 * 6 + 30, f"an endless cell is stopped within its stretched limit ({seconds:.0f} s)"


@pytest.mark.slow
def test_a_kernel_that_ignores_the_interrupt_costs_the_cells_from_there_on_not_the_notebook():
    deaf = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass"
    outputs, seconds = _run_cells("print('before')", deaf, "print('never')")
    assert outputs[0] == [(None, "before\n")]
    assert {name for name, _ in outputs[1]} & {execute.KERNEL_STUCK, execute.MACHINE_BUSY}, outputs
    assert [name for name, _ in outputs[2]] in ([execute.KERNEL_STUCK], [execute.MACHINE_BUSY])
    assert "did not run" in outputs[2][0][1]
    assert seconds < 3 * 6 + 5 + 30, f"a stuck kernel is shut down in bounded time ({seconds:.0f} s)"


@pytest.mark.slow
def test_a_cell_the_machine_was_too_busy_to_run_is_named_so_the_grader_grades_it_again(monkeypatch, tmp_path):
    class StarvedClock(CellClock):
        def verdict(self):
            super().verdict()
            return TOO_BUSY

    monkeypatch.setattr(execute, "CellClock", StarvedClock)
    outputs, _ = _run_cells("import time\ntime.sleep(30)", "print('next')")
    assert execute.MACHINE_BUSY in {name for name, _ in outputs[0]} and outputs[1] == [(None, "next\n")]
    folder = _write_notebook(tmp_path / "autograded", [execute.error_output(name, text)
                                                       for name, text in outputs[0] if name])
    assert "too busy" in failures.machine_fault(True, "\n".join(RUN_LOG), folder)
