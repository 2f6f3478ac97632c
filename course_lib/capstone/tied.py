"""The capstone's tied weight: a token embedding on the first pipeline stage tied to the output head on
the last, as GPT-2 ties them, trained on 8 CPU ranks in float64.

With pipeline parallelism the two ends of the model live on different ranks, so each of them holds a copy
of the one weight (Megatron-LM keeps a copy on the first and on the last stage; megatron/core/distributed/
finalize_model_grads.py, ``_allreduce_word_embedding_grads``). This file runs everything except the
decision the student makes: which ranks reduce which gradients, how, and when relative to the optimizer
step (``tied_step``). It lays out the mesh with torch's own DeviceMesh, runs the forward and backward
through the stages with plain sends (one micro-batch), records every reduction the student asks for, and
trains the same model in one process, with one weight used twice, to compare against.
"""

from __future__ import annotations

import datetime
import math

import torch
import torch.distributed as dist
from torch import nn

VOCAB, HIDDEN, SEQ_LEN, BATCH, LAYERS, LEARNING_RATE = 12, 6, 3, 4, 4, 0.5
COLLECTIVE_TIMEOUT_S = 20   # a reduction whose group the other ranks never join fails after this, not hangs


def _initial_weights(seed: int) -> tuple:
    """(the tied embedding, the LAYERS (weight, bias) pairs): the same in every process."""
    generator = torch.Generator().manual_seed(seed)
    tied = torch.randn(VOCAB, HIDDEN, generator=generator, dtype=torch.float64)
    layers = [(torch.randn(HIDDEN, HIDDEN, generator=generator, dtype=torch.float64) / math.sqrt(HIDDEN),
               0.1 * torch.randn(HIDDEN, generator=generator, dtype=torch.float64)) for _ in range(LAYERS)]
    return tied, layers


def tied_batches(steps: int, seed: int) -> list:
    """(token ids, next-token targets) of BATCH sequences for every step."""
    generator = torch.Generator().manual_seed(seed + 1)
    return [(torch.randint(VOCAB, (BATCH, SEQ_LEN), generator=generator),
             torch.randint(VOCAB, (BATCH, SEQ_LEN), generator=generator)) for _ in range(steps)]


class TiedStage(nn.Module):
    """One pipeline stage of the tied model: the embedding on the first stage, LAYERS / stages tanh layers,
    the output head (logits = hidden @ tied.T) on the last. ``tied`` is this stage's copy of the tied
    weight (first and last stage), None in between."""

    def __init__(self, stage: int, stages: int, seed: int):
        super().__init__()
        tied, layers = _initial_weights(seed)
        per_stage = LAYERS // stages
        self.stage, self.stages = stage, stages
        self.layers = nn.ModuleList()
        for weight, bias in layers[stage * per_stage:(stage + 1) * per_stage]:
            linear = nn.Linear(HIDDEN, HIDDEN, dtype=torch.float64)
            with torch.no_grad():
                linear.weight.copy_(weight)
                linear.bias.copy_(bias)
            self.layers.append(linear)
        holds_copy = stage in (0, stages - 1)
        self.tied = nn.Parameter(tied.clone()) if holds_copy else None

    def body(self, hidden):
        for linear in self.layers:
            hidden = torch.tanh(linear(hidden))
        return hidden


def single_process_tied(steps: int, seed: int = 0) -> tuple[list, torch.Tensor]:
    """(losses per step, the tied weight after the last step) of the whole model in one process, where
    the embedding and the head are one parameter: what the ranks must match."""
    model = TiedStage(0, 1, seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    losses = []
    for ids, targets in tied_batches(steps, seed):
        optimizer.zero_grad()
        logits = model.body(nn.functional.embedding(ids, model.tied)) @ model.tied.T
        loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, model.tied.detach().clone()


class TiedComm:
    """What ``tied_step`` communicates with: ``all_reduce(tensor, ranks)`` sums ``tensor`` in place over
    the global ``ranks`` (a list holding this rank), and records which ranks, how many bytes, in which step.

    ``rank``, ``mesh_shape`` and ``dim_names`` say where this rank sits; the layout is torch's
    (``init_device_mesh``: ranks numbered row by row, the last name innermost).
    """

    def __init__(self, rank: int, mesh_shape: tuple, dim_names: tuple):
        self.rank, self.mesh_shape, self.dim_names = rank, tuple(mesh_shape), tuple(dim_names)
        self.world_size = math.prod(self.mesh_shape)
        self.step = 0
        self.log: list = []     # [step, sorted ranks, bytes]
        self._groups: dict = {}

    def all_reduce(self, tensor, ranks) -> None:
        members = tuple(sorted({int(r) for r in ranks}))
        if len(members) != len(list(ranks)) or not all(0 <= r < self.world_size for r in members):
            raise ValueError(f"all_reduce's ranks must be distinct ranks of 0..{self.world_size - 1}, got "
                             f"{list(ranks)}")
        if self.rank not in members:
            raise ValueError(f"rank {self.rank} called all_reduce over {list(ranks)}, a group without it: "
                             "a rank reduces only over groups it belongs to")
        if len(members) == 1:   # a group of one rank: nothing moves, nothing to record
            return
        if members not in self._groups:
            self._groups[members] = (dist.group.WORLD if len(members) == self.world_size else
                                     dist.new_group(list(members), use_local_synchronization=True,
                                                    timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S)))
        self.log.append([self.step, list(members), tensor.numel() * tensor.element_size()])
        dist.all_reduce(tensor, group=self._groups[members])


