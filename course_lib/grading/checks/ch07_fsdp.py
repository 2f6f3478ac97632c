"""Checks of chapter 07, part 3 (FSDP, ZeRO stage 3) against single-process training of the same model.

Each rank wraps the same small model, trains its rows of the batch for a few SGD steps, records one
step's traffic and the parameter memory it holds at every layer's forward and backward; the judging side
trains the unwrapped model on the whole batch and compares.
"""

from __future__ import annotations

import types
from dataclasses import dataclass

import torch
from torch import nn

from course_lib.dist import record_traffic
from course_lib.grading.attempt.rank_attempt import attempt, fail_with
from course_lib.grading.attempt.student_function import as_student_function
from course_lib.grading.checks.ch07_zero import GATHERS, REDUCE_SCATTERS

ROWS = 12                      # the batch, split evenly over 1, 2, 3 or 4 ranks
# In low precision the parameters may differ from float32 training by this share of how far training
# moved them (bfloat16 keeps 8 bits of mantissa: well under it; gradients off by a factor: well over it)
LOW_PRECISION_SHARE = 0.1
VISIBLE_TIMEOUT_S = 30


@dataclass(frozen=True)
class FSDPCase:
    """``units`` blocks (Linear + tanh) of ``width``, then a Linear head; ``dtype``: compute_dtype.

    ``tied``: the middle block ends with a second Linear holding the first one's weight, the way a
    language model's output layer holds its embedding's (one parameter, two modules, two uses).
    """

    width: int = 16
    units: int = 6
    steps: int = 3
    dtype: str | None = None
    seed: int = 0
    tied: bool = False

    def model(self) -> nn.Sequential:
        torch.manual_seed(self.seed)
        blocks = [nn.Sequential(nn.Linear(self.width, self.width), nn.Tanh()) for _ in range(self.units)]
        if self.tied:
            middle = blocks[self.units // 2]
            middle.append(nn.Linear(self.width, self.width))
            middle[2].weight = middle[0].weight
        return nn.Sequential(*blocks, nn.Linear(self.width, 3))

    def tied_pair(self, model: nn.Sequential) -> tuple[nn.Module, nn.Module]:
        """The two modules holding the tied weight (``tied`` only)."""
        middle = model[self.units // 2]
        return middle[0], middle[2]

    @property
    def tied_names(self) -> str:
        return f"`{self.units // 2}.0.weight` and `{self.units // 2}.2.weight`"

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(self.seed * 7919 + step)
        return torch.randn(ROWS, self.width, generator=generator), torch.randn(ROWS, 3, generator=generator)

    def unit_bytes(self, world_size: int, itemsize: int) -> list[int]:
        """Bytes of each unit's padded flat buffer: what one all-gather or reduce-scatter of it moves."""
        numels = [sum(p.numel() for p in child.parameters()) for child in self.model().children()
                  if any(True for _ in child.parameters())]
        return [-(-numel // world_size) * world_size * itemsize for numel in numels]


def reference(case: FSDPCase) -> dict[str, torch.Tensor]:
    """Single-process float32 training on the whole batch: the parameters after ``case.steps`` SGD steps."""
    model = case.model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(case.steps):
        x, y = case.batch(step)
        optimizer.zero_grad()
        (model(x) - y).pow(2).mean().backward()
        optimizer.step()
    return {name: p.detach() for name, p in model.named_parameters()}


def parameter_bytes(root) -> int:
    """Bytes of every live tensor storage reachable from ``root``: attributes, containers, hooks' closures."""
    seen, storages, total, stack = set(), set(), 0, [root]
    while stack:
        item = stack.pop()
        if id(item) in seen or isinstance(item, (type, types.ModuleType, str, bytes, int, float)):
            continue
        seen.add(id(item))
        if isinstance(item, torch.Tensor):
            storage = item.untyped_storage()
            try:
                pointer = storage.data_ptr()
            except RuntimeError:  # a storage torch has released (FSDP2's unsharded buffers between uses)
                continue
            if storage.nbytes() and pointer not in storages:
                storages.add(pointer)
                total += storage.nbytes()
        elif isinstance(item, dict):
            stack += [*item.keys(), *item.values()]
        elif isinstance(item, (list, tuple, set)):
            stack += list(item)
        elif isinstance(item, types.FunctionType):
            stack += [cell.cell_contents for cell in item.__closure__ or () if _filled(cell)]
            stack += list(item.__defaults__ or ())
        elif isinstance(item, types.MethodType):
            stack += [item.__self__, item.__func__]
        elif hasattr(item, "__dict__"):
            stack += list(vars(item).values())
    return total


def _filled(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def _watch_memory(fsdp, leaves, peaks: list) -> None:
    """Measure at every leaf layer's forward and, through its input's gradient, in its backward."""
    def measure(*_):
        peaks.append(parameter_bytes(fsdp))

    def on_forward(module, args, output):
        measure()
        if args and isinstance(args[0], torch.Tensor) and args[0].requires_grad:
            args[0].register_hook(lambda grad: measure() or grad)

    for leaf in leaves:
        leaf.register_forward_hook(on_forward)


def fsdp_side(rank, world_size, student, case: FSDPCase):
    """Rank side: the student's FSDP trains this rank's rows; returns what the judge compares."""
    fsdp_class = student.resolve()
    model = case.model()
    leaves = [m for m in model.modules() if isinstance(m, nn.Linear)]
    ties: list[bool] = []      # per forward: did both modules of the tied weight see the same values?
    if case.tied:
        first, second = case.tied_pair(model)
        second.register_forward_hook(lambda *_: ties.append(
            second.weight is first.weight or torch.equal(second.weight, first.weight)))
    fsdp = fsdp_class(model, compute_dtype=getattr(torch, case.dtype) if case.dtype else None)
    peaks: list[int] = []
    _watch_memory(fsdp, leaves, peaks)
    shards = list(fsdp.parameters())
    optimizer = torch.optim.SGD(shards, lr=0.1)
    share = ROWS // world_size
    rows, events = slice(rank * share, (rank + 1) * share), []
    for step in range(case.steps):
        x, y = case.batch(step)
        optimizer.zero_grad()
        with record_traffic() as log:
            (fsdp(x[rows]).float() - y[rows]).pow(2).mean().backward()
            fsdp.finish_gradient_synchronization()
        events = events or [(str(e.op), int(e.nbytes)) for e in log.events]
        optimizer.step()
    full = {str(name): tensor.detach().float().clone() for name, tensor in fsdp.gather_full_params().items()}
    return {"full": full, "events": events, "peak": max(peaks, default=0), "ties": ties,
            "shard_dtypes": sorted({str(p.dtype) for p in shards}),
            "grad_dtypes": sorted({str(p.grad.dtype) for p in shards if p.grad is not None}),
            "shard_bytes": sum(p.numel() * p.element_size() for p in shards)}


def run_fsdp(student, case: FSDPCase, world_size: int, timeout: float):
    return attempt(fsdp_side, world_size, student, case, name="FSDP", timeout=timeout)


def value_problems(run, case: FSDPCase, tolerance: float = 1e-5) -> list[str]:
    """gather_full_params() after training equals single-process training, name by name."""
    if run.error:
        return [run.error]
    want, problems = reference(case), []
    for rank, outcome in enumerate(run.per_rank):
        where = f"rank {rank} of {run.world_size}" + (f", compute_dtype={case.dtype}" if case.dtype else "")
        got = outcome["full"]
        if case.tied and not all(outcome["ties"]):
            problems.append(f"{where}: the tied weight {case.tied_names} (one parameter held by two modules) "
                            f"came apart: in forward {outcome['ties'].index(False) + 1} its two modules saw "
                            "different values; shard it once and point both modules at the gathered tensor")
        if sorted(got) != sorted(want):
            extra, missing = sorted(set(got) - set(want)), sorted(set(want) - set(got))
            tie = " (named_parameters() gives a tied weight once, under its first name)" if case.tied else ""
            problems.append(f"{where}: gather_full_params() gave the names {extra} that the model's "
                            f"named_parameters() lacks, and lacks {missing}{tie}")
            continue
        for name, tensor in want.items():
            same_shape = got[name].shape == tensor.shape
            if not same_shape or not torch.allclose(got[name], tensor, atol=tolerance, rtol=0):
                gap = float((got[name] - tensor).abs().max()) if same_shape else "shape"
                problems.append(f"{where}: after {case.steps} SGD steps `{name}` differs from single-process "
                                f"training by {gap}")
    return problems


def memory_problems(run, case: FSDPCase) -> list[str]:
    """The parameter memory held at its largest stays below the unsharded model's."""
    if run.error:
        return [run.error]
    unsharded = sum(p.numel() * 4 for p in case.model().parameters())
    return [f"rank {rank} of {run.world_size}: at its largest (measured at every layer's forward and "
            f"backward) it held {outcome['peak']} bytes of parameters, not less than the unsharded model's "
            f"{unsharded}: free each unit's full parameters after its forward and after its backward"
            for rank, outcome in enumerate(run.per_rank) if not 0 < outcome["peak"] < unsharded]


def traffic_problems(run, case: FSDPCase, itemsize: int = 4) -> list[str]:
    """Per unit: an all-gather in forward, another in backward, one reduce-scatter; nothing else."""
    if run.error:
        return [run.error]
    sizes = case.unit_bytes(run.world_size, itemsize)
    expected = sorted(sizes * 2), sorted(sizes)
    problems = []
    for rank, outcome in enumerate(run.per_rank):
        where = f"rank {rank} of {run.world_size}, one step of {len(sizes)} units"
        ops = [op for op, _ in outcome["events"]]
        gathers = sorted(b for op, b in outcome["events"] if op in GATHERS)
        scatters = sorted(b for op, b in outcome["events"] if op in REDUCE_SCATTERS)
        others = sorted({op for op in ops if op not in GATHERS + REDUCE_SCATTERS})
        if others:
            problems.append(f"{where}: recorded {others}; FSDP needs only all-gathers and reduce-scatters")
        if (gathers, scatters) != expected:
            problems.append(f"{where}: expected 2 all-gathers and 1 reduce-scatter per unit, of "
                            f"{sorted(sizes)} bytes; recorded {ops}")
        first_scatter = next((i for i, op in enumerate(ops) if op in REDUCE_SCATTERS), len(ops))
        if sum(op in GATHERS for op in ops[:first_scatter]) < len(sizes):
            problems.append(f"{where}: a reduce-scatter came before every unit was gathered for forward")
    return problems


def precision_problems(run, case: FSDPCase) -> list[str]:
    """Parameters gathered in the compute dtype, float32 shards and gradients, values within tolerance."""
    initial = dict(case.model().named_parameters())
    moved = max(float((p - initial[name].detach()).abs().max()) for name, p in reference(case).items())
    problems = value_problems(run, case, tolerance=LOW_PRECISION_SHARE * moved)
    if run.error:
        return problems
    itemsize = getattr(torch, case.dtype).itemsize
    sizes = sorted(case.unit_bytes(run.world_size, itemsize) * 2)
    for rank, outcome in enumerate(run.per_rank):
        gathered = sorted(b for op, b in outcome["events"] if op in GATHERS)
        if gathered != sizes:
            problems.append(f"rank {rank}: the all-gathers moved {gathered} bytes; in {case.dtype} each "
                            f"unit's two all-gathers move {sorted(set(sizes))} bytes")
        if outcome["shard_dtypes"] != ["torch.float32"] or outcome["grad_dtypes"] != ["torch.float32"]:
            problems.append(f"rank {rank}: the shards (master weights) are {outcome['shard_dtypes']} with "
                            f"gradients {outcome['grad_dtypes']}; both must stay torch.float32")
    return problems


VISIBLE = FSDPCase()
VISIBLE_TIED = FSDPCase(tied=True)
_LAST_VISIBLE: dict = {}   # the latest class's visible runs, shared by the checks that judge the same run


def _visible(FSDP, case, world_size):  # noqa: N803
    key = (id(FSDP), case, world_size)
    if key not in _LAST_VISIBLE:
        if any(other[0] != id(FSDP) for other in _LAST_VISIBLE):
            _LAST_VISIBLE.clear()
        run = run_fsdp(as_student_function(FSDP, "FSDP"), case, world_size, VISIBLE_TIMEOUT_S)
        _LAST_VISIBLE[key] = (run, FSDP)   # holding the class keeps its id from being reused
    return _LAST_VISIBLE[key][0]


def check_fsdp_values(FSDP, world_size: int = 2) -> None:  # noqa: N803
    """Visible test: 3 SGD steps with your FSDP equal single-process training, on a model with a tied
    weight."""
    case = VISIBLE_TIED
    fail_with(value_problems(_visible(FSDP, case, world_size), case), "FSDP training differs")
    print(f"FSDP: {case.steps} SGD steps on {world_size} ranks equal single-process training, "
          f"the tied weight {case.tied_names} kept as one")


def check_fsdp_memory(FSDP, world_size: int = 2) -> None:  # noqa: N803
    """Visible test: the parameter memory held at any layer stays below the unsharded model's."""
    run = _visible(FSDP, VISIBLE, world_size)
    fail_with(memory_problems(run, VISIBLE), "FSDP holds too much parameter memory")
    unsharded = sum(p.numel() * 4 for p in VISIBLE.model().parameters())
    print(f"FSDP: at most {max(o['peak'] for o in run.per_rank)} bytes of parameters held, "
          f"unsharded {unsharded}")


def check_fsdp_traffic(FSDP, world_size: int = 2) -> None:  # noqa: N803
    """Visible test: per unit, all-gather before forward and before backward, one reduce-scatter."""
    fail_with(traffic_problems(_visible(FSDP, VISIBLE, world_size), VISIBLE),
              "FSDP's traffic is not ZeRO-3's")
    print(f"FSDP: 2 all-gathers and 1 reduce-scatter per unit, {VISIBLE.units + 1} units")


def check_fsdp_mixed_precision(FSDP, world_size: int = 2) -> None:  # noqa: N803
    """Visible test: with compute_dtype=torch.bfloat16, bf16 traffic, float32 shards, values close."""
    case = FSDPCase(dtype="bfloat16")
    fail_with(precision_problems(_visible(FSDP, case, world_size), case), "FSDP's mixed precision is wrong")
    print(f"FSDP: bfloat16 compute and traffic, float32 master shards, values within "
          f"{LOW_PRECISION_SHARE:.0%} of how far training moved them")
