"""Search the DP x TP x PP x CP layouts of a model on a cluster: every candidate simulated, ranked.

Layouts that do not fit are kept at the end with the memory they would need, so a table shows why.
"""

from __future__ import annotations

from .checks import one_of, whole
from .config import check_model
from .memory import RECOMPUTE, OutOfMemoryError
from .pipeline import KINDS
from .step import simulate_training_step


def _divisors(n: int) -> list:
    return [d for d in range(1, n + 1) if n % d == 0]


def search_layouts(model, cluster, global_batch: int, zero_stages=(1,), cps=(1,),
                   max_tp: int | None = None, schedule: str = "1f1b", recompute: str = "selective") -> list:
    """Simulate every layout with TP inside a node and one sequence per micro-batch; fastest first.

    Returns dicts with dp, tp, pp, cp, zero_stage, microbatches, step_time, mfu, peak_memory, fits.
    """
    check_model(model)
    if not hasattr(cluster, "gpus_per_node"):
        raise ValueError(f"cluster must be a Cluster, for example sim.make_cluster(16, 8), got {cluster!r}")
    # Checked here, not left to each simulated step: a bad argument would make every candidate fail
    # and the search would return an empty list that looks like "nothing fits".
    global_batch = whole("global_batch", global_batch, hint=" (sequences per training step)")
    zero_stages, cps = _whole_list("zero_stages", zero_stages, 0, 3), _whole_list("cps", cps, 1)
    one_of("schedule", schedule, KINDS)
    one_of("recompute", recompute, RECOMPUTE)
    if max_tp is not None:
        max_tp = whole("max_tp", max_tp, hint=" (or None for the GPUs of one node)")
    world, rows, refusals = cluster.world_size, [], []
    limit = max_tp or cluster.gpus_per_node
    heads = getattr(model, "heads", 1)
    tps = [t for t in _divisors(cluster.gpus_per_node) if t <= limit and heads % t == 0]
    for tp in tps:
        for cp in cps:
            for pp in _divisors(world // (tp * cp)) if world % (tp * cp) == 0 else []:
                dp = world // (tp * cp * pp)
                if pp > model.layers or global_batch % dp or global_batch // dp < pp:
                    continue
                for zero in zero_stages:
                    m = global_batch // dp
                    layout = dict(dp=dp, tp=tp, pp=pp, cp=cp, zero_stage=zero, microbatches=m)
                    try:
                        report = simulate_training_step(model, cluster, global_batch=global_batch,
                                                        schedule=schedule, recompute=recompute, **layout)
                    except OutOfMemoryError as error:
                        rows.append(layout | dict(step_time=None, mfu=None, peak_memory=error.needed,
                                                  fits=False))
                        continue
                    except ValueError as error:
                        refusals.append(str(error))   # e.g. cp does not divide the sequence
                        continue
                    rows.append(layout | dict(step_time=report.step_time, mfu=report.mfu,
                                              peak_memory=report.peak_memory, fits=True))
    if not rows:
        why = f" (for example: {refusals[0]})" if refusals else ""
        raise ValueError(f"no DP x TP x PP x CP layout of {world} GPUs can run global_batch={global_batch} "
                         f"with cps={cps}{why}: dp must divide the batch, each replica needs at least pp "
                         "micro-batches and tp x cp x pp must divide the GPUs; try a larger global_batch "
                         "(a multiple of the GPU count) or other cps")
    return sorted(rows, key=lambda r: (not r["fits"], r["step_time"] or 0.0, r["peak_memory"]))


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
