"""Checks of chapter 05's zero-bubble exercise, ZB-H1 (Qi et al. 2024): the student's F/B/W op lists.

The student's generator runs in a child under the exercise's refusal (course_lib and
torch.distributed.pipelining); the judging side plays the returned ops on the course simulator with a
split backward: "B" the input gradient, "W" the weight gradient. Nothing here builds a ZB-H1 schedule:
the makespan is held to the bubble the paper states, and a failure draws the student's own timeline
above a bar as long as ZB-H1's makespan.
"""

from __future__ import annotations

from course_lib import sim
from course_lib.grading.attempt.rank_attempt import fail_with
from course_lib.grading.attempt.refusals import Refusal
from course_lib.grading.attempt.student_function import as_student_function
from course_lib.grading.checks.ch05_pipeline.visible import (
    PIPELINING,
    deadlock_problem,
    generate_schedules,
    pair_problems,
    structure_problems,
)
from course_lib.sim.timeline_text import timeline_text

NAME = "zero_bubble_h1"
REFUSAL = Refusal(NAME, modules=PIPELINING,
                  why="the exercise is to work out where the weight gradients go yourself")
# (F, B, W): one micro-batch's forward, input-gradient and weight-gradient time on a stage. W <= F, B, as
# in a transformer layer (Qi et al. 2024, Table 1: W has no attention-score term).
VISIBLE_TIMES = ((1.0, 1.0, 1.0), (1.0, 1.5, 0.5), (1.2, 1.0, 0.8))
VISIBLE_PAIRS = ((4, 8), (3, 3), (2, 1), (1, 4), (4, 5))
VISIBLE_TIMEOUT_S = 20
DRAWN_STAGES, DRAWN_MICROBATCHES = 8, 16   # larger failing cases are described, not drawn


def play(stages: int, microbatches: int, ops, times, kind: str = NAME):
    """The simulator's Timeline of ``ops`` with (F, B, W) times; ValueError when it deadlocks."""
    schedule = sim.Schedule(kind, stages, microbatches, 1, [[tuple(op) for op in stage] for stage in ops])
    forward, backward, weight = times
    return sim.simulate_pipeline(schedule, forward, backward, t_weight=weight)


def target_makespan(stages: int, microbatches: int, times) -> tuple[float, str]:
    """The makespan a ZB-H1 reaches, and how it is worked out.

    With at least as many micro-batches as stages, Qi et al. 2024 (section 2.1, ZB-H1) state a bubble of
    (p-1)(F+B-W) for B the input-gradient time, which DualPipe's README writes (PP-1)(F+B-2W) with B the
    whole backward. With fewer, the pipeline never fills, and the bar is 1F1B's own makespan."""
    p, m = stages, microbatches
    forward, backward, weight = times
    if m >= p:
        bubble = (p - 1) * (forward + backward - weight)
        return m * (forward + backward + weight) + bubble, (
            f"m(F+B+W) + ZB-H1's bubble (p-1)(F+B-W) = {m * (forward + backward + weight):g} + {bubble:g}")
    one_f_one_b = sim.simulate_pipeline(sim.pipeline_schedule("1f1b", p, m), forward, backward,
                                        t_weight=weight).makespan
    return one_f_one_b, "1F1B's makespan (fewer micro-batches than stages: the pipeline never fills)"


def dependency_problems(stages: int, microbatches: int, ops) -> list[str]:
    """Every F, B and W once, B after its F, W after its B, and no stage waiting forever."""
    problems = structure_problems(stages, microbatches, ops, phases="FBW")
    if problems:
        return problems
    try:
        play(stages, microbatches, ops, VISIBLE_TIMES[0])
    except ValueError as error:
        return [deadlock_problem(stages, microbatches, error)
                + " (a W waits only for its own stage's B)"]
    return []


