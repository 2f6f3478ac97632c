"""Old import paths keep working for a term (course_lib/moved_modules.py), with a FutureWarning that names
the new path, without importing early and without shadowing a package's own names."""

from __future__ import annotations

import subprocess
import sys

from course_lib import moved_modules


def _python(code: str, *options: str) -> subprocess.CompletedProcess:
    run = subprocess.run([sys.executable, *options, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return run


def _out(code: str) -> str:
    return _python(code).stdout.strip()


def test_every_old_path_reaches_the_module_that_now_holds_it():
    assert len(moved_modules.MOVED) > 70
    _out("import importlib\n"
         "from course_lib.moved_modules import MOVED\n"
         "import course_lib.grading\n"
         "for old, new in MOVED.items():\n"
         "    assert dir(importlib.import_module(old)) == dir(importlib.import_module(new)), old\n")


def test_every_module_that_was_in_course_lib_dist_has_its_old_path():
    """Each of the 36 modules of the flat course_lib/dist (git history) answers at its old path."""
    old = {path.removeprefix("course_lib.dist.") for path in moved_modules.MOVED
           if path.startswith("course_lib.dist.")}
    assert {"runner", "launch", "processes", "traffic_log", "calibration", "predictions", "slurm_jobs",
            "preemption_rank", "torch_pipelines", "sequence_split", "_child", "calibrate"} <= old
    assert len(old) == 37   # the 36 modules and the older ``calibrate``


def test_an_old_notebook_cell_still_runs_and_is_told_where_the_name_went():
    run = _python("from course_lib.grading.ring_checks import check_ring_all_reduce\n"
                  "from course_lib.grading.hidden import instructor_checks\n"
                  "from course_lib.dist import run_ranks, record_traffic\n"
                  "print(check_ring_all_reduce.__module__, run_ranks.__module__)", "-W", "default")
    assert run.stdout.split() == ["course_lib.grading.checks.ch02_ring.visible",
                                  "course_lib.real.launch.runner"]
    assert "FutureWarning: course_lib.dist moved to course_lib.real" in run.stderr
    assert ("FutureWarning: course_lib.grading.ring_checks moved to course_lib.grading.checks.ch02_ring"
            in run.stderr)


def test_an_old_module_path_and_an_old_package_attribute_both_work():
    out = _out("import course_lib.dist.runner as runner\n"
               "import course_lib.dist\n"
               "from course_lib.dist.traffic_log import record_traffic\n"
               "print(runner.run_ranks.__module__, course_lib.dist.runner is runner,\n"
               "      course_lib.dist.record_traffic is record_traffic)")
    assert out == "course_lib.real.launch.runner True True"


def test_a_flat_check_module_that_became_an_exercise_folder_still_reads_its_names():
    """``checks.ch02_ring`` was a module and is now the exercise's folder: it reads through to visible.py."""
    out = _out("from course_lib.grading.checks.ch02_ring import check_ring_all_reduce, REFUSAL\n"
               "import course_lib.grading.checks.ch10_ring_attention as folder\n"
               "print(check_ring_all_reduce.__module__, 'check_ring_attention' in dir(folder))")
    assert out == "course_lib.grading.checks.ch02_ring.visible True"


def test_the_old_calibrate_module_path_does_not_shadow_the_calibrate_function():
    out = _out("from course_lib.dist.calibrate import RANKS_AT_ONCE_SHARE\n"
               "import course_lib.dist as d\n"
               "from course_lib.dist import calibrate\n"
               "print(callable(calibrate), callable(d.calibrate), RANKS_AT_ONCE_SHARE)")
    assert out.startswith("True True")


def test_old_paths_import_nothing_until_used():
    out = _out("import sys, course_lib.dist, course_lib.grading\n"
               "print('course_lib.real.measure.calibration' in sys.modules, 'torch' in sys.modules)")
    assert out == "False False"


def test_python_dash_m_on_the_old_launcher_runs_the_new_one():
    """A Slurm script from before the move (``python -m course_lib.dist.launch``) still starts its ranks."""
    run = subprocess.run([sys.executable, "-m", "course_lib.dist.launch", "--help"], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "usage: python -m course_lib.real.launch.torchrun" in run.stdout
    assert "course_lib.dist.launch moved to python -m course_lib.real.launch.torchrun" in run.stderr
    assert "RuntimeWarning" not in run.stderr


def test_the_table_says_when_it_goes():
    assert moved_modules.UNTIL >= "2027-01-01" and all(new.startswith("course_lib.")
                                                       for new in moved_modules.MOVED.values())
