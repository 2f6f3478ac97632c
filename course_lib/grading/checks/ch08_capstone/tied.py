"""Checks of the capstone's tied weight: the student's ``tied_step`` reduces the gradients of a model whose
token embedding (first pipeline stage) is tied to its output head (last stage), and steps.

Judged on one run of 8 ranks per mesh, three ways: the values against the same model trained in one
process in float64 (its losses, and the tied weight after the last step); the tie (the first and the last
stage's copies equal after every run); and the recorded traffic (every reduction over a group of this
rank's pipeline ends or of its data-parallel replicas, the tied weight once over the former per step, the
stage's gradients once over the latter). References come from torch's DeviceMesh and torch's autograd on
one process (course_lib.capstone.tied), never from a reduction written here.
"""

from __future__ import annotations

from course_lib.capstone.tied import run_tied, single_process_tied
from course_lib.grading.attempt.rank_attempt import fail_with
from course_lib.grading.attempt.student_function import as_student_function
from course_lib.grading.checks.ch08_capstone.visible import RANK_TIMEOUT_S, REFUSAL

# pp outermost, 4 stages, 2 replicas, no tensor parallelism: a rank's pipeline ends are 6 ranks apart and
# its replica is its neighbour, so the data-parallel group, the world or a pipeline group in place of the
# ends' pair each reduce over other ranks.
VISIBLE_TIED_MESH = ((4, 2, 1), ("pp", "dp", "tp"))
VALUE_TOLERANCE = 1e-10   # float64: the ranks' sums differ from one process's only in rounding
STEPS = 3


def _value_problems(ranks: list, steps: int, seed: int) -> list[str]:
    losses, weight = single_process_tied(steps, seed)
    last = [r["losses"] for r in ranks if r["stage"] == r["stages"] - 1]
    problems = [f"step {i}: loss {sum(got) / len(got):.10f}, {want:.10f} in one process"
                for i, (got, want) in enumerate(zip(zip(*last, strict=True), losses, strict=True))
                if not abs(sum(got) / len(got) - want) <= VALUE_TOLERANCE]
    for rank, result in enumerate(ranks):
        if result["tied"] is not None:
            gap = float((result["tied"] - weight).abs().max())
            if not gap <= VALUE_TOLERANCE:
                problems.append(f"rank {rank} (stage {result['stage']}): its copy of the tied weight is "
                                f"{gap:.3g} from one process's after {steps} steps")
    return problems


def _tie_problems(ranks: list) -> list[str]:
    problems = []
    for rank, result in enumerate(ranks):
        if result["stage"] == 0:
            partner = result["pipeline"][-1]
            gap = float((result["tied"] - ranks[partner]["tied"]).abs().max())
            if not gap <= VALUE_TOLERANCE:
                problems.append(f"ranks {rank} and {partner}: the embedding and the head, one weight, differ "
                                f"by {gap:.3g} after the run")
    return problems


def _traffic_problems(ranks: list, steps: int) -> list[str]:
    """Per rank and step: the groups it reduced over and the bytes, against its pipeline ends and replicas."""
    problems = []
    for rank, result in enumerate(ranks):
        ends = sorted({result["pipeline"][0], result["pipeline"][-1]})
        replicas = sorted(result["data_parallel"])
        holds_copy = result["tied"] is not None
        for step in range(steps):
            calls = [(group, size) for s, group, size in result["log"] if s == step]
            wrong = sorted({tuple(g) for g, _ in calls if g not in (ends if holds_copy else None, replicas)})
            if wrong:
                problems.append(f"rank {rank} (stage {result['stage']}), step {step}: reduced over "
                                f"{[list(g) for g in wrong]}; this rank's copies of the tied weight are on "
                                f"ranks {ends}, its data-parallel replicas {replicas}")
            over_ends = [size for g, size in calls if holds_copy and g == ends and g != replicas]
            if holds_copy and over_ends != [result["tied_bytes"]]:
                problems.append(f"rank {rank}, step {step}: {len(over_ends)} reductions of {sum(over_ends)} "
                                f"bytes over the tied weight's ranks {ends}; one weight of "
                                f"{result['tied_bytes']} bytes is summed there once a step")
            over_replicas = sum(size for g, size in calls if g == replicas)
            if len(replicas) > 1 and over_replicas != result["stage_bytes"]:
                problems.append(f"rank {rank}, step {step}: {over_replicas} bytes reduced over the "
                                f"data-parallel replicas {replicas}; the stage's gradients are "
                                f"{result['stage_bytes']} bytes, each reduced once a step")
    return problems


def tied_problems(ranks: list, steps: int, seed: int) -> list[str]:
    """Every way the run differs from one tied weight trained in one process (values, tie, traffic)."""
    return _value_problems(ranks, steps, seed) + _tie_problems(ranks) + _traffic_problems(ranks, steps)


def check_tied_weight(tied_step, mesh=VISIBLE_TIED_MESH, steps: int = STEPS, seed: int = 0) -> list:
    """8 ranks on ``mesh``, ``steps`` steps: the values of one process, the tie kept, the traffic of one
    weight reduced once over the ranks holding its copies and once over the replicas."""
    student = as_student_function(tied_step, "tied_step", refusal=REFUSAL)
    try:
        ranks = run_tied(student, steps=steps, seed=seed, mesh=mesh, timeout=RANK_TIMEOUT_S,
                         plain_results=True)
    except Exception as error:   # noqa: BLE001 - a rank's failure, a hang, a group nobody joins: the student's
        raise AssertionError(f"tied_step did not run on mesh {mesh}: {error}") from None
    fail_with(tied_problems(ranks, steps, seed),
              f"the tied weight on mesh {mesh} is not trained as one weight in one process (float64, "
              f"tolerance {VALUE_TOLERANCE})")
    print(f"tied_step: {steps} steps on mesh {mesh}, values of one process, the copies equal, one "
          "reduction of the tied weight a step over the ranks that hold it")
    return ranks
