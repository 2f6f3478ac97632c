"""Hidden checks of chapter 07, part 3 (instructor-only): the student's FSDP (ZeRO stage 3) on 2 and 4 ranks.

Models are drawn from a seed taken at grading time (named in every failure message): block width and
count vary, so unit sizes rarely divide by the world size. Each rank trains its rows for 3 SGD steps;
the judge trains the unwrapped model on one process and compares.

  grade_id                          points  hidden check
  test_fsdp_values                     4    check_fsdp_values_hidden(FSDP)
  test_fsdp_memory                     2    check_fsdp_memory_hidden(FSDP)
  test_fsdp_traffic                    2    check_fsdp_traffic_hidden(FSDP)
  test_fsdp_mixed_precision            2    check_fsdp_mixed_precision_hidden(FSDP)

values: on models with a tied weight (one Linear of a middle unit holds another's weight), the modules
holding it see the same values in every forward, and gather_full_params() equals single-process float32
training within 1e-5 (the tied weight once, under its first name). memory: the tensor bytes the process
really holds (every storage made since the FSDP was built and still alive, autograd's saved tensors and
gradients included), measured at every layer's forward and backward and at the end of the forward, exceed
the plain model's activations by at most the shards, their gradients and 3 x the largest unit. traffic:
per unit one all-gather before forward, one before backward and one reduce-scatter, each of the unit's
padded flat buffer, every reduce-scatter started during the backward (at most one unit gathered ahead of
the reductions), nothing else. torch's FSDP and ZeroRedundancyOptimizer, and course_lib, are refused.
mixed precision: with compute_dtype=torch.bfloat16, parameters gathered in bf16, float32 shards and
gradients, values within 10% of how far training moved them.
"""

from __future__ import annotations

from course_lib.grading.checks.ch07_fsdp import (
    FSDPCase,
    memory_problems,
    precision_problems,
    run_fsdp,
    traffic_problems,
    value_problems,
)

from .ch07_zero import checked_runs

WORLD_SIZES = (4, 2)
TIMEOUT_S = 40
POINTS = {"test_fsdp_values": 4, "test_fsdp_memory": 2, "test_fsdp_traffic": 2,
          "test_fsdp_mixed_precision": 2}


def _checked(FSDP, judge, what: str, dtype: str | None = None, tied: bool = False) -> None:  # noqa: N803
    def case_for(rng, seed):
        return FSDPCase(width=rng.randint(9, 23), units=rng.randint(5, 8), dtype=dtype, seed=seed % 10_000,
                        tied=tied)

    checked_runs(FSDP, lambda *a: run_fsdp(*a, TIMEOUT_S), WORLD_SIZES, case_for, judge, what)


def check_fsdp_values_hidden(FSDP) -> None:  # noqa: N803
    _checked(FSDP, value_problems, "FSDP training differs from single-process training", tied=True)


def check_fsdp_memory_hidden(FSDP) -> None:  # noqa: N803
    _checked(FSDP, memory_problems, "FSDP holds too much memory")


def check_fsdp_traffic_hidden(FSDP) -> None:  # noqa: N803
    _checked(FSDP, traffic_problems, "FSDP's traffic is not ZeRO-3's")


def check_fsdp_mixed_precision_hidden(FSDP) -> None:  # noqa: N803
    _checked(FSDP, precision_problems, "FSDP's mixed precision is wrong", dtype="bfloat16")
