"""Take the answers out of the student's own notebooks, test each quickly, and name where each comes from.

A piece whose cells are missing, unanswered (NotImplementedError) or failing its self-test is left to
PyTorch's own equivalent (stand-ins in standins.py); reference answers never ship in course_lib.
"""

from __future__ import annotations

import math
import pathlib
from dataclasses import dataclass

import torch
from torch import nn

from course_lib.notebook_cells import sources_by_id

# piece -> (chapter folder, the graded cells holding its answer, the names the cells must define)
PIECES = {
    "tensor_parallel": ("06_tensor_parallel",
                        ("shard_columns", "shard_rows", "CopyToTensorParallel", "ReduceFromTensorParallel",
                         "ColumnParallelLinear", "RowParallelLinear"),
                        ("ColumnParallelLinear", "RowParallelLinear")),
    "pipeline": ("05_pipeline_parallel", ("one_f_one_b", "run_stage"), ("one_f_one_b", "run_stage")),
    "data_parallel": ("03_data_parallel", ("ddp",), ("DDP",)),
    "fsdp": ("07_zero_fsdp", ("FSDP",), ("FSDP",)),
}


@dataclass
class LoadedPiece:
    """One piece: the cells' source (None: use the stand-in) and a sentence saying where it comes from."""

    name: str
    source: str | None
    origin: str


def solution_cells(notebook: pathlib.Path, grade_ids) -> str | None:
    """The source of the answer cells ``grade_ids`` of ``notebook``, in order; None if any is missing."""
    if not notebook.is_file():
        return None
    try:
        return "\n\n".join(sources_by_id(notebook, grade_ids, answers_only=True))
    except KeyError:
        return None


def _namespace(source: str, dist_module) -> dict:
    """Run the cells in a fresh namespace whose ``dist`` is ``dist_module`` (rebound after they run)."""
    import torch.distributed

    space = {"torch": torch, "nn": nn, "math": math, "dist": torch.distributed, "__name__": "student_piece"}
    exec(compile(source, "<your notebook's answer cells>", "exec"), space)   # noqa: S102 - the student's own
    space["dist"] = dist_module
    return space


class _OneRank:
    """torch.distributed for a world of one rank: collectives leave tensors as they are."""

    def __getattr__(self, name):
        import torch.distributed

        return getattr(torch.distributed, name)

    def get_rank(self, group=None):
        return 0

    def get_world_size(self, group=None):
        return 1

    def all_reduce(self, tensor, *args, async_op=False, **kwargs):
        return _Done() if async_op else None

    def broadcast(self, tensor, *args, async_op=False, **kwargs):
        return _Done() if async_op else None

    def all_gather_single(self, output, tensor, *args, async_op=False, **kwargs):
        output.copy_(tensor.reshape(output.shape))
        return _Done() if async_op else None

    reduce_scatter_single = all_gather_single


class _Done:
    def wait(self, *args, **kwargs):
        return True


def _self_test(name: str, space: dict) -> None:
    """A quick check on one rank (no processes): raises when the piece is unanswered or plainly wrong."""
    torch.manual_seed(0)
    x = torch.randn(3, 8)
    if name == "tensor_parallel":
        linear = nn.Linear(8, 4)
        for kind in ("ColumnParallelLinear", "RowParallelLinear"):
            torch.testing.assert_close(space[kind](linear)(x), linear(x))
    elif name == "pipeline":
        ops = space["one_f_one_b"](2, 3)
        if sorted(map(tuple, ops[0])) != sorted([(p, m) for p in "FB" for m in range(3)]):
            raise ValueError(f"one_f_one_b(2, 3)[0] should hold each F and B once, got {ops[0]}")
        model, loss_fn = nn.Linear(8, 4), nn.functional.mse_loss
        targets = torch.zeros(3, 4)
        loss = space["run_stage"](model, [("F", 0), ("B", 0)], (3, 8), [x], [targets], loss_fn)
        torch.testing.assert_close(torch.tensor(loss), loss_fn(model(x), targets).detach())
    elif name == "fsdp":
        model = nn.Sequential(nn.Linear(8, 4))
        want = model(x)
        wrapped = space["FSDP"](model)
        torch.testing.assert_close(wrapped(x), want)
        wrapped(x).sum().backward()
        wrapped.finish_gradient_synchronization()
        if not any(p.grad is not None for p in wrapped.parameters()):
            raise ValueError("FSDP left no gradient on its shards after finish_gradient_synchronization()")
    else:
        model = nn.Linear(8, 4)
        wrapped = space["DDP"](model)
        wrapped(x).sum().backward()
        wrapped.finish_gradient_synchronization()
        if model.weight.grad is None:
            raise ValueError("DDP left no gradient after finish_gradient_synchronization()")


def load_pieces(notebooks_dir) -> dict:
    """{piece: LoadedPiece} from ``notebooks_dir`` (the folder holding 03_*/, 05_*/, 06_*/, 07_*/)."""
    root = pathlib.Path(notebooks_dir)
    pieces = {}
    for name, (chapter, grade_ids, needed) in PIECES.items():
        notebook = root / chapter / f"{chapter}.ipynb"
        source = solution_cells(notebook, grade_ids)
        if source is None:
            pieces[name] = LoadedPiece(name, None, f"PyTorch's stand-in: no answer cells found in {notebook}")
            continue
        try:
            space = _namespace(source, _OneRank())
            missing = [n for n in needed if n not in space]
            if missing:
                raise NameError(f"the cells define no {', '.join(missing)}")
            _self_test(name, space)
        except Exception as error:   # noqa: BLE001 - any failure means: use the stand-in, and say why
            reason = ("unanswered" if isinstance(error, NotImplementedError)
                      else f"failing a quick self-test ({type(error).__name__}: {error})")
            origin = f"PyTorch's stand-in: your {chapter} answer is {reason}"[:300]
            pieces[name] = LoadedPiece(name, None, origin)
            continue
        pieces[name] = LoadedPiece(name, source, f"your own answer from {chapter}")
    return pieces


def bind(piece: LoadedPiece, dist_module) -> dict:
    """The piece's names, defined afresh inside a rank, talking through ``dist_module`` (a GroupDist)."""
    return _namespace(piece.source, dist_module)
