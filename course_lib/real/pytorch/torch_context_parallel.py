"""PyTorch's own context parallel on CPU ranks: the ring inside ``torch.distributed.tensor.experimental``
run with the CPU attention kernel, and what its public ``context_parallel`` says on CPU.

torch 2.13: the public ``context_parallel`` registers its ring only for the CUDA attention kernels
(``_attention.py``, ``_sdpa_handler``), so on CPU the ring is reached through ``_templated_ring_attention``
with ``aten._scaled_dot_product_flash_attention_for_cpu``, which returns the log-sum-exp the merge needs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..launch.runner import run_ranks

ROTATE_METHODS = ("allgather", "alltoall")   # set_rotate_method's names (_attention.py)


def _cp_modules():
    """torch's context-parallel internals, and the DTensor modules they use: importing them takes seconds,
    so the parent does it once and every forked rank inherits them."""
    import torch.distributed.device_mesh  # noqa: F401
    import torch.distributed.tensor.debug  # noqa: F401
    from torch.distributed.tensor.experimental import _attention, context_parallel  # noqa: F401

    return _attention


@dataclass
class TorchRingRun:
    """torch's ring on ranks: the output in sequence order, its largest difference from one process's
    attention, the collectives each rank called (CommDebugMode's counts) and each rank's seconds."""

    output: torch.Tensor
    difference: float
    collectives: list[dict]
    seconds: list[float]


def _rank(rank, world_size, q, k, v, causal, rotate):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.debug import CommDebugMode

    cp = _cp_modules()
    mesh = init_device_mesh("cpu", (world_size,))
    cp.set_rotate_method(rotate)
    balancer = cp._HeadTailLoadBalancer(q.shape[2], world_size, torch.device("cpu")) if causal else None
    cp._cp_options.enable_load_balance = causal     # torch refuses a balancer without the causal mask
    shards = cp._context_parallel_shard(mesh, [q, k, v], [2, 2, 2], load_balancer=balancer)
    comm = CommDebugMode()
    start = time.perf_counter()
    with comm:
        out = cp._templated_ring_attention(mesh.get_group(), 2,
                                           torch.ops.aten._scaled_dot_product_flash_attention_for_cpu,
                                           *shards, is_causal=causal)[0]
    seconds = time.perf_counter() - start
    whole = cp.context_parallel_unshard(mesh, [out], [2], load_balancer=balancer)[0]
    counts = {str(op).split(".")[-1]: count for op, count in comm.get_comm_counts().items()}
    return whole, counts, seconds


def torch_ring_attention(q, k, v, world_size: int, causal: bool = False, rotate: str = "allgather",
                         timeout: float = 60) -> TorchRingRun:
    """torch's ``_templated_ring_attention`` on ``world_size`` CPU ranks (head-tail balanced when causal),
    with ``set_rotate_method(rotate)``, compared with ``F.scaled_dot_product_attention`` of the whole."""
    if rotate not in ROTATE_METHODS:
        raise ValueError(f"rotate must be one of {', '.join(ROTATE_METHODS)} (set_rotate_method's names), "
                         f"got {rotate!r}")
    _cp_modules()
    results = run_ranks(_rank, world_size, q, k, v, causal, rotate, timeout=timeout)
    output = results[0][0]
    reference = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return TorchRingRun(output, float((output - reference).abs().max()), [r[1] for r in results],
                        [r[2] for r in results])


def _public(rank, world_size, q, k, v, causal):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel

    mesh = init_device_mesh("cpu", (world_size,))
    try:
        with context_parallel(mesh, buffers=[q, k, v], buffer_seq_dims=[2, 2, 2]):
            F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    except Exception as error:  # noqa: BLE001 - what torch says is the result
        return f"{type(error).__name__}: {error}"
    return "ran"


def public_context_parallel(q, k, v, world_size: int = 2, causal: bool = True, timeout: float = 60) -> str:
    """What torch's public ``context_parallel`` does with ``F.scaled_dot_product_attention`` on CPU ranks:
    "ran", or the error rank 0 raised. (Without the mask it falls back to all-gathering K and V through
    DTensor, which took 45 s the first time on the course's machine: not worth calling from a lesson.)"""
    _cp_modules()
    return run_ranks(_public, world_size, q, k, v, causal, timeout=timeout)[0]
