"""Issue 53: the grading parent holds no submission beyond its stated size or past its turn, and
`nbgrader autograde` (root, outside the sandbox) runs under a memory limit of its own."""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import sys
import tracemalloc

import nbformat

from autograde_tests.support import probe_course
from course_lib.grading.autograder import submissions
from course_lib.grading.autograder.submission_spool import (
    MAX_SUBMISSION_BYTES,
    MAX_SUBMISSION_FILES,
    read_submission,
    submission_size,
)
from course_lib.grading.sandbox import worker


def _shape():
    return submissions.AssignmentShape("probe", {"probe": probe_course.probe_notebook()})


def _folder(tmp_path, student="ann"):
    folder = tmp_path / "submitted" / student / "probe"
    folder.mkdir(parents=True)
    return folder


def test_a_submission_over_the_limit_is_refused_unread_with_its_reason(tmp_path):
    folder = _folder(tmp_path)
    with open(folder / "probe.ipynb", "wb") as handle:   # 45 MB that take no disk (a sparse file)
        handle.truncate(45 * 2**20)
    (folder / ".ipynb_checkpoints").mkdir()
    os.symlink("/dev/zero", folder / "endless")          # links are not read: they count nothing
    assert submission_size(folder) == (1, 45 * 2**20)
    shape = _shape()
    tracemalloc.start()
    try:
        submission = read_submission(tmp_path / "submitted", "ann", shape, {}, tmp_path / "spool")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2**20, f"the parent read {peak} bytes of a refused submission"
    assert submission.refused and "45.0 MiB, over the grader's limit of 20 MiB" in submission.refused
    assert submission.files == {} and submission.refused in submission.notes
    assert not (tmp_path / "spool").exists()


def test_a_submission_of_more_files_than_collect_copies_is_refused(tmp_path):
    folder = _folder(tmp_path)
    for index in range(MAX_SUBMISSION_FILES + 5):
        (folder / f"f{index}.txt").write_bytes(b"")
    assert submission_size(folder)[0] == MAX_SUBMISSION_FILES + 1   # the count stops there
    submission = read_submission(tmp_path / "submitted", "ann", _shape(), {}, tmp_path / "spool")
    assert f"more than {MAX_SUBMISSION_FILES} files" in submission.refused


def test_a_vetted_submission_is_kept_on_disk_for_its_turn_not_in_memory(tmp_path):
    nbformat.write(probe_course.probe_notebook(), _folder(tmp_path) / "probe.ipynb")
    (tmp_path / "submitted" / "ann" / "probe" / "notes.txt").write_text("my notes")
    submission = read_submission(tmp_path / "submitted", "ann", _shape(), {}, tmp_path / "spool")
    assert not submission.refused and set(submission.files) == {"probe.ipynb", "notes.txt"}
    kept = submission.files["notes.txt"]
    assert kept.read_text() == "my notes" and kept.parent == tmp_path / "spool" / "probe" / "ann"
    for folder in (tmp_path / "spool", kept.parent.parent, kept.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700   # the grader's alone
    assert nbformat.reads(submission.files["probe.ipynb"].read_text(), as_version=4).cells
    assert MAX_SUBMISSION_BYTES == 20 * 2**20   # the limit docs/grading.md states


def test_the_worker_copies_a_spooled_file_into_the_students_course(tmp_path):
    (tmp_path / "source").mkdir()
    (tmp_path / "template.db").write_bytes(b"")
    (tmp_path / "kept.txt").write_text("spooled")
    setup = worker.AssignmentSetup("course", "probe", tmp_path / "source", tmp_path / "template.db", [])
    course = worker.build_course(setup, "ann", {"kept.txt": tmp_path / "kept.txt", "raw.txt": b"raw"},
                                 tmp_path, uid=os.getuid())
    submitted = course / "submitted" / "ann" / "probe"
    assert (submitted / "kept.txt").read_text() == "spooled"
    assert (submitted / "raw.txt").read_bytes() == b"raw"


def test_nbgrader_runs_under_a_memory_limit_that_the_kernel_may_set_again(monkeypatch, tmp_path):
    probe = ("import resource, sys\n"
             "soft, hard = resource.getrlimit(resource.RLIMIT_AS)\n"
             "print(soft, hard)\n"
             "try:\n    bytearray(3 * 2**30)\nexcept MemoryError:\n    print('MemoryError')\n"
             "resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, 4 * 2**30))\n")   # as the kernel's policy
    command = worker.under_memory_limit([sys.executable, "-I", "-c", probe], 2 * 2**30)
    lines = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True).stdout.split("\n")
    assert lines[0].split()[0] == str(2 * 2**30) and lines[1] == "MemoryError"
    ran = []
    monkeypatch.setattr(worker.GRADING_SESSIONS, "run",
                        lambda command, *a, **k: (ran.append(command), (1, ""))[1])
    monkeypatch.setattr(worker, "kill_processes_of_uid", lambda uid: None)
    # no memory group here (as root one would prefix the command: test_grading_memory_group.py has it)
    monkeypatch.setattr(worker, "student_group", lambda uid, limit: contextlib.nullcontext())
    (tmp_path / "source").mkdir()
    (tmp_path / "template.db").write_bytes(b"")
    setup = worker.AssignmentSetup("course", "probe", tmp_path / "source", tmp_path / "template.db", [])
    worker._attempt(setup, "ann", {}, tmp_path, os.getuid(), 1)
    assert ran[0][:6] == worker.under_memory_limit([], worker.NBGRADER_MEMORY_BYTES)
    assert "nbgrader" in ran[0] and "autograde" in ran[0]
