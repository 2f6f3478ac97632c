"""Running rank functions for real: ``run_ranks`` from a notebook, the torchrun/srun launcher, traffic.

``fn(rank, world_size, *args)`` runs on forked processes with the process group initialised; the same
function runs on a cluster through ``python -m course_lib.dist.launch module:function``.
"""

from .backend import current_device
from .errors import ForbiddenCallError, RankFailure, RanksHungError
from .runner import run_ranks

__all__ = ["run_ranks", "RankFailure", "RanksHungError", "ForbiddenCallError", "current_device"]
