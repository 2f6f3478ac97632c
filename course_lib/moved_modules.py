"""Old import paths of course_lib, kept working (with a FutureWarning) for one term after a module moved.

Notebooks students already hold import e.g. ``course_lib.grading.ring_checks`` or
``course_lib.dist.calibrate`` (``course_lib.dist`` is now ``course_lib.real``, in rooms). Each old path
below stands in sys.modules as a stand-in module that reads every name from the module that now holds
it (imported on first use, never before) and warns where it is used. Standing in sys.modules, an old
path is never imported as a submodule, so it never shadows a package attribute of the same name
(``course_lib.dist.calibrate`` the function). ``python -m`` on an old path runs the new module. Remove
this table and its test after UNTIL.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import re
import sys
import types
import warnings

UNTIL = "2027-09-01"   # the end of the 2026-27 academic year: every notebook released before the moves
MOVED = {
    "course_lib.dist": "course_lib.real",
    "course_lib.dist.calibrate": "course_lib.real.measure.calibration",
    **{f"course_lib.dist.{old}": f"course_lib.real.{new}" for old, new in {
        "_child": "launch._child",
        "backend": "plumbing.backend",
        "bucket_sweep": "chapter_runs.bucket_sweep",
        "calibration": "measure.calibration",
        "calibration_blocks": "measure.calibration_blocks",
        "compute_log": "record.compute_log",
        "ddp_step": "chapter_runs.ddp_step",
        "errors": "launch.errors",
        "expert_timing": "chapter_runs.expert_timing",
        "fed_back": "predict.fed_back",
        "graded_run": "plumbing.graded_run",
        "laptop_timelines": "predict.laptop_timelines",
        "launch": "launch.torchrun",
        "nccl_log": "record.nccl_log",
        "plain": "plumbing.plain",
        "predictions": "predict.predictions",
        "preemption": "cluster.preemption",
        "preemption_rank": "cluster.preemption_rank",
        "processes": "plumbing.processes",
        "rank_group": "launch.rank_group",
        "rank_outcome": "launch.rank_outcome",
        "recorded_timeline": "record.recorded_timeline",
        "relay": "launch.relay",
        "runner": "launch.runner",
        "sequence_split": "chapter_runs.sequence_split",
        "sharded_state": "pytorch.sharded_state",
        "slurm_jobs": "cluster.slurm_jobs",
        "slurm_requeue": "cluster.slurm_requeue",
        "stacks": "plumbing.stacks",
        "stage_timing": "chapter_runs.stage_timing",
        "timing_harness": "measure.timing_harness",
        "torch_context_parallel": "pytorch.torch_context_parallel",
        "torch_pipelines": "pytorch.torch_pipelines",
        "traffic_log": "record.traffic_log",
        "traffic_sizes": "record.traffic_sizes",
        "wire": "record.wire",
    }.items()},
    **{f"course_lib.grading.{old}": f"course_lib.grading.{new}" for old, new in {
        "mlp_checks": "checks.ch01_mlp.visible",
        "ring_checks": "checks.ch02_ring.visible",
        "ring_ranks": "checks.ch02_ring.ranks",
        "ring_judge": "checks.ch02_ring.judge",
        "prediction_checks": "checks.ch02_prediction.visible",
        "ddp_checks": "checks.ch03_ddp.visible",
        "ddp_runs": "checks.ch03_ddp.ranks",
        "own_ring": "checks.ch03_ddp.own_ring",
        "pipeline_checks": "checks.ch05_pipeline.visible",
        "pipeline_stage_checks": "checks.ch05_pipeline.ranks",
        "tensor_parallel_checks": "checks.ch06_tensor_parallel.visible",
        "tensor_parallel_shards": "checks.ch06_tensor_parallel.shards",
        "tensor_parallel_runs": "checks.ch06_tensor_parallel.ranks",
        "zero_checks": "checks.ch07_zero.visible",
        "optimizer_checks": "checks.ch07_optimizer.visible",
        "fsdp_checks": "checks.ch07_fsdp.visible",
        "mesh_checks": "checks.ch08_mesh.visible",
        "capstone_checks": "checks.ch08_capstone.visible",
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
    "course_lib.grading.attempt.cells": "course_lib.notebook_cells",
    **{f"course_lib.grading.checks.{old}": f"course_lib.grading.checks.{new}" for old, new in {
        "ch02_ring_judge": "ch02_ring.judge",
        "ch02_ring_ranks": "ch02_ring.ranks",
        "ch03_ddp_buckets": "ch03_ddp.buckets",
        "ch03_ddp_judge": "ch03_ddp.judge",
        "ch03_ddp_models": "ch03_ddp.models",
        "ch03_ddp_ranks": "ch03_ddp.ranks",
        "ch03_own_ring": "ch03_ddp.own_ring",
        "ch05_schedule": "ch05_pipeline.visible",
        "ch05_stage": "ch05_pipeline.ranks",
        "ch06_tensor_parallel_ranks": "ch06_tensor_parallel.ranks",
        "ch06_tensor_parallel_shards": "ch06_tensor_parallel.shards",
        "ch07_fsdp_ranks": "ch07_fsdp.ranks",
        "ch07_optimizer_ranks": "ch07_optimizer.ranks",
        "ch07_probes": "ch07_zero.probes",
        "ch07_zero_ranks": "ch07_zero.ranks",
        "ch08_mesh_nodes": "ch08_mesh.nodes",
        "ch09_checkpoint_judge": "ch09_checkpoint.judge",
        "ch09_checkpoint_ranks": "ch09_checkpoint.ranks",
        "ch09_checkpoint_runs": "ch09_checkpoint.runs",
        "ch09_training_job": "ch09_checkpoint.training_job",
        "ch10_ring_attention_judge": "ch10_ring_attention.judge",
        "ch10_ring_attention_ranks": "ch10_ring_attention.ranks",
        "ch11_expert_parallel_judge": "ch11_expert_parallel.judge",
        "ch11_expert_parallel_ranks": "ch11_expert_parallel.ranks",
    }.items()},
}


class MovedModule(types.ModuleType):
    """An old module path: every name is read from the module that now holds it, with a FutureWarning
    that names the new path; a name the new module lacks may be an old submodule's stand-in."""

    def __init__(self, old: str, new: str):
        super().__init__(old, f"Moved to {new}; this path works until {UNTIL}.")
        self.__moved_to__ = new
        self.__spec__ = importlib.machinery.ModuleSpec(old, _RunsNewModule(new))

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)   # the import system's own probes: answered by the stand-in
        warnings.warn(f"{self.__name__} moved to {self.__moved_to__}: import it from there (the old path "
                      f"works until {UNTIL})", FutureWarning, stacklevel=2)
        try:
            return getattr(importlib.import_module(self.__moved_to__), name)
        except AttributeError:
            old_submodule = sys.modules.get(f"{self.__name__}.{name}")
            if isinstance(old_submodule, MovedModule):
                return old_submodule
            raise

    def __dir__(self) -> list[str]:
        return dir(importlib.import_module(self.__moved_to__))


