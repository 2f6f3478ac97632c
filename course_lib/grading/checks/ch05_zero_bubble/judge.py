"""The student-facing side of chapter 05's ZB-H1 checks: a schedule's dependencies, the activations it
holds and its simulated makespan against the ZB-H1 target, with the timeline drawn beside the target.
"""

from __future__ import annotations

from course_lib import sim
from course_lib.grading.checks.ch05_pipeline.visible import (
    deadlock_problem,
    structure_problems,
)
from course_lib.sim.timeline_text import timeline_text

NAME = "zero_bubble_h1"
# (F, B, W): one micro-batch's forward, input-gradient and weight-gradient time on a stage. W <= F, B, as
# in a transformer layer (Qi et al. 2024, Table 1: W has no attention-score term).
VISIBLE_TIMES = ((1.0, 1.0, 1.0), (1.0, 1.5, 0.5), (1.2, 1.0, 0.8))
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
