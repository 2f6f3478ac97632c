"""Running rank functions for real: ``run_ranks`` from a notebook, the torchrun/srun launcher, traffic.

``fn(rank, world_size, *args)`` runs on forked processes with the process group initialised; the same
function runs on a cluster through ``python -m course_lib.dist.launch module:function``.
"""

from importlib import import_module

from course_lib import moved_modules

# Names load on first use (PEP 562): most of this package imports torch, which takes seconds, and the
# grader's sandboxed kernel launcher needs only ``processes`` before it execs the real kernel.
_EXPORTS = {
    "current_device": "backend",
    "bucket_sweep": "bucket_sweep",
    "ComputeLog": "compute_log", "record_compute": "compute_log",
    "AttentionRun": "sequence_split", "attention_on_ranks": "sequence_split",
    "layout_positions": "sequence_split", "shard_sequence": "sequence_split",
    "public_context_parallel": "torch_context_parallel", "torch_ring_attention": "torch_context_parallel",
    "GLOO_SEGMENT_BYTES": "calibration", "calibrate": "calibration", "measure_all_reduce": "timing_harness",
    "predict_all_reduce": "calibration",
    "Comparison": "predictions", "compare_all_reduce": "predictions", "compare_ddp_step": "predictions",
    "predict_ddp_step": "predictions", "compare_epochs": "predictions",
    "predict_python_all_reduce": "predictions", "compare_fed_back": "fed_back",
    "fed_back_cluster": "fed_back", "compare_timelines": "predictions",
    "predict_ring_attention": "laptop_timelines", "predict_pipeline_step": "laptop_timelines",
    "stage_seconds_alone": "stage_timing",
    "ExpertsAlone": "expert_timing", "all_to_all_link": "expert_timing", "expert_pieces": "expert_timing",
    "experts_alone": "expert_timing", "experts_cores": "expert_timing",
    "make_wide_mlp": "ddp_step", "measure_ddp_step": "ddp_step", "record_ddp_buckets": "ddp_step",
    "ForbiddenCallError": "errors", "RankFailure": "errors", "RanksHungError": "errors",
    "run_ranks": "runner",
    "traffic_timeline": "recorded_timeline",
    "COLLECTIVES": "traffic_log", "POINT_TO_POINT": "traffic_log", "TrafficEvent": "traffic_log",
    "TrafficLog": "traffic_log",
    "record_traffic": "traffic_log",
    "wire_bytes": "wire",
    "SlurmJob": "slurm_jobs", "SlurmUnavailable": "slurm_jobs", "slurm_unavailable_reason": "slurm_jobs",
    "submit_job": "slurm_jobs", "torchrun_locally": "slurm_jobs",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'course_lib.dist' has no attribute {name!r}")
    value = getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


moved_modules.install(__name__)
