"""Checks of chapter 08's capstone: the groups each piece gets, a tensor-parallel stage, a training step.

References are torch's own: the mesh is ``torch.arange(world).reshape(shape)`` indexed by torch, the stage
is compared with the unsharded blocks, and the 8-rank loss with plain single-process training. The pieces
a check runs are PyTorch's stand-ins (course_lib.capstone.standins), never an answer of chapters 03-06.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.distributed as dist

from course_lib.capstone.run import MESH_NAMES, MESH_SHAPE, Pieces, run_capstone, single_process_losses
from course_lib.capstone.standins import tensor_parallel
from course_lib.dist import RankFailure, RanksHungError, run_ranks
from course_lib.grading.attempt.rank_attempt import fail_with
from course_lib.grading.attempt.refusals import Refusal
from course_lib.grading.attempt.student_function import as_student_function
from course_lib.models import make_transformer_block

# The capstone hands the answer its groups (capstone/groups.py) and its pieces (capstone/run.py, played by
# the student's own chapter 03/05/06 answers or PyTorch's stand-ins): those it may run; nothing else.
REFUSAL = Refusal("your capstone", allowed=("capstone/groups.py", "capstone/run.py", "capstone/standins.py",
                                            "capstone/loader.py"))

PIECE_OF_DIMENSION = {"tp": "tensor_parallel", "dp": "data_parallel", "pp": "pipeline"}
VISIBLE_MESHES = [(MESH_SHAPE, MESH_NAMES), ((2, 2, 2), ("tp", "pp", "dp")), ((1, 2, 4), ("pp", "dp", "tp"))]
LOSS_TOLERANCE = 1e-5
RANK_TIMEOUT_S = 120


def expected_groups(shape, names, rank) -> dict:
    """{piece: ranks of ``rank``'s group along that piece's dimension}, read off torch's row-major grid."""
    grid = torch.arange(math.prod(shape)).reshape(shape)
    where = [int(i) for i in (grid == rank).nonzero()[0]]
    out = {}
    for axis, name in enumerate(names):
        index = tuple(slice(None) if a == axis else where[a] for a in range(len(shape)))
        out[PIECE_OF_DIMENSION[name]] = grid[index].tolist()
    return out


def group_problems(shape, names, rank, got) -> list:
    """What is wrong with one answer of capstone_groups (plain data in, messages out)."""
    want = expected_groups(shape, names, rank)
    call = f"capstone_groups({rank}, {shape}, {names})"
    if not isinstance(got, dict):
        return [f"{call} returned {got!r}: return a dict {{piece name: list of ranks}}"]
    problems = []
    for piece, ranks in want.items():
        mine = got.get(piece)
        if mine is None or [int(r) for r in mine] != ranks:
            problems.append(f"{call}[{piece!r}] is {mine!r}, expected {ranks}")
    return problems


def check_capstone_groups(capstone_groups, meshes=VISIBLE_MESHES) -> None:
    """Every rank of every mesh: the tensor-, data- and pipeline-parallel groups torch's mesh gives it."""
    function = as_student_function(capstone_groups, "capstone_groups", refusal=REFUSAL).resolve()
    problems = []
    for shape, names in meshes:
        for rank in range(math.prod(shape)):
            try:
                problems += group_problems(shape, names, rank, function(rank, shape, names))
            except Exception as error:   # noqa: BLE001 - reported as the student's error
                problems.append(f"capstone_groups({rank}, {shape}, {names}) raised {type(error).__name__}: "
                                f"{error}")
    fail_with(problems, "capstone_groups gives a piece the wrong group")
    print(f"capstone_groups: right on {len(meshes)} meshes, every rank")


class _Counting(Pieces):
    """The tensor-parallel stand-in, counting how many layers were split each way."""

    def __init__(self, spaces):
        super().__init__(0, 1, spaces, {})
        self.columns = self.rows = 0

    def column(self, linear):
        self.columns += 1
        return super().column(linear)

    def row(self, linear):
        self.rows += 1
        return super().row(linear)