class _RunsNewModule(importlib.abc.Loader):
    """``python -m OLD`` (a Slurm script from before a move): runs the new module as ``__main__``."""

    def __init__(self, new: str):
        self.new = new

    def is_package(self, name: str) -> bool:
        return False

    def get_code(self, name: str):
        print(f"FutureWarning: python -m {name} moved to python -m {self.new} (the old name works until "
              f"{UNTIL})", file=sys.stderr)
        return compile(f"import runpy\nrunpy.run_module({self.new!r}, run_name='__main__', alter_sys=True)\n",
                       f"<{name}, moved to {self.new}>", "exec")


def read_through(new: str):
    """A package that took an old module's path (``checks.ch02_ring``, now a folder): the module-level
    ``__getattr__`` and ``__dir__`` (PEP 562) that read its unknown names from ``new`` until UNTIL."""

    def __getattr__(name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return getattr(importlib.import_module(new), name)

    def __dir__() -> list[str]:
        return dir(importlib.import_module(new))

    return __getattr__, __dir__


def install(package: str) -> None:
    """Put a stand-in in sys.modules for every old path under ``package`` (from its __init__): those
    directly under it, and those under a stand-in (``course_lib.dist.runner`` under ``course_lib.dist``)."""
    parent = sys.modules.get(package)
    moved_here = [(old, new) for old, new in MOVED.items() if old.rpartition(".")[0] == package]
    if not moved_here:
        return
    for old, new in moved_here:
        stand_in = sys.modules.setdefault(old, MovedModule(old, new))
        name = old.rpartition(".")[2]
        if parent is not None and not isinstance(parent, MovedModule) and name not in vars(parent):
            setattr(parent, name, stand_in)   # ``import course_lib.dist`` then ``course_lib.dist.x``
        if isinstance(stand_in, MovedModule):
            install(old)
    # ``python -m`` on an old path finds its stand-in already in sys.modules and says so before it runs
    # _RunsNewModule; that is this table working, not the surprise runpy warns of.
    found_early = rf"'{re.escape(package)}\..*' found in sys.modules after import of package"
    warnings.filterwarnings("ignore", message=found_early, category=RuntimeWarning, module="runpy")