def _forward_backward(stage: TiedStage, ids, targets, pipeline_ranks: list) -> float | None:
    """One micro-batch through the stages with blocking sends: the loss on the last stage, None before."""
    shape = (ids.shape[0], SEQ_LEN, HIDDEN)
    first, last = stage.stage == 0, stage.stage == stage.stages - 1
    if first:
        inputs = nn.functional.embedding(ids, stage.tied)
    else:
        inputs = torch.empty(shape, dtype=torch.float64)
        dist.recv(inputs, src=pipeline_ranks[stage.stage - 1])
        inputs.requires_grad_()
    hidden = stage.body(inputs)
    if not last:
        dist.send(hidden.detach().contiguous(), dst=pipeline_ranks[stage.stage + 1])
        grad = torch.empty(shape, dtype=torch.float64)
        dist.recv(grad, src=pipeline_ranks[stage.stage + 1])
        hidden.backward(grad)
        loss = None
    else:
        logits = hidden @ stage.tied.T
        loss_tensor = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
        loss_tensor.backward()
        loss = loss_tensor.item()
    if not first:
        dist.send(inputs.grad.contiguous(), dst=pipeline_ranks[stage.stage - 1])
    return loss


def tied_rank(rank, world_size, tied_step, steps, seed, mesh):
    """One rank: its stage of the tied model trained for ``steps`` steps, the student's ``tied_step``
    reducing and stepping after each backward. Returns its losses, its copy of the tied weight, its
    stage, its groups in torch's mesh, its parameters' bytes and the reductions it recorded."""
    from torch.distributed.device_mesh import init_device_mesh

    shape, names = mesh
    torch_mesh = init_device_mesh("cpu", tuple(shape), mesh_dim_names=tuple(names))
    pipeline_ranks = dist.get_process_group_ranks(torch_mesh.get_group("pp"))
    data_ranks = dist.get_process_group_ranks(torch_mesh.get_group("dp"))
    replica, replicas = torch_mesh.get_local_rank("dp"), len(data_ranks)
    tied_step = getattr(tied_step, "resolve", lambda: tied_step)()
    stage = TiedStage(pipeline_ranks.index(rank), len(pipeline_ranks), seed)
    optimizer = torch.optim.SGD(stage.parameters(), lr=LEARNING_RATE)
    comm = TiedComm(rank, shape, names)
    share = BATCH // replicas
    losses = []
    for step, (ids, targets) in enumerate(tied_batches(steps, seed)):
        mine = slice(replica * share, (replica + 1) * share)
        optimizer.zero_grad()
        loss = _forward_backward(stage, ids[mine], targets[mine], pipeline_ranks)
        comm.step = step
        tied_step(stage, comm, optimizer)
        losses.append(loss)
    return dict(losses=losses, stage=stage.stage, stages=stage.stages, log=comm.log,
                tied=None if stage.tied is None else stage.tied.detach().clone(),
                tied_bytes=0 if stage.tied is None else stage.tied.numel() * stage.tied.element_size(),
                stage_bytes=sum(p.numel() * p.element_size() for p in stage.parameters()),
                pipeline=pipeline_ranks, data_parallel=data_ranks)


def run_tied(tied_step, steps: int = 3, seed: int = 0, mesh=((4, 2, 1), ("pp", "dp", "tp")),
             timeout: float = 120, plain_results: bool = False) -> list:
    """Every rank's result (tied_rank) of training the tied model on one forked rank per device of
    ``mesh``, which names pp, dp and tp and has at least two pipeline stages dividing LAYERS."""
    from course_lib.real import run_ranks

    shape, names = tuple(mesh[0]), tuple(mesh[1])
    if sorted(names) != ["dp", "pp", "tp"] or len(shape) != 3:
        raise ValueError(f"the tied run's mesh names pp, dp and tp, got {mesh}")
    stages, replicas = shape[names.index("pp")], shape[names.index("dp")]
    if stages < 2 or LAYERS % stages or BATCH % replicas:
        raise ValueError(f"the tied run needs 2 or more stages dividing {LAYERS} and replicas dividing "
                         f"{BATCH}, got {mesh}")
    return run_ranks(tied_rank, math.prod(shape), tied_step, steps, seed, (shape, names), timeout=timeout,
                     plain_results=plain_results)
