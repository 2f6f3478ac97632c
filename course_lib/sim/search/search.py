"""Search the DP x TP x PP x CP x ZeRO x micro-batch layouts of a model on a cluster, ranked by step time.

Every candidate is costed in closed form (estimate.py, no timeline); the fastest few are then simulated
in full. Layouts that do not fit are kept at the end with the memory they would need, so a table shows why.
"""

from __future__ import annotations

from ..checks import one_of, whole
from ..job.config import check_model, make_config
from ..step.memory_plan import plan_memory
from ..step.training_step import simulate_training_step
from ..vocabulary import PIPELINE_SCHEDULES, RECOMPUTE
from .estimate import estimate_step_time


def _divisors(n: int) -> list:
    return [d for d in range(1, n + 1) if n % d == 0]


def _candidates(model, cluster, global_batch, zero_stages, cps, micro_batch_sizes, max_tp):
    """Every (dp, tp, pp, cp, zero_stage, microbatches) with TP inside a node that splits the batch evenly."""
    world, limit = cluster.world_size, max_tp or cluster.gpus_per_node
    heads = getattr(model, "heads", 1)
    for tp in [t for t in _divisors(cluster.gpus_per_node) if t <= limit and heads % t == 0]:
        for cp in cps:
            for pp in _divisors(world // (tp * cp)) if world % (tp * cp) == 0 else []:
                dp = world // (tp * cp * pp)
                for size in micro_batch_sizes:
                    if pp > model.layers or global_batch % (dp * size) or global_batch // (dp * size) < pp:
                        continue
                    for zero in zero_stages:
                        yield dict(dp=dp, tp=tp, pp=pp, cp=cp, zero_stage=zero,
                                   microbatches=global_batch // (dp * size))


def _rank_one(model, cluster, layout: dict, global_batch: int, options: dict) -> dict:
    """One row: memory checked, step time estimated (or the ValueError that refuses the layout)."""
    config = make_config(model, cluster.world_size, global_batch=global_batch, **layout, **options)
    memory = plan_memory(config, cluster.preset.usable_memory)
    peak = max(m.total for m in memory)
    row = layout | dict(micro_batch_size=config.micro_batch_size, peak_memory=peak, simulated=False)
    if not all(m.fits for m in memory):
        return row | dict(step_time=None, mfu=None, fits=False)
    seconds = estimate_step_time(config, cluster)
    flops = model.training_flops(global_batch * getattr(model, "seq_len", 1))
    peak_flops = cluster.preset.mfu_flops * cluster.world_size
    return row | dict(step_time=seconds, mfu=flops / (seconds * peak_flops), fits=True)


def search_layouts(model, cluster, global_batch: int, zero_stages=(1,), cps=(1,),
                   max_tp: int | None = None, schedule: str = "1f1b", recompute: str = "selective",
                   micro_batch_sizes=(1,), simulate_top: int = 1) -> list:
    """Rank every layout with TP inside a node; the ``simulate_top`` fastest are simulated in full.

    Returns dicts with dp, tp, pp, cp, zero_stage, microbatches, micro_batch_size, step_time, mfu,
    peak_memory, fits and simulated (True: step_time and mfu come from simulate_training_step; False: from
    the closed-form estimate). Fastest first; layouts that do not fit last.
    """
    check_model(model)
    if not hasattr(cluster, "gpus_per_node"):
        raise ValueError(f"cluster must be a Cluster, for example sim.make_cluster(16, 8), got {cluster!r}")
    # Checked here, not left to each candidate: a bad argument would make every candidate fail
    # and the search would return an empty list that looks like "nothing fits".
    global_batch = whole("global_batch", global_batch, hint=" (sequences per training step)")
    zero_stages, cps = _whole_list("zero_stages", zero_stages, 0, 3), _whole_list("cps", cps, 1)
    micro_batch_sizes = _whole_list("micro_batch_sizes", micro_batch_sizes, 1)
    one_of("schedule", schedule, PIPELINE_SCHEDULES)
    one_of("recompute", recompute, RECOMPUTE)
    simulate_top = whole("simulate_top", simulate_top, 0)
    if max_tp is not None:
        max_tp = whole("max_tp", max_tp, hint=" (or None for the GPUs of one node)")
    options = dict(schedule=schedule, recompute=recompute)
    rows, refusals = [], []
    for layout in _candidates(model, cluster, global_batch, zero_stages, cps, micro_batch_sizes, max_tp):
        try:
            rows.append(_rank_one(model, cluster, layout, global_batch, options))
        except ValueError as error:
            refusals.append(str(error))   # e.g. cp does not divide the sequence
    if not rows:
        why = f" (for example: {refusals[0]})" if refusals else ""
        raise ValueError(f"no DP x TP x PP x CP layout of {cluster.world_size} GPUs can run "
                         f"global_batch={global_batch} with cps={cps}{why}: dp must divide the batch, each "
                         "replica needs at least pp micro-batches and tp x cp x pp must divide the GPUs; try "
                         "a larger global_batch (a multiple of the GPU count) or other cps")
    rows.sort(key=lambda r: (not r["fits"], r["step_time"] or 0.0, r["peak_memory"]))
    picks = [r for r in rows[:simulate_top] if r["fits"]]
    for row in picks:
        layout = {k: row[k] for k in ("dp", "tp", "pp", "cp", "zero_stage", "microbatches")}
        report = simulate_training_step(model, cluster, global_batch=global_batch, **layout, **options)
        row.update(step_time=report.step_time, mfu=report.mfu, simulated=True)
    picks.sort(key=lambda r: r["step_time"])
    return picks + rows[len(picks):]


def _whole_list(name: str, values, low: int, high: int | None = None) -> tuple:
    """A non-empty tuple of whole numbers in low..high, or a ValueError naming ``name``."""
    try:
        values = tuple(values)
    except TypeError:
        raise ValueError(f"{name} must be a list of whole numbers, got {values!r}") from None
    if not values:
        raise ValueError(f"{name} must list at least one value")
    for v in values:
        whole(name, v, low)
        if high is not None and v > high:
            raise ValueError(f"{name} must hold whole numbers from {low} to {high}, got {v!r}")
    return tuple(int(v) for v in values)


def format_layouts(rows: list, limit: int = 6) -> str:
    """The first ``limit`` rows of search_layouts as a table, and how many layouts do not fit."""
    lines = [" dp  tp  pp cp zero micro-batches   step (s)   MFU  peak GB  costed by"]
    for r in rows[:limit]:
        timing = f"{r['step_time']:9.2f} {100 * r['mfu']:5.1f}%" if r["fits"] else "  does not fit  "
        how = "simulation" if r["simulated"] else ("estimate" if r["fits"] else "memory plan")
        lines.append(f"{r['dp']:3d} {r['tp']:3d} {r['pp']:3d} {r['cp']:2d} {r['zero_stage']:4d} "
                     f"{r['microbatches']:5d} x {r['micro_batch_size']}    {timing} "
                     f"{r['peak_memory'] / 1e9:8.1f}  {how}")
    fits = sum(r["fits"] for r in rows)
    lines.append(f"({len(rows)} layouts, {fits} fit in memory, {len(rows) - fits} do not)")
    return "\n".join(lines)