def memory_problems(stages: int, microbatches: int, ops) -> list[str]:
    """No stage holds more micro-batches of activations (from F until W) than 1F1B's busiest stage."""
    problems = dependency_problems(stages, microbatches, ops)
    if problems:
        return problems
    held = play(stages, microbatches, ops, VISIBLE_TIMES[0]).peak_activations
    limit = min(stages, microbatches)
    worst = max(range(stages), key=lambda s: held[s])
    if held[worst] > limit:
        return [f"stages={stages}, microbatches={microbatches}, stage {worst}: holds the activations of "
                f"{held[worst]:g} micro-batches at once (a micro-batch is held from its F until its W); "
                f"1F1B's busiest stage holds min(stages, microbatches) = {limit}: per stage {held}"]
    return []


def makespan_problems(stages: int, microbatches: int, ops, times_list=VISIBLE_TIMES) -> list[str]:
    """The simulated makespan reaches ZB-H1's for every (F, B, W) in ``times_list``; a failure draws the
    student's timeline above a bar as long as ZB-H1's makespan."""
    problems = dependency_problems(stages, microbatches, ops)
    if problems:
        return problems
    for times in times_list:
        timeline = play(stages, microbatches, ops, times)
        want, how = target_makespan(stages, microbatches, times)
        if timeline.makespan > want * (1 + 1e-9):
            forward, backward, weight = times
            return [f"stages={stages}, microbatches={microbatches}, F={forward:g}, B={backward:g}, "
                    f"W={weight:g}: simulated makespan {timeline.makespan:.4g}, ZB-H1's is {want:.4g} "
                    f"({how})" + drawing(stages, microbatches, timeline, times, want)]
    return []


def drawing(stages: int, microbatches: int, timeline, times, target: float) -> str:
    """The student's timeline as text above a bar as long as ZB-H1's makespan, for cases small enough to
    read."""
    if stages > DRAWN_STAGES or microbatches > DRAWN_MICROBATCHES:
        return ""
    quantum = min(times) / 3
    rows = timeline_text(timeline, quantum).splitlines()
    name_width = rows[0].index("|") - 1
    bar = f"{'ZB-H1':>{name_width}} |{'=' * round(target / quantum)}| ends here"
    return "\n  your timeline (. = idle), and how long ZB-H1 takes:\n" + _indent("\n".join([*rows, bar]))


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


ASPECTS = {"dependencies": dependency_problems, "memory": memory_problems, "makespan": makespan_problems}


def _visible(zero_bubble_h1, aspect: str, what: str) -> None:
    student = as_student_function(zero_bubble_h1, NAME, refusal=REFUSAL)
    outcomes, error = generate_schedules(student, VISIBLE_PAIRS, VISIBLE_TIMEOUT_S)
    fail_with(pair_problems(outcomes, VISIBLE_PAIRS, ASPECTS[aspect], NAME, error), what, limit=2)


def check_zero_bubble_h1_dependencies(zero_bubble_h1) -> None:
    """Visible test: every F, B and W once, in an order the stages can run together."""
    _visible(zero_bubble_h1, "dependencies", "zero_bubble_h1's ops cannot run in that order")
    print(f"{NAME}: every dependency holds for (stages, microbatches) in {list(VISIBLE_PAIRS)}")


def check_zero_bubble_h1_memory(zero_bubble_h1) -> None:
    """Visible test: no stage holds more activations than 1F1B's stage 0."""
    _visible(zero_bubble_h1, "memory", "zero_bubble_h1 holds more activations than 1F1B")
    print(f"{NAME}: no stage holds more than min(stages, microbatches) micro-batches, as in 1F1B")


def check_zero_bubble_h1_makespan(zero_bubble_h1) -> None:
    """Visible test: the simulated makespan reaches ZB-H1's bubble, (p-1)(F+B-W), for three (F, B, W)."""
    _visible(zero_bubble_h1, "makespan", "zero_bubble_h1's simulated makespan misses ZB-H1's")
    print(f"{NAME}: the simulated makespan reaches m(F+B+W) + (p-1)(F+B-W) for (F, B, W) in "
          f"{list(VISIBLE_TIMES)}")

