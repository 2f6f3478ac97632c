"""Checks of chapter 05's first exercise, a 1F1B schedule: run the student's generator, judge the ops.

The student's function runs in a child process under the exercise's refusal (course_lib, which holds the
course's own generator, and torch.distributed.pipelining, which holds PyTorch's); the judging side checks
the ops it returned: dependencies, activations held, and simulated makespan.
"""

from __future__ import annotations

import math

from course_lib import sim
from course_lib.grading.attempt.judge_runner import (
    CaseAnswer,
    answer_or_raised,
    judging,
    ranks_of,
    run_answer,
)
from course_lib.grading.attempt.rank_attempt import FailureText, RankRun, fail_with
from course_lib.grading.attempt.refusals import Refusal
from course_lib.grading.attempt.student_function import as_student_function

PIPELINING = ("torch.distributed.pipelining",)   # PyTorch's schedules (Schedule1F1B, its action lists)
REFUSAL = Refusal("one_f_one_b", modules=PIPELINING,
                  why="the exercise is to work out the 1F1B order yourself")
# (t_forward, t_backward, t_comm): equal stages, backward twice forward; uneven stages with hops.
TIMINGS = ((1.0, 2.0, 0.0), (1.0, 1.0, 0.25), ("uneven", "uneven", 0.4))
VISIBLE_PAIRS = ((4, 8), (3, 3), (2, 1), (1, 4))
VISIBLE_TIMEOUT_S = 20


def _plain_ops(schedule) -> list:
    """The returned schedule as lists of [phase, microbatch]; anything unreadable becomes its repr."""
    stages = []
    for stage in schedule:
        ops = []
        for op in stage:
            try:
                phase, microbatch = op
                ops.append([str(phase), int(microbatch)] if isinstance(microbatch, int) else repr(op))
            except (TypeError, ValueError):
                ops.append(repr(op))
        stages.append(ops)
    return stages


def _generate(rank, world_size, student, pairs):
    """Child side: the student's schedule for every (stages, microbatches), or the error it raised."""
    function = student.resolve()
    return [answer_or_raised(lambda pair=pair: _plain_ops(function(*pair))) for pair in pairs]


def generate_schedules(student, pairs, timeout: float) -> RankRun:
    """Every pair's CaseAnswer (the ops, or what the student's function raised), run in a child process under
    the student's refusal; a run that hung or failed says why in words."""
    pairs = [tuple(p) for p in pairs]
    text = FailureText(student.name, raised="running {subject} failed: {summary}",
                       hung="{subject} did not return within {timeout:g} s (a loop that never ends?)")
    return run_answer(_generate, 1, student, [list(p) for p in pairs], record=CaseAnswer, text=text,
                      timeout=timeout, cases=pairs)


@judging
def pair_problems(run: RankRun, judge, name: str) -> list[str]:
    """``judge(stages, microbatches, ops)`` on every pair that returned; errors (a refusal) as they came."""
    problems = []
    for each in ranks_of(run):
        (stages, microbatches), answer = each.case, each.outcome
        if answer.raised:
            problems.append(answer.refusal or f"{name}({stages}, {microbatches}) raised {answer.raised}")
        else:
            problems += judge(stages, microbatches, answer.value)
    return problems


def structure_problems(stages: int, microbatches: int, ops, phases: str = "FB") -> list[str]:
    """Shape of the answer: one list per stage, each (phase, m) exactly once, each phase after the one
    before it in ``phases`` (B after its F; W after its B)."""
    where = f"stages={stages}, microbatches={microbatches}"
    if not isinstance(ops, list) or len(ops) != stages:
        return [f"{where}: expected a list with one list of ops per stage ({stages}), got {str(ops)[:80]}"]
    names = " or ".join(f'"{p}"' for p in phases)
    for s, stage in enumerate(ops):
        bad = [op for op in stage if not (isinstance(op, list) and op[0] in phases
                                          and 0 <= op[1] < microbatches)]
        if bad:
            return [f"{where}, stage {s}: {bad[0]} is not an op ({names}, microbatch in "
                    f"0..{microbatches - 1})"]
        seen = [tuple(op) for op in stage]
        if len(set(seen)) != len(seen) or len(seen) != len(phases) * microbatches:
            return [f"{where}, stage {s}: every op {', '.join(f'({p!r}, m)' for p in phases)} must appear "
                    f"exactly once ({len(phases) * microbatches} ops), got {len(seen)} ops, "
                    f"{len(set(seen))} different"]
        for i, (phase, m) in enumerate(seen):
            before = phases[phases.index(phase) - 1] if phase != phases[0] else None
            if before and (before, m) not in seen[:i]:
                return [f"{where}, stage {s}: ({phase!r}, {m}) comes before ({before!r}, {m}); "
                        + ("a stage can only run the backward of a micro-batch whose forward it has done"
                           if phase == "B" else "the weight gradient needs the output gradient its B "
                           "received")]
    return []


def _timings(kind, stages: int):
    if kind != "uneven":
        return kind
    return [1.0 + 0.5 * ((3 * s) % 4) for s in range(stages)]   # stages whose layers differ in cost


def simulate(stages: int, microbatches: int, ops, timing) -> float:
    """The makespan of ``ops`` under one (t_forward, t_backward, t_comm), played by the course simulator."""
    schedule = sim.Schedule("1f1b", stages, microbatches, 1, [[tuple(op) for op in stage] for stage in ops])
    forward = _timings(timing[0], stages)
    backward = [2 * t for t in forward] if timing[1] == "uneven" else timing[1]
    return sim.simulate_pipeline(schedule, forward, backward, t_comm=timing[2]).makespan


