"""The student-facing side of chapter 08's capstone checks: the stage each rank built against the
layers and tensor-parallel split it should hold.
"""

from __future__ import annotations

from course_lib.grading.attempt.judge_runner import judging
from course_lib.grading.attempt.rank_attempt import RankRun


@judging
def stage_problems(run: RankRun, layers: int, tp: int) -> list[str]:
    problems = []
    for rank, result in enumerate(run.records):
        if result.raised:
            problems.append(f"rank {rank}: build_stage or its stage raised {result.raised}")
            continue
        if result.held > result.whole / tp:
            problems.append(f"rank {rank}: the stage holds {result.held} matrix weights of the blocks' "
                            f"{result.whole}; with tensor parallelism over {tp} ranks each rank should "
                            f"hold 1/{tp} of every one (split every Linear of the blocks)")
        for what in ("output", "input_grad"):
            if not getattr(result, what) <= 1e-5:
                problems.append(f"rank {rank}: the stage's {what.replace('_', ' ')} differs from the "
                                f"unsharded blocks' by {getattr(result, what):.3g}")
    return problems
