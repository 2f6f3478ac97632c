"""Old import paths keep working for a term (course_lib/moved_modules.py), without importing early and
without shadowing a package's own names."""

from __future__ import annotations

import subprocess
import sys

from course_lib import moved_modules


def _python(code: str) -> str:
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()


def test_every_old_path_reaches_the_module_that_now_holds_it():
    assert len(moved_modules.MOVED) > 30
    _python("import importlib\n"
            "from course_lib.moved_modules import MOVED\n"
            "import course_lib.grading, course_lib.dist\n"
            "for old, new in MOVED.items():\n"
            "    assert dir(importlib.import_module(old)) == dir(importlib.import_module(new)), old\n")


def test_an_old_notebook_cell_still_runs():
    assert _python("from course_lib.grading.ring_checks import check_ring_all_reduce\n"
                   "from course_lib.grading.hidden import instructor_checks\n"
                   "print(check_ring_all_reduce.__module__)") == "course_lib.grading.checks.ch02_ring.visible"


def test_a_flat_check_module_that_became_an_exercise_folder_still_reads_its_names():
    """``checks.ch02_ring`` was a module and is now the exercise's folder: it reads through to visible.py."""
    out = _python("from course_lib.grading.checks.ch02_ring import check_ring_all_reduce, REFUSAL\n"
                  "import course_lib.grading.checks.ch10_ring_attention as folder\n"
                  "print(check_ring_all_reduce.__module__, 'check_ring_attention' in dir(folder))")
    assert out == "course_lib.grading.checks.ch02_ring.visible True"


def test_the_old_calibrate_module_path_does_not_shadow_the_calibrate_function():
    out = _python("from course_lib.dist.calibrate import RANKS_AT_ONCE_SHARE\n"
                  "import course_lib.dist as d\n"
                  "from course_lib.dist import calibrate\n"
                  "print(callable(calibrate), callable(d.calibrate), RANKS_AT_ONCE_SHARE)")
    assert out.startswith("True True")


def test_old_paths_import_nothing_until_used():
    out = _python("import sys, course_lib.dist, course_lib.grading\n"
                  "print('course_lib.dist.calibration' in sys.modules, 'torch' in sys.modules)")
    assert out == "False False"


def test_the_table_says_when_it_goes():
    assert moved_modules.UNTIL >= "2027-01-01" and all(new.startswith("course_lib.")
                                                       for new in moved_modules.MOVED.values())