def deadlock_problem(stages: int, microbatches: int, error: ValueError) -> str:
    return (f"stages={stages}, microbatches={microbatches}: a dependency is broken, so the pipeline stalls. "
            f"Each forward of m needs stage s-1's forward of m first, each backward of m needs stage s+1's "
            f"backward of m. The simulator says: {error}")


def dependency_problems(stages: int, microbatches: int, ops) -> list[str]:
    """Structure, then whether the stages can run their ops in this order at all (no circular wait)."""
    problems = structure_problems(stages, microbatches, ops)
    if problems:
        return problems
    try:
        simulate(stages, microbatches, ops, TIMINGS[0])
    except ValueError as error:
        return [deadlock_problem(stages, microbatches, error)]
    return []


def held_per_stage(ops) -> list[int]:
    """Per stage, the most micro-batches whose activations it holds at once (forward done, backward not)."""
    peaks = []
    for stage in ops:
        held = peak = 0
        for phase, _ in stage:
            held += 1 if phase == "F" else -1
            peak = max(peak, held)
        peaks.append(peak)
    return peaks


def _fullest_moment(stage_ops) -> tuple[int, list[int]]:
    """Where a stage holds the most: the index of the op after which it does, and the micro-batches held."""
    held, fullest, where = [], [], 0
    for i, (phase, m) in enumerate(stage_ops):
        if phase == "F":
            held.append(m)
        elif m in held:
            held.remove(m)
        if len(held) > len(fullest):
            fullest, where = list(held), i
    return where, fullest


def memory_problems(stages: int, microbatches: int, ops) -> list[str]:
    """No stage holds the activations of more micro-batches at once than the same stage of 1F1B does."""
    problems = structure_problems(stages, microbatches, ops)
    if problems:
        return problems
    where = f"stages={stages}, microbatches={microbatches}"
    # The bound comes from playing the course's own 1F1B, never from a formula written here: this module
    # is on the student's page, and the bound per stage is what part 1 asks them to derive.
    bound = held_per_stage([[op[:2] for op in stage]
                            for stage in sim.pipeline_schedule("1f1b", stages, microbatches).ops])
    for s, (held, most) in enumerate(zip(held_per_stage(ops), bound, strict=True)):
        if held > most:
            at, micro_batches = _fullest_moment(ops[s])
            problems.append(
                f"{where}, stage {s}: after its op {at} ({tuple(ops[s][at])}) it holds the activations of "
                f"{held} micro-batches at once ({micro_batches}), more than 1F1B's stage {s} ever does. A "
                f"forward run that early only holds memory: the backward of micro-batch {micro_batches[0]} "
                f"still waits for its gradient to come back from the stages after stage {s}. Follow that "
                "gradient and count how many forwards the stage needs meanwhile to stay busy")
    return problems


def makespan_problems(stages: int, microbatches: int, ops) -> list[str]:
    """The simulated makespan equals 1F1B's, for several stage and communication times."""
    problems = dependency_problems(stages, microbatches, ops)
    if problems:
        return problems
    reference = sim.pipeline_schedule("1f1b", stages, microbatches).ops
    for timing in TIMINGS:
        got = simulate(stages, microbatches, ops, timing)
        want = simulate(stages, microbatches, reference, timing)
        if not math.isclose(got, want, rel_tol=1e-9):
            return [f"stages={stages}, microbatches={microbatches}, t_forward={timing[0]}, "
                    f"t_backward={timing[1]}, t_comm={timing[2]}: simulated makespan {got:.3f}, 1F1B's is "
                    f"{want:.3f}"]
    return []


ASPECTS = {"dependencies": dependency_problems, "memory": memory_problems, "makespan": makespan_problems}


def schedule_problems(run: RankRun, aspect: str) -> list[str]:
    """What is wrong with the student's schedules for ``aspect`` (dependencies, memory, makespan)."""
    return pair_problems(run, ASPECTS[aspect], "one_f_one_b")


def _visible(one_f_one_b, aspect: str, what: str) -> None:
    student = as_student_function(one_f_one_b, "one_f_one_b", refusal=REFUSAL)
    fail_with(schedule_problems(generate_schedules(student, VISIBLE_PAIRS, VISIBLE_TIMEOUT_S), aspect), what)


def check_one_f_one_b_dependencies(one_f_one_b) -> None:
    """Visible test: every op once, each backward after its forward, and no stage waits forever."""
    _visible(one_f_one_b, "dependencies", "one_f_one_b's ops cannot run in that order")
    print(f"one_f_one_b: every dependency holds for (stages, microbatches) in {list(VISIBLE_PAIRS)}")


def check_one_f_one_b_memory(one_f_one_b) -> None:
    """Visible test: no stage holds more micro-batches' activations at once than 1F1B's same stage."""
    _visible(one_f_one_b, "memory", "one_f_one_b holds more activations than 1F1B")
    print(f"one_f_one_b: no stage holds more activations than 1F1B's, for (stages, microbatches) in "
          f"{list(VISIBLE_PAIRS)}")


def check_one_f_one_b_makespan(one_f_one_b) -> None:
    """Visible test: the simulator plays your schedule in exactly 1F1B's time."""
    _visible(one_f_one_b, "makespan", "one_f_one_b's simulated makespan is not 1F1B's")
    print("one_f_one_b: simulated makespan equals 1F1B's, with and without stage-to-stage hops")
