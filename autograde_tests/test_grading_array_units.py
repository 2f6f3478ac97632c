"""Fast tests of grading a class as a Slurm job array (no cluster needed): sharing the students out,
a task's time limit and sbatch line, reading task states from sacct and scontrol, the re-submit
decision, site settings, merging a task's gradebook, and the sandbox uid leases.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from nbgrader.api import Gradebook

from course_lib.grading.autograder import class_run
from course_lib.grading.autograder.report import StudentResult
from course_lib.grading.sandbox import uid_lease
from course_lib.grading.slurm import array_grading, array_tasks
from course_lib.real.cluster import slurm_jobs


def test_split_is_even_contiguous_and_never_empty():
    students = [f"s{i:02d}" for i in range(30)]
    shares = array_tasks.split(students, 4)
    assert [len(s) for s in shares] == [8, 8, 7, 7]
    assert sum(shares, []) == students
    assert array_tasks.split(["a", "b"], 4) == [["a"], ["b"]]
    assert array_tasks.split([], 3) == []
    with pytest.raises(ValueError, match="at least one task"):
        array_tasks.split(students, 0)


def test_time_limit_and_sbatch_line():
    options = array_tasks.ArrayOptions(tasks=4, partition="cpu", account="course", minutes_per_submission=2,
                                      cpus_per_task=2)
    assert array_tasks.time_limit_minutes(options, 8) == 5 + 8
    command = array_tasks.sbatch_command(options, Path("/c/slurm/grade_array.sbatch"), Path("/w"), [1, 3], 8)
    assert command[:3] == ["sbatch", "--parsable", "--array=1,3"]
    assert {"--partition=cpu", "--account=course", "--cpus-per-task=2", "--time=13",
            "--output=/w/task-%a.out"} <= set(command)
    assert command[-2:] == ["/c/slurm/grade_array.sbatch", "/w"]
    plain = array_tasks.sbatch_command(array_tasks.ArrayOptions(), Path("s"), Path("/w"), [0], 1)
    assert not any(part.startswith(("--partition", "--account")) for part in plain)


SACCT = """\
812_0|COMPLETED|0:0
812_1|FAILED|9:0
812_2|CANCELLED by 0|0:15
812_3|TIMEOUT|0:0
812_[4-5]|PENDING|0:0
812_6|NODE_FAIL|0:0
"""

SCONTROL = """\
JobId=900 ArrayJobId=900 ArrayTaskId=2-3 JobState=PENDING Reason=Resources ExitCode=0:0
JobId=901 ArrayJobId=900 ArrayTaskId=1 JobState=RUNNING ExitCode=0:0
JobId=902 ArrayJobId=900 ArrayTaskId=0 JobState=FAILED Reason=NonZeroExitCode ExitCode=137:0
"""


def parse_sacct(text: str) -> dict[int, tuple[str, str]]:
    return array_tasks.read_states(slurm_jobs.sacct_records(text, array_tasks.SACCT_COLUMNS))


def test_task_states_from_sacct_and_scontrol():
    states = parse_sacct(SACCT)
    assert states[1] == ("FAILED", "9:0") and states[2][0] == "CANCELLED"
    assert states[4] == states[5] == ("PENDING", "0:0")
    assert array_tasks.read_states(slurm_jobs.scontrol_records(SCONTROL)) == {
        0: ("FAILED", "137:0"), 1: ("RUNNING", "0:0"), 2: ("PENDING", "0:0"), 3: ("PENDING", "0:0")}


def test_task_states_fall_back_to_scontrol_without_accounting():
    def runner(command, **_):
        if command[0] == "sacct":
            return subprocess.CompletedProcess(command, 1, "", "Slurm accounting storage is disabled")
        return subprocess.CompletedProcess(command, 0, SCONTROL, "")
    assert array_tasks.task_states("900", runner)[0] == ("FAILED", "137:0")


def test_only_failures_are_retried_not_cancellations():
    states = {i: s for i, s in parse_sacct(SACCT).items() if i not in (4, 5)}
    # task 0 completed but left no done marker (it died after Slurm's view of it): retried too
    assert array_tasks.to_retry(states, finished=set()) == [0, 1, 3, 6]
    assert array_tasks.to_retry(states, finished={0}) == [1, 3, 6]


def test_site_settings_come_from_site_sh_and_the_environment_wins(tmp_path):
    (tmp_path / "slurm").mkdir()
    (tmp_path / "slurm" / "site.sh").write_text(
        'COURSE_GRADE_PARTITION="${COURSE_GRADE_PARTITION:-grading}"\nCOURSE_GRADE_TASKS=16\n'
        'COURSE_GRADE_MINUTES_PER_SUBMISSION=1.5\necho noise\n')
    settings = array_tasks.site_settings(tmp_path, {"PATH": os.environ["PATH"], "COURSE_GRADE_TASKS": "8"})
    assert settings == {"partition": "grading", "tasks": 8, "minutes_per_submission": 1.5}
    with pytest.raises(SystemExit, match="not a number"):
        array_tasks.site_settings(tmp_path, {"PATH": os.environ["PATH"], "COURSE_GRADE_TASKS": "many"})


def test_grading_on_slurm_without_sbatch_says_where_to_run_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SystemExit, match="sbatch is not on PATH"):
        array_grading.grade_on_slurm(class_run.GradingRun(course_root=tmp_path), array_tasks.ArrayOptions())
    assert not (tmp_path / "grading").exists()


def test_a_task_holds_only_when_named_until_told_to_go(tmp_path, monkeypatch):
    monkeypatch.setattr(array_grading, "HOLD_LIMIT_S", 0.3)
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "77")
    monkeypatch.setenv("COURSE_GRADE_HOLD_TASK", f"2:{tmp_path}")
    array_grading._hold_if_asked(1)
    assert not list(tmp_path.iterdir())
    start = time.monotonic()
    array_grading._hold_if_asked(2)  # nobody says go: it waits out HOLD_LIMIT_S
    assert time.monotonic() - start >= 0.3
    assert (tmp_path / "held-1").read_text() == f"{os.getpid()} 77_2"
    (tmp_path / "go-2").touch()
    start = time.monotonic()
    array_grading._hold_if_asked(2)  # the re-queued task: told to go at once
    assert time.monotonic() - start < 0.3 and (tmp_path / "held-2").exists()


def _gradebooks(*paths: Path) -> list[str]:
    """The same one-notebook assignment `hw` (cells c1, c2: 2 points each) in a gradebook at each path;
    made once and copied, since a new gradebook costs an alembic run."""
    first = f"sqlite:///{paths[0]}"
    with Gradebook(first) as gb:
        gb.add_assignment("hw")
        gb.add_notebook("hw", "hw")
        for cell in ("c1", "c2"):
            gb.add_grade_cell(cell, "hw", "hw", max_score=2, cell_type="code")
    for path in paths[1:]:
        shutil.copyfile(paths[0], path)
    return [f"sqlite:///{path}" for path in paths]


def _submit(url: str, student: str, scores: tuple, flagged=()) -> None:
    with Gradebook(url) as gb:
        gb.add_student(student)
        submission = gb.add_submission("hw", student)
        for grade, score in zip(submission.notebooks[0].grades, scores, strict=True):
            grade.auto_score = score
            grade.needs_manual_grade = grade.cell.name in flagged
        gb.db.commit()


def test_merge_task_copies_scores_flags_and_notebooks_and_keeps_a_hand_score_and_no_refused_id(tmp_path):
    class_run.class_files.put_venv_on_path()
    work, course = tmp_path / "work", tmp_path / "course"
    task = work / "task-0"
    (task / "grading" / "autograded" / "ann" / "hw").mkdir(parents=True)
    (task / "grading" / "autograded" / "ann" / "hw" / "hw.ipynb").write_text("{}")
    (course / "grading").mkdir(parents=True)
    task_db, class_db = _gradebooks(task / "grading" / "gradebook.db", course / "grading" / "gradebook.db")
    _submit(task_db, "ann", scores=(2.0, 0.0), flagged={"c2"})
    _submit(class_db, "ann", scores=(2.0, 1.0))
    with Gradebook(class_db) as gb:  # the instructor's hand score on c1, whose automatic score stays 2
        gb.find_grade("c1", "hw", "hw", "ann").manual_score = 1.5
        gb.db.commit()
    entry = StudentResult("ann", "hw", 0, 0, notes=[], seconds=3.0).__dict__
    # a submission the task refused (its folder's name is no student id): 0, kept out of the gradebook
    refused = StudentResult("Zoë", "hw", 0.0, 4.0, notes=["student id «Zoë» is not usable"], refused=True)
    (task / "done.json").write_text(json.dumps([entry, refused.__dict__]))
    (work / "plan.json").write_text(json.dumps({"fingerprints": {"ann/hw": "ann's files", "Zoë/hw": "its"}}))
    result, kept = array_grading.merge_task(class_run.GradingRun(course_root=course), work, 0)
    assert (result.score, result.max_score, result.cells) == (1.5, 4.0, {"c1": 1.5, "c2": 0.0})
    assert (kept.student, kept.score, kept.refused, kept.needs_review) == ("Zoë", 0.0, True, True)
    with Gradebook(class_db) as gb:
        assert [student.id for student in gb.students] == ["ann"]
    with Gradebook(class_db) as gb:
        c1, c2 = (gb.find_grade(c, "hw", "hw", "ann") for c in ("c1", "c2"))
        assert (c1.manual_score, c1.needs_manual_grade) == (1.5, False)
        assert (c2.auto_score, c2.needs_manual_grade) == (0.0, True)
    assert (course / "grading" / "autograded" / "ann" / "hw" / "hw.ipynb").exists()
    # ann's merged submission is recorded as graded (the next run keeps it while unchanged), Zoë's is not
    assert json.loads((course / "grading" / "graded.json").read_text()) == {"hw/ann": "ann's files"}


def test_uid_leases_never_overlap_and_skip_busy_uids(tmp_path):
    first = uid_lease.lease(63000, 150, tmp_path)
    second = uid_lease.lease(63000, 50, tmp_path)
    assert first.first == 63000 and second.first == 63200  # blocks of 100: 63000-63199 are taken
    first.release()
    with uid_lease.lease(63000, 50, tmp_path) as third:
        assert third.first == 63000
    second.release()
    with pytest.raises(RuntimeError, match="no free range"):
        uid_lease.lease(uid_lease.HIGHEST_UID - 10, 50, tmp_path)


@pytest.mark.skipif(os.geteuid() != 0, reason="running a process under another uid needs root")
def test_uid_lease_skips_a_range_some_process_runs_in(tmp_path):
    sleeper = subprocess.Popen(["setpriv", "--reuid=64150", "--regid=64150", "--clear-groups", "sleep", "30"])
    try:
        for _ in range(100):
            if 64150 in uid_lease.uids_in_use(64100, 64200):
                break
            time.sleep(0.05)
        with uid_lease.lease(64100, 100, tmp_path) as held:
            assert held.first == 64200
    finally:
        sleeper.kill()
        sleeper.wait()


LEASE_AND_HOLD = """
import sys, time
from pathlib import Path
from course_lib.grading.sandbox import uid_lease
held = uid_lease.lease(65000 - 900, 120, Path(sys.argv[1]))
print(held.first, flush=True)
time.sleep(3)
"""


def test_two_concurrent_grading_processes_lease_disjoint_uids(tmp_path):
    runs = [subprocess.Popen([sys.executable, "-c", LEASE_AND_HOLD, str(tmp_path)], stdout=subprocess.PIPE,
                             text=True, cwd=Path(__file__).resolve().parents[1]) for _ in range(2)]
    firsts = sorted(int(run.communicate(timeout=60)[0]) for run in runs)
    assert firsts == [64100, 64300]  # 120 uids span two blocks of 100: the second run starts after them
