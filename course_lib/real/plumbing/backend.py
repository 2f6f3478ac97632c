"""Choosing the communication backend and the device each rank computes on.

Shared by the notebook launcher (``run_ranks``) and the cluster launcher
(``course_lib.real.launch.torchrun``), so a rank function sees the same setup on a laptop, under
torchrun and under srun.
"""

from __future__ import annotations

import torch

BACKENDS = ("gloo", "nccl", "auto")


def gpu_count() -> int:
    """Visible CUDA devices, counted without initialising CUDA in this process (fork stays safe)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_backend(backend: str, ranks_per_node: int) -> str:
    """``auto`` means nccl when every rank on this node can have its own GPU, gloo otherwise."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}; got {backend!r}")
    if backend == "auto":
        return "nccl" if gpu_count() >= ranks_per_node else "gloo"
    if backend == "nccl" and gpu_count() < ranks_per_node:
        raise RuntimeError(f"backend='nccl' needs one GPU per rank: {ranks_per_node} ranks on this node but "
                           f"{gpu_count()} GPU(s) visible. Use backend='gloo' (CPU) or backend='auto'.")
    return backend


def pin_device(backend: str, local_rank: int) -> torch.device:
    """With nccl, rank ``local_rank`` owns cuda:local_rank; with gloo every rank computes on the CPU."""
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def current_device() -> torch.device:
    """The device this rank should put its tensors on (call inside a rank)."""
    import torch.distributed as dist

    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
