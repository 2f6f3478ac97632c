"""Old import paths of course_lib.grading, kept working for one term after the move into role folders.

Notebooks students already hold import e.g. ``course_lib.grading.ring_checks``; each old name below is
an alias of the module that now holds it. Remove this table (and its test) after ``UNTIL``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

UNTIL = "2027-09-01"   # the end of the 2026-27 academic year: every notebook released since the move
PACKAGE = "course_lib.grading"
MOVED = {
    "mlp_checks": "checks.ch01_mlp",
    "ring_checks": "checks.ch02_ring",
    "ring_ranks": "checks.ch02_ring_ranks",
    "ring_judge": "checks.ch02_ring_judge",
    "prediction_checks": "checks.ch02_prediction",
    "ddp_checks": "checks.ch03_ddp",
    "ddp_runs": "checks.ch03_ddp_ranks",
    "own_ring": "checks.ch03_own_ring",
    "pipeline_checks": "checks.ch05_schedule",
    "pipeline_stage_checks": "checks.ch05_stage",
    "tensor_parallel_checks": "checks.ch06_tensor_parallel",
    "tensor_parallel_shards": "checks.ch06_tensor_parallel_shards",
    "tensor_parallel_runs": "checks.ch06_tensor_parallel_ranks",
    "zero_checks": "checks.ch07_zero",
    "optimizer_checks": "checks.ch07_optimizer",
    "fsdp_checks": "checks.ch07_fsdp",
    "mesh_checks": "checks.ch08_mesh",
    "capstone_checks": "checks.ch08_capstone",
    "rank_attempt": "attempt.rank_attempt",
    "isolation": "attempt.isolation",
    "student_function": "attempt.student_function",
    "hidden": "attempt.hidden_checks",
    "sandbox_kernel": "sandbox.kernel",
    "uid_lease": "sandbox.uid_lease",
    "worker": "sandbox.worker",
    "execute": "sandbox.execute",
    "class_run": "autograder.class_run",
    "class_files": "autograder.class_files",
    "submissions": "autograder.submissions",
    "fixtures": "autograder.fixtures",
    "preflight": "autograder.preflight",
    "judge": "autograder.judge",
    "gradebook_merge": "autograder.gradebook_merge",
    "report": "autograder.report",
    "review": "autograder.review",
    "demo": "autograder.demo",
    "slurm_array": "slurm.array_tasks",
    "slurm_grading": "slurm.array_grading",
}


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``course_lib.grading.<old>`` and hands back the module that now holds it."""

    def find_spec(self, fullname, path=None, target=None):
        package, _, old = fullname.rpartition(".")
        if package != PACKAGE or old not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        module = importlib.import_module(f"{PACKAGE}.{MOVED[spec.name.rpartition('.')[2]]}")
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module):
        # the import system stamped the alias's spec on the module: give it back its own
        module.__spec__ = module.__spec__.loader_state


def install() -> None:
    if not any(isinstance(finder, _Alias) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Alias())
