"""The student-facing side of chapter 07's FSDP checks: values against unsharded training, memory held
per phase against the sharded bound, the gathers and reduce-scatters, and mixed precision.
"""

from __future__ import annotations

import torch

from course_lib.grading.attempt.judge_runner import judging
from course_lib.grading.checks.ch07_fsdp.ranks import FSDPCase, FSDPOutcome, reference
from course_lib.grading.checks.ch07_zero.ranks import GATHERS, REDUCE_SCATTERS

# In low precision the parameters may differ from float32 training by this share of how far training
# moved them (bfloat16 keeps 8 bits of mantissa: well under it; gradients off by a factor: well over it)
LOW_PRECISION_SHARE = 0.1
# What an FSDP may hold beyond the plain model's activations, in units of the largest unit: in the
# forward, the one running and the next (prefetched); in the backward, those and one unit's full gradient.
UNITS_AT_ONCE = {"forward": 2, "backward": 3}


@judging
def value_problems(run, case: FSDPCase, tolerance: float = 1e-5) -> list[str]:
    """gather_full_params() after training equals single-process training, name by name."""
    want, problems = reference(case), []
    for rank, outcome in enumerate(run.records):
        where = f"rank {rank} of {run.world_size}" + (f", compute_dtype={case.dtype}" if case.dtype else "")
        got = outcome.full
        if case.tied and not all(outcome.ties):
            problems.append(f"{where}: the tied weight {case.tied_names} (one parameter held by two modules) "
                            f"came apart: in forward {outcome.ties.index(False) + 1} its two modules saw "
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


def memory_bound(case: FSDPCase, world_size: int, outcome: FSDPOutcome, phase: str) -> tuple[int, str]:
    """The most bytes a rank may hold beyond the plain model's activations in ``phase``, and why."""
    largest = max(case.unit_bytes(world_size, 4))
    shards, units = outcome.shard_bytes, UNITS_AT_ONCE[phase]
    if phase == "forward":
        return (shards + units * largest,
                f"its shards ({shards}) and {units} x the largest unit's {largest} bytes (the unit running "
                "and the next one, prefetched)")
    return (2 * shards + units * largest,
            f"its shards and their gradients (2 x {shards}) and {units} x the largest unit's {largest} bytes "
            "(the unit running, the next one prefetched, one unit's full gradient)")


@judging
def memory_problems(run, case: FSDPCase) -> list[str]:
    """In the forward and in the backward, at its peak the process holds at most the plain model's
    activations plus the bound above."""
    unsharded = sum(p.numel() * 4 for p in case.model().parameters())
    problems = []
    for rank, outcome in enumerate(run.records):
        for phase in ("forward", "backward"):
            bound, made_of = memory_bound(case, run.world_size, outcome, phase)
            peak, baseline = outcome.peak[phase], outcome.baseline[phase]
            if peak - baseline > bound:
                problems.append(
                    f"rank {rank} of {run.world_size}: in the {phase} the process held up to {peak} bytes of "
                    f"tensors, {peak - baseline} more than the plain model's activations ({baseline}); an "
                    f"FSDP may add {bound}: {made_of}. The whole model is {unsharded} bytes. Free each "
                    "unit's full parameters after its forward and after its backward so that nothing "
                    "(autograd's saved tensors included) still holds them, and reduce-scatter each unit's "
                    "gradient as soon as it is ready")
                break
    return problems


def _backward_order(ops: list[str], units: int) -> str | None:
    """Each reduce-scatter must start during the backward: before it, at most one unit more than those
    already reduced may have been gathered for the backward (the one running, one prefetched)."""
    backward = ops[units:]
    gathered = reduced = 0
    for op in backward:
        gathered += op in GATHERS
        if op in REDUCE_SCATTERS:
            reduced += 1
            if gathered > reduced + 1:
                return (f"reduce-scatter {reduced} came after {gathered} backward all-gathers: "
                        "reduce-scatter each unit's gradient as soon as its backward has made it, "
                        "before gathering further")
    return None


@judging
def traffic_problems(run, case: FSDPCase, itemsize: int = 4) -> list[str]:
    """Per unit: an all-gather in forward, another in backward, one reduce-scatter started during the
    backward (none left to finish_gradient_synchronization); nothing else."""
    sizes = case.unit_bytes(run.world_size, itemsize)
    expected = sorted(sizes * 2), sorted(sizes)
    problems = []
    for rank, outcome in enumerate(run.records):
        where = f"rank {rank} of {run.world_size}, one step of {len(sizes)} units"
        everything = outcome.events + outcome.finish_events
        ops = [op for op, _ in outcome.events]
        gathers = sorted(b for op, b in everything if op in GATHERS)
        scatters = sorted(b for op, b in everything if op in REDUCE_SCATTERS)
        others = sorted({op for op, _ in everything if op not in GATHERS + REDUCE_SCATTERS})
        if others:
            problems.append(f"{where}: recorded {others}; FSDP needs only all-gathers and reduce-scatters")
        if (gathers, scatters) != expected:
            problems.append(f"{where}: expected 2 all-gathers and 1 reduce-scatter per unit, of "
                            f"{sorted(sizes)} bytes; recorded {[op for op, _ in everything]}")
        late = [op for op, _ in outcome.finish_events if op in REDUCE_SCATTERS]
        if late:
            problems.append(f"{where}: {len(late)} reduce-scatters waited for "
                            "finish_gradient_synchronization; start each during the backward, once its "
                            "unit's gradient is ready, to overlap the backward of the units before it")
        first_scatter = next((i for i, op in enumerate(ops) if op in REDUCE_SCATTERS), len(ops))
        if sum(op in GATHERS for op in ops[:first_scatter]) < len(sizes):
            problems.append(f"{where}: a reduce-scatter came before every unit was gathered for forward")
        elif not late and (order := _backward_order(ops, len(sizes))):
            problems.append(f"{where}: {order}")
    return problems


@judging
def precision_problems(run, case: FSDPCase) -> list[str]:
    """Parameters gathered in the compute dtype, float32 shards and gradients, values within tolerance."""
    initial = dict(case.model().named_parameters())
    moved = max(float((p - initial[name].detach()).abs().max()) for name, p in reference(case).items())
    problems = value_problems(run, case, tolerance=LOW_PRECISION_SHARE * moved)
    itemsize = getattr(torch, case.dtype).itemsize
    sizes = sorted(case.unit_bytes(run.world_size, itemsize) * 2)
    for rank, outcome in enumerate(run.records):
        gathered = sorted(b for op, b in outcome.events if op in GATHERS)
        if gathered != sizes:
            problems.append(f"rank {rank}: the all-gathers moved {gathered} bytes; in {case.dtype} each "
                            f"unit's two all-gathers move {sorted(set(sizes))} bytes")
        if outcome.shard_dtypes != ["torch.float32"] or outcome.grad_dtypes != ["torch.float32"]:
            problems.append(f"rank {rank}: the shards (master weights) are {outcome.shard_dtypes} with "
                            f"gradients {outcome.grad_dtypes}; both must stay torch.float32")
    return problems
