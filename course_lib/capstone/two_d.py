"""Your chapter 06 tensor-parallel layers and chapter 07 FSDP composed on a 2-D (dp, tp) mesh of 4 ranks.

The same two-layer MLP that chapter 08 trains with FSDP2 + DTensor's tensor parallel (``fully_shard`` over
``mesh["dp"]`` after ``parallelize_module`` over ``mesh["tp"]``), built from the student's own pieces: each
bound to its mesh dimension's group (GroupDist), FSDP wrapped around the tensor-parallel layers.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from .groups import GroupDist
from .loader import bind

BATCH, LEARNING_RATE = 16, 0.1
MESH_SHAPE, MESH_NAMES = (2, 2), ("dp", "tp")


def tiny_mlp() -> nn.Sequential:
    """8 -> 32 -> ReLU -> 8, the same weights in every process."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 8))


def mlp_batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(step)
    return torch.randn(BATCH, 8, generator=generator), torch.randn(BATCH, 8, generator=generator)


def one_process_losses(steps: int) -> list[float]:
    """Plain SGD on the whole batch in one process: what the 2-D runs must match."""
    model = tiny_mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    losses = []
    for step in range(steps):
        x, y = mlp_batch(step)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def _bound(mesh, name: str, piece, log: list) -> dict:
    group = mesh.get_group(name)
    return bind(piece, GroupDist(name, dist.get_process_group_ranks(group), group, log))


def your_pieces_rank(rank, world_size, loaded: dict, steps: int) -> dict:
    """One rank: your ColumnParallelLinear / RowParallelLinear on the tp group, your FSDP on the dp group."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", MESH_SHAPE, mesh_dim_names=MESH_NAMES)
    log: list = []
    tensor_parallel = _bound(mesh, "tp", loaded["tensor_parallel"], log)
    fsdp = _bound(mesh, "dp", loaded["fsdp"], log)["FSDP"]
    base = tiny_mlp()
    model = fsdp(nn.Sequential(tensor_parallel["ColumnParallelLinear"](base[0]), nn.ReLU(),
                               tensor_parallel["RowParallelLinear"](base[2])))
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    share = BATCH // MESH_SHAPE[0]
    rows = slice(share * mesh.get_local_rank("dp"), share * (mesh.get_local_rank("dp") + 1))
    losses = []
    for step in range(steps):
        x, y = mlp_batch(step)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x[rows]), y[rows])
        loss.backward()
        model.finish_gradient_synchronization()
        optimizer.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean, group=mesh.get_group("dp"))
        losses.append(mean.item() / MESH_SHAPE[0])
    return {"losses": losses, "traffic": log}


def run_your_pieces_2d(loaded: dict, steps: int = 5, timeout: float = 120) -> dict | None:
    """Your pieces on the 2-D mesh of 4 ranks: {"losses", "traffic"} of rank 0, or None (with the reason
    printed by the caller) when the tensor-parallel or the FSDP piece is a stand-in."""
    from course_lib.real import run_ranks

    if any(loaded.get(name) is None or loaded[name].source is None for name in ("tensor_parallel", "fsdp")):
        return None
    return run_ranks(your_pieces_rank, 4, loaded, steps, timeout=timeout)[0]
