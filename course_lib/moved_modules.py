"""Old import paths of course_lib, kept working for one term after a module moved.

Notebooks students already hold import e.g. ``course_lib.grading.ring_checks`` or
``course_lib.dist.calibrate``. Each old path below stands in sys.modules as a stand-in module that
reads every name from the module that now holds it (imported on first use, never before). Standing in
sys.modules, an old path is never imported as a submodule, so it never shadows a package attribute of
the same name (``course_lib.dist.calibrate`` the function). Remove this table and its test after UNTIL.
"""

from __future__ import annotations

import importlib
import sys
import types

UNTIL = "2027-09-01"   # the end of the 2026-27 academic year: every notebook released before the moves
MOVED = {
    "course_lib.dist.calibrate": "course_lib.dist.calibration",
    **{f"course_lib.grading.{old}": f"course_lib.grading.{new}" for old, new in {
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
    }.items()},
}


class MovedModule(types.ModuleType):
    """An old module path: every name is read from the module that now holds it."""

    def __init__(self, old: str, new: str):
        super().__init__(old, f"Moved to {new}; this path works until {UNTIL}.")
        self.__moved_to__ = new

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)   # the import system's own probes: answered by the stand-in
        return getattr(importlib.import_module(self.__moved_to__), name)

    def __dir__(self) -> list[str]:
        return dir(importlib.import_module(self.__moved_to__))


def install(package: str) -> None:
    """Put a stand-in in sys.modules for every old path directly under ``package`` (from its __init__)."""
    for old, new in MOVED.items():
        if old.rpartition(".")[0] == package:
            sys.modules.setdefault(old, MovedModule(old, new))
