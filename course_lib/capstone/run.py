"""The capstone run: a small transformer trained on 8 CPU ranks (DP 2 x TP 2 x PP 2, or another mesh)
from the course's pieces.

The student's chapter-08 functions say which group each piece gets, build a stage and run a step; this file
only wires them up (each rank's data follows torch's own mesh), runs the ranks and trains the same model in
one process to compare the losses with.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch import nn

from course_lib.models import make_sequence_batches, make_transformer_block

from .groups import GroupDist
from .loader import bind
from .standins import STAND_INS

MESH_SHAPE, MESH_NAMES = (2, 2, 2), ("pp", "dp", "tp")
LAYERS, BATCH, LEARNING_RATE = 4, 8, 0.05
PIECE_OF_DIMENSION = {"tensor_parallel": "tp", "pipeline": "pp", "data_parallel": "dp"}


def make_blocks() -> list:
    """The model: LAYERS transformer blocks (course_lib.models), the same weights in every process."""
    return [make_transformer_block(seed=layer) for layer in range(LAYERS)]


def single_process_losses(steps: int, seed: int = 0) -> list:
    """The losses of training the whole model in one process with plain SGD: what the ranks must match."""
    model = nn.Sequential(*make_blocks())
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    losses = []
    for inputs, targets in make_sequence_batches(steps, BATCH, seed=seed):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


class Pieces:
    """What one rank's chapter-08 code composes: the three pieces, each bound to its own process group."""

    def __init__(self, stage: int, stages: int, spaces: dict, origins: dict):
        self.stage, self.stages, self.origins = stage, stages, origins
        self._spaces = spaces

    def column(self, linear):
        return self._spaces["tensor_parallel"]["ColumnParallelLinear"](linear)

    def row(self, linear):
        return self._spaces["tensor_parallel"]["RowParallelLinear"](linear)

    def schedule(self, stages: int, microbatches: int) -> list:
        return self._spaces["pipeline"]["one_f_one_b"](stages, microbatches)

    def run_stage(self, module, ops, input_shape, inputs, targets, loss_fn):
        return self._spaces["pipeline"]["run_stage"](module, ops, input_shape, inputs, targets, loss_fn)

    def average_gradients(self, module) -> None:
        """Average ``module``'s accumulated gradients over the data-parallel group with the DDP piece."""
        replay = getattr(module, "_capstone_replay", None)
        params = [p for p in module.parameters() if p.requires_grad]
        if replay is None:   # once per module: DDP broadcasts and registers its hooks at construction
            slots = _GradientSlots([_local(p.detach()) for p in params])
            replay = module._capstone_replay = (slots, self._spaces["data_parallel"]["DDP"](slots))
        slots, ddp = replay
        grads = [_local(p.grad) if p.grad is not None else torch.zeros_like(_local(p)) for p in params]
        ddp(grads).backward()   # one backward: every slot's gradient is exactly its stage gradient
        ddp.finish_gradient_synchronization()
        for p, slot in zip(params, slots.slots, strict=True):
            p.grad = _like(p, slot.grad.detach().clone())
            slot.grad = None


class _GradientSlots(nn.Module):
    """Plain parameters shaped like a stage's (local shards): DDP averages the gradients replayed into them.

    The pipeline runs several micro-batches' backwards; replaying their sum as one backward here makes
    a data-parallel piece reduce once per step, as gradient accumulation with torch DDP's no_sync does.
    """

    def __init__(self, tensors):
        super().__init__()
        self.slots = nn.ParameterList([nn.Parameter(torch.zeros_like(t)) for t in tensors])

    def forward(self, grads):
        return sum((slot * grad).sum() for slot, grad in zip(self.slots, grads, strict=True))


def _local(tensor):
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def _like(param, local):
    if hasattr(param, "device_mesh"):   # a DTensor parameter (the tensor-parallel stand-in)
        from torch.distributed.tensor import DTensor

        return DTensor.from_local(local, param.device_mesh, param.placements, run_check=False)
    return local


def make_groups(capstone_groups, mesh_shape=MESH_SHAPE, mesh_names=MESH_NAMES) -> tuple:
    """Every rank's groups from the student's ``capstone_groups``; new_group is called in one order on all."""
    world = dist.get_world_size()
    answers = [capstone_groups(r, mesh_shape, mesh_names) for r in range(world)]
    mine = answers[dist.get_rank()]
    made = {}
    for piece in PIECE_OF_DIMENSION:
        for answer in answers:
            ranks = tuple(int(r) for r in answer[piece])
            if ranks not in made:
                made[ranks] = dist.new_group(list(ranks))
    for piece in PIECE_OF_DIMENSION:
        if dist.get_rank() not in mine[piece]:
            raise ValueError(f"capstone_groups gave rank {dist.get_rank()} the {piece} group {mine[piece]}, "
                             "which does not contain it")
    return mine, {piece: (list(mine[piece]), made[tuple(int(r) for r in mine[piece])]) for piece in
                  PIECE_OF_DIMENSION}


