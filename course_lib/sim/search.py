"""Search the DP x TP x PP x CP layouts of a model on a cluster: every candidate simulated, ranked.

Layouts that do not fit are kept at the end with the memory they would need, so a table shows why.
"""

from __future__ import annotations

from .memory import OutOfMemoryError
from .step import simulate_training_step


def _divisors(n: int) -> list:
    return [d for d in range(1, n + 1) if n % d == 0]


def search_layouts(model, cluster, global_batch: int, zero_stages=(1,), cps=(1,),
                   max_tp: int | None = None, schedule: str = "1f1b", recompute: str = "selective") -> list:
    """Simulate every layout with TP inside a node and one sequence per micro-batch; fastest first.

    Returns dicts with dp, tp, pp, cp, zero_stage, microbatches, step_time, mfu, peak_memory, fits.
    """
    world, rows = cluster.world_size, []
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
                    if zero >= 2 and pp > 1:
                        continue
                    m = global_batch // dp
                    layout = dict(dp=dp, tp=tp, pp=pp, cp=cp, zero_stage=zero, microbatches=m)
                    try:
                        report = simulate_training_step(model, cluster, global_batch=global_batch,
                                                        schedule=schedule, recompute=recompute, **layout)
                    except OutOfMemoryError as error:
                        rows.append(layout | dict(step_time=None, mfu=None, peak_memory=error.needed,
                                                  fits=False))
                        continue
                    except ValueError:
                        continue   # e.g. cp does not divide the sequence
                    rows.append(layout | dict(step_time=report.step_time, mfu=report.mfu,
                                              peak_memory=report.peak_memory, fits=True))
    return sorted(rows, key=lambda r: (not r["fits"], r["step_time"] or 0.0, r["peak_memory"]))
