"""simulate_training_step: one training step of any 0D-4D layout on a simulated cluster.

Validates, checks memory (out of memory is an error, never simulated), plays the pipeline schedule at
stage level, lowers each stage to events, and gives every rank its stage's lane.
"""

from __future__ import annotations

from operator import attrgetter

from ..job.config import make_config
from ..job.layout import strides
from ..memory.formulas import OutOfMemoryError
from ..timeline import Timeline, making_spans
from .costs import CostModel
from .memory_plan import plan_memory
from .pipeline_play import play_schedule
from .schedules import pipeline_schedule
from .step_report import StepReport


def simulate_training_step(model, cluster, dp: int = 1, tp: int = 1, pp: int = 1, cp: int = 1,
                           zero_stage: int = 0, microbatches: int = 1, global_batch: int | None = None,
                           check_memory: bool = True, **options) -> StepReport:
    """One step of ``model`` on ``cluster`` with data x tensor x pipeline x context parallelism.

    global_batch: sequences per step (default dp x microbatches, one sequence per micro-batch).
    options: schedule ("gpipe", "1f1b", "interleaved_1f1b"), virtual_stages, recompute ("none",
    "selective", "full"), sequence_parallel, placement (innermost first, default tp, cp, dp, pp),
    dp_algorithm ("nccl", the default: NCCL's choice; or "ring", "tree", "parameter_server", ...),
    overlap (DDP buckets during backward),
    bucket_bytes and first_bucket_bytes (torch DDP's 25 MiB and 1 MiB), prefetch (FSDP),
    param_bytes / grad_bytes / optimizer_bytes, cp_method ("all_gather", "ring", "ulysses": how the cp
    ranks exchange keys and values), attention ("fused", the default: FlashAttention stores no s x s
    scores; "unfused": Korthikanti et al.'s count with them).
    Raises OutOfMemoryError (a ValueError) saying by how much when a device would not fit.
    """
    if not (hasattr(cluster, "world_size") and hasattr(cluster, "preset")):
        raise ValueError("cluster must be a Cluster, for example sim.make_cluster(nodes=1, gpus_per_node=8), "
                         f"got {type(cluster).__name__}: {cluster!r}"[:300])
    if not isinstance(check_memory, bool):
        raise ValueError(f"check_memory must be True or False, got {check_memory!r}")
    config = make_config(model, cluster.world_size, dp=dp, tp=tp, pp=pp, cp=cp, zero_stage=zero_stage,
                         microbatches=microbatches, global_batch=global_batch, **options)
    dp, tp, pp, cp, zero_stage, microbatches = (config.dp, config.tp, config.pp, config.cp, config.zero_stage,
                                                 config.microbatches)   # as validated: plain ints
    memory = plan_memory(config, cluster.preset.usable_memory)
    worst = max(range(pp), key=lambda s: memory[s].total)
    if check_memory and not memory[worst].fits:
        raise OutOfMemoryError(memory[worst].total, cluster.preset.usable_memory, worst, memory[worst])
    costs = CostModel(config, cluster)
    schedule = pipeline_schedule(config.pipeline_kind, pp, microbatches, config.virtual_stages)
    fwd, bwd = costs.stage_times()
    placed, _ = play_schedule(schedule, fwd, bwd, costs.t_hop)

    from .lowering import lower_stage
    with making_spans():
        stage_events = [lower_stage(s, placed[s], costs) for s in range(pp)]
    stride = strides(config.degrees, config.placement)["pp"]
    world = cluster.world_size
    stage_of_rank = [(r // stride) % pp for r in range(world)]
    timeline = Timeline([f"rank {r}" for r in range(world)], [stage_events[s] for s in stage_of_rank],
                        title=f"{getattr(model, 'name', 'model')}: dp={dp} tp={tp} pp={pp} cp={cp} "
                              f"zero={zero_stage}", lane_groups=[f"stage {s}" for s in stage_of_rank])
    step_time = max((max(map(attrgetter("end"), events)) for events in stage_events if events), default=0.0)
    tokens = config.batch * getattr(model, "seq_len", 1)
    return StepReport(config, cluster, timeline, step_time, memory, stage_of_rank,
                      model_flops=model.training_flops(tokens), tokens=tokens)