def make_pieces(loaded: dict, capstone_groups, log: list, mesh=(MESH_SHAPE, MESH_NAMES)):
    """This rank's Pieces: each loaded answer bound to its group, or PyTorch's stand-in for it."""
    mine, groups = make_groups(capstone_groups, *mesh)
    spaces, origins = {}, {}
    for piece, (ranks, group) in groups.items():
        answer = loaded.get(piece) if loaded else None
        if answer is not None and answer.source is not None:
            spaces[piece] = bind(answer, GroupDist(PIECE_OF_DIMENSION[piece], ranks, group, log))
            origins[piece] = answer.origin
        else:
            spaces[piece] = STAND_INS[piece](group)
            origins[piece] = answer.origin if answer is not None else "PyTorch's stand-in"
    pipeline_ranks = groups["pipeline"][0]
    return mine, Pieces(pipeline_ranks.index(dist.get_rank()), len(pipeline_ranks), spaces, origins)


def true_replica(mesh_shape, mesh_names) -> tuple[int, int]:
    """(this rank's data-parallel index, the number of replicas), from torch's own DeviceMesh: the batch a
    rank trains on never depends on the groups the student's code chose."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", tuple(mesh_shape), mesh_dim_names=tuple(mesh_names))
    return mesh.get_local_rank("dp"), mesh.size(list(mesh_names).index("dp"))


def capstone_rank(rank, world_size, loaded, capstone_groups, build_stage, capstone_step, steps, microbatches,
                  seed=0, mesh=(MESH_SHAPE, MESH_NAMES)):
    """One rank of the capstone: returns its losses (last stage only), origins, groups and traffic log."""
    torch.manual_seed(seed)
    replica, replicas = true_replica(*mesh)
    # Under the grader the functions arrive as sources and are defined here, inside the sandboxed rank.
    capstone_groups, build_stage, capstone_step = (getattr(f, "resolve", lambda f=f: f)() for f in
                                                   (capstone_groups, build_stage, capstone_step))
    log: list = []
    mine, pieces = make_pieces(loaded, capstone_groups, log, mesh)
    per_stage = LAYERS // pieces.stages
    blocks = make_blocks()[pieces.stage * per_stage:(pieces.stage + 1) * per_stage]
    stage_module = build_stage(blocks, pieces)
    optimizer = torch.optim.SGD(stage_module.parameters(), lr=LEARNING_RATE)
    share = BATCH // replicas
    losses = []
    for inputs, targets in make_sequence_batches(steps, BATCH, seed=seed):
        mine_in, mine_out = (t[replica * share:(replica + 1) * share] for t in (inputs, targets))
        loss = capstone_step(stage_module, pieces, mine_in, mine_out, microbatches, optimizer)
        losses.append(None if loss is None else float(loss))
    return dict(losses=losses, origins=pieces.origins, stage=pieces.stage, groups=mine, traffic=log)


def run_capstone(loaded, capstone_groups, build_stage, capstone_step, steps: int = 5, microbatches: int = 2,
                 seed: int = 0, timeout: float = 120, plain_results: bool = False, mesh_shape=MESH_SHAPE,
                 mesh_names=MESH_NAMES) -> dict:
    """Train on one forked rank per device of the mesh: {"losses": per step, the replicas' mean; "ranks":
    each rank's result}."""
    from course_lib.real import run_ranks

    mesh = (tuple(mesh_shape), tuple(mesh_names))
    if sorted(mesh[1]) != sorted(PIECE_OF_DIMENSION.values()) or len(mesh[0]) != 3:
        raise ValueError(f"the capstone's mesh names its three dimensions pp, dp and tp, got {mesh}")
    if callable(capstone_groups):   # in a notebook: a wrong or unanswered function fails here, at once
        capstone_groups(0, *mesh)
    ranks = run_ranks(capstone_rank, math.prod(mesh[0]), loaded, capstone_groups, build_stage, capstone_step,
                      steps, microbatches, seed, mesh, timeout=timeout, plain_results=plain_results)
    last = [r["losses"] for r in ranks if r["stage"] == max(x["stage"] for x in ranks)]
    if any(loss is None for losses in last for loss in losses):
        raise ValueError("capstone_step returned None on a rank of the last pipeline stage: it must return "
                         "the loss there (run_stage returns it on the last stage)")
    losses = [sum(step) / len(step) for step in zip(*last, strict=True)]
    return {"losses": losses, "ranks": ranks}
