"""Running rank functions for real: ``run_ranks`` from a notebook, the torchrun/srun launcher, traffic.

``fn(rank, world_size, *args)`` runs on forked processes with the process group initialised; the same
function runs on a cluster through ``python -m course_lib.dist.launch module:function``.
"""

from .backend import current_device
from .calibrate import GLOO_SEGMENT_BYTES, calibrate, measure_all_reduce, predict_all_reduce
from .ddp_step import make_wide_mlp, measure_ddp_step, record_ddp_buckets
from .errors import ForbiddenCallError, RankFailure, RanksHungError
from .runner import run_ranks
from .timeline import traffic_timeline
from .traffic import COLLECTIVES, POINT_TO_POINT, TrafficEvent, TrafficLog, record_traffic
from .wire import wire_bytes

__all__ = ["COLLECTIVES", "GLOO_SEGMENT_BYTES", "POINT_TO_POINT", "ForbiddenCallError", "RankFailure",
           "RanksHungError", "TrafficEvent", "TrafficLog", "calibrate", "current_device", "make_wide_mlp",
           "measure_all_reduce", "measure_ddp_step", "predict_all_reduce", "record_ddp_buckets",
           "record_traffic", "run_ranks", "traffic_timeline", "wire_bytes"]
from .slurm_jobs import SlurmJob, SlurmUnavailable, slurm_unavailable_reason, submit_job, torchrun_locally

__all__ += ["SlurmJob", "SlurmUnavailable", "slurm_unavailable_reason", "submit_job", "torchrun_locally"]
