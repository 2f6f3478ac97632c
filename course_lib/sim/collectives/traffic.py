"""Bytes each device sends per training step for data parallel and ZeRO 0-3, with a ring on every collective.

A ring collective over n ranks of an S-byte buffer sends (n-1)/n S per rank (all-reduce twice that).
"""

from __future__ import annotations

from ..checks import whole
from ..memory.formulas import zero_memory_breakdown


def zero_traffic_per_device(num_params: float, dp_degree: int, stage: int, microbatches: int = 1,
                            param_bytes: float = 2, grad_bytes: float = 2) -> dict:
    """Bytes one device sends in one step, by collective, under ZeRO ``stage`` (0 = plain DDP).

    Stage 0 all-reduces the gradients once; stage 1 reduce-scatters them once and all-gathers the
    updated parameters; stage 2 must reduce-scatter every micro-batch (its gradients are sharded);
    stage 3 also all-gathers the parameters before every forward and backward (Rajbhandari et al. 2020,
    section 7: 2x the parameters for stages 0-2 and 3x for stage 3 with one micro-batch).
    """
    zero_memory_breakdown(num_params, dp_degree, stage, param_bytes, grad_bytes)   # validates the arguments
    whole("microbatches", microbatches)
    share = (dp_degree - 1) / dp_degree
    grads, params, m = num_params * grad_bytes * share, num_params * param_bytes * share, microbatches
    if stage == 0:
        return {"all_reduce gradients": 2 * grads}
    if stage == 1:
        return {"reduce_scatter gradients": grads, "all_gather parameters": params}
    if stage == 2:
        return {"reduce_scatter gradients": m * grads, "all_gather parameters": params}
    return {"all_gather parameters (forward)": m * params, "all_gather parameters (backward)": m * params,
            "reduce_scatter gradients": m * grads}