def _stage_rank(rank, world_size, build_stage, layers, seed):
    """Rank side: the student's stage against the unsharded blocks, on one input, forward and backward."""
    build_stage = as_student_function(build_stage, "build_stage", refusal=REFUSAL).resolve()
    blocks = [make_transformer_block(seed=seed + i) for i in range(layers)]
    whole = torch.nn.Sequential(*copy.deepcopy(blocks))
    x = torch.randn(2, 8, blocks[0].attention.q.in_features, generator=torch.Generator().manual_seed(seed))
    x_whole, x_mine = x.clone().requires_grad_(), x.clone().requires_grad_()
    expected = whole(x_whole)
    expected.square().sum().backward()
    pieces = _Counting({"tensor_parallel": tensor_parallel(dist.group.WORLD)})
    try:
        out = build_stage(blocks, pieces)(x_mine)
        out.square().sum().backward()
    except Exception as error:   # noqa: BLE001 - reported as the student's error
        return {"error": f"{type(error).__name__}: {error}"}
    with torch.no_grad():
        gaps = {"output": float((out - expected).abs().max()),
                "input_grad": float((x_mine.grad - x_whole.grad).abs().max())}
    return {"columns": pieces.columns, "rows": pieces.rows, **gaps}


def check_build_stage(build_stage, layers: int = 2, seed: int = 0, tp: int = 2) -> None:
    """On ``tp`` ranks: 4 column- and 2 row-parallel layers per block, and the blocks' output and gradient."""
    try:
        results = run_ranks(_stage_rank, tp, build_stage, layers, seed, timeout=RANK_TIMEOUT_S,
                            plain_results=True)
    except (RankFailure, RanksHungError) as error:
        raise AssertionError(f"build_stage failed on {tp} ranks: {error}") from None
    problems = []
    for rank, result in enumerate(results):
        if "error" in result:
            problems.append(f"rank {rank}: build_stage or its stage raised {result['error']}")
            continue
        if (result["columns"], result["rows"]) != (4 * layers, 2 * layers):
            problems.append(f"rank {rank}: {result['columns']} column- and {result['rows']} row-parallel "
                            f"layers for {layers} blocks; expected {4 * layers} (q, k, v, up) and "
                            f"{2 * layers} (out, down)")
        for what in ("output", "input_grad"):
            if not result[what] <= 1e-5:
                problems.append(f"rank {rank}: the stage's {what.replace('_', ' ')} differs from the "
                                f"unsharded blocks' by {result[what]:.3g}")
    fail_with(problems, "build_stage")
    print(f"build_stage: {layers} blocks split over {tp} ranks, same output and gradients as unsharded")


def check_capstone_loss(capstone_groups, build_stage, capstone_step, steps: int = 2, microbatches: int = 2,
                        seed: int = 0) -> dict:
    """8 ranks, DP 2 x TP 2 x PP 2 with PyTorch's stand-in pieces: the loss of single-process training."""
    students = [as_student_function(f, n, refusal=REFUSAL) for f, n in ((capstone_groups, "capstone_groups"),
                                                       (build_stage, "build_stage"),
                                                       (capstone_step, "capstone_step"))]
    try:
        run = run_capstone({}, *students, steps=steps, microbatches=microbatches, seed=seed,
                           timeout=RANK_TIMEOUT_S, plain_results=True)
    except (RankFailure, RanksHungError, ValueError) as error:
        raise AssertionError(f"the capstone did not run on 8 ranks: {error}") from None
    expected = single_process_losses(steps, seed)
    problems = [f"step {i}: loss {got:.7f} on 8 ranks, {want:.7f} in one process"
                for i, (got, want) in enumerate(zip(run["losses"], expected, strict=True))
                if not abs(got - want) <= LOSS_TOLERANCE]
    fail_with(problems, f"the 8-rank loss differs from single-process training (tolerance {LOSS_TOLERANCE})")
    print(f"capstone: {steps} steps on 8 ranks, loss equal to one process within {LOSS_TOLERANCE}")
    return run
