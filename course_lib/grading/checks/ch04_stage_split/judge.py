"""What the checks of chapter 04's stage split say about a split: its memory, its step against the best
step (which the caller brings: nothing in course_lib searches for a split), what it does when no split
fits, and its real run.

A split's step is what the course's simulator plays for it (GPipe, free hops): the judge states no formula
for it. Every message names the case and prints the student's stages (times, memory against the limit),
so the feedback shows where the time or the memory went, never the split that would have been right nor
which stage sets the pace.
"""

from __future__ import annotations

import statistics

from course_lib import sim
from course_lib.grading.attempt.judge_runner import (
    CaseAnswer,
    answer_or_raised,
    judging,
    ranks_of,
    run_answer,
)
from course_lib.grading.attempt.rank_attempt import FailureText, RankRun

from .model import NAME, Case, stage_memory, stage_table, stage_times, structure_problems

TOLERANCE = 1e-9
CLEAR_GAP = 1.6          # stages whose modelled busy times differ by this factor must measure in that order


def _plain_split(answer):
    """The returned split as a list of ints; anything else (or any other item) as its repr."""
    plain = list(answer) if isinstance(answer, (list, tuple)) else answer
    return [int(x) if isinstance(x, int) and not isinstance(x, bool) else repr(x) for x in plain] \
        if isinstance(plain, list) else repr(plain)


def _answer(rank, world_size, student, arguments):
    """Child side: the student's split for every case, or the error it raised."""
    function = student.resolve()
    return [answer_or_raised(lambda kwargs=kwargs: _plain_split(function(**kwargs))) for kwargs in arguments]


def ask(student, cases: list[Case], timeout: float) -> RankRun:
    """Every case's CaseAnswer (the split, or what it raised), from one child process under the exercise's
    refusal; a run that hung or failed says why in words."""
    text = FailureText(NAME, raised="running {subject} failed: {summary}",
                       hung=f"{{subject}} did not return within {{timeout:g}} s for {len(cases)} cases "
                            "(a search too slow?)")
    return run_answer(_answer, 1, student, [c.arguments() for c in cases], record=CaseAnswer, text=text,
                      timeout=timeout, cases=cases)


@judging
def case_problems(run: RankRun, judge, within: range | None = None, no_fit=()) -> list[str]:
    """``judge(case, starts)`` for every case whose answer came back (only the cases at the indices
    ``within``, when given); errors (a refusal) as they came. The cases in ``no_fit`` have no split that
    fits: the contract wants a ValueError there, and any split returned is a problem."""
    problems = []
    for each in ranks_of(run):
        if within is not None and each.index not in within:
            continue
        case, answer = each.case, each.outcome
        if case in no_fit and not answer.refusal:
            problems += no_fit_problems(case, answer)
            continue
        if answer.raised:
            problems.append(answer.refusal or f"{case.describe()}: {NAME} raised {answer.raised}")
            continue
        problems += structure_problems(case, answer.value) or judge(case, answer.value)
    return problems


def no_fit_problems(case: Case, answer) -> list[str]:
    """No split of ``case`` fits its limit: the answer raised ValueError (with a message of its own)."""
    if answer.raised and answer.raised.split(":")[0].rsplit(".", 1)[-1] == "ValueError":
        return []
    got = f"raised {answer.raised}" if answer.raised else f"returned {str(answer.value)[:100]}"
    return [f"{case.describe()}: no split of these layers into {case.stages} stages fits the limit, so "
            f"{NAME} should raise ValueError saying so; it {got}"]


def played_step(case: Case, starts) -> float:
    """The split's GPipe step (ms) as the course's simulator plays it: the definition the contract gives."""
    forward, backward = stage_times(case, starts)
    schedule = sim.pipeline_schedule("gpipe", case.stages, case.microbatches)
    return sim.simulate_pipeline(schedule, forward, backward).makespan


def memory_problems(case: Case, starts) -> list[str]:
    """Every stage holds at most the memory limit (its state, and the activations of the micro-batches it
    holds at once under GPipe)."""
    memory = stage_memory(case, starts)
    worst = max(range(case.stages), key=lambda s: memory[s])
    if memory[worst] <= case.memory_limit * (1 + TOLERANCE):
        return []
    return [f"{case.describe()}: stage {worst} of your split {starts} needs {memory[worst]:.2f} GB, over the "
            f"{case.memory_limit:g} GB limit; your stages:\n{_indent(stage_table(case, starts))}"]


def step_problems(case: Case, starts, best: float) -> list[str]:
    """The split's GPipe step is no longer than ``best``, the shortest step of any split that fits."""
    step = played_step(case, starts)
    if step <= best * (1 + TOLERANCE):
        return []
    return [f"{case.describe()}: your split {starts} makes a GPipe step of {step:.2f} ms; the best split "
            f"that fits takes {best:.2f} ms; your stages:\n{_indent(stage_table(case, starts))}"]


def fitting_step_problems(case: Case, starts, best: float) -> list[str]:
    """The split fits the memory limit, and its step is the shortest of any split that fits."""
    return memory_problems(case, starts) or step_problems(case, starts, best)


@judging
def real_run_problems(run: RankRun, case: Case) -> list[str]:
    """The split every rank computed, run for real: the ranks agree, each ran its own layers in the naive
    order, and the stages whose modelled work differs clearly are measured busy in that order."""
    records = run.records
    splits = {tuple(r.starts) if isinstance(r.starts, list) else r.starts for r in records}
    if len(splits) != 1:
        return [f"{case.describe()}: the ranks computed different splits ({sorted(map(str, splits))}): every "
                f"rank calls {NAME} itself, so the same arguments must give the same split"]
    starts = list(records[0].starts)
    problems = structure_problems(case, starts)
    if problems:
        return problems
    forward, backward = stage_times(case, starts)
    modelled = [f + b for f, b in zip(forward, backward, strict=True)]
    measured = [statistics.median(r.busy) for r in records]
    window = statistics.median(max(r.ends[i] for r in records) - min(r.begins[i] for r in records)
                               for i in range(len(records[0].busy)))
    for s in range(1, case.stages):   # the naive order: forwards 0, 1, ..., backwards ..., 1, 0
        for i, (ahead, behind) in enumerate(zip(records[s - 1].spans, records[s].spans, strict=True)):
            if behind[0] < ahead[1] or ahead[2] < behind[3]:
                return [f"{case.describe()}: in step {i}, stage {s} computed before stage {s - 1} handed it "
                        f"its input (or its gradient): the recorded spans are not a naive model-parallel "
                        f"step"]
    table = "\n".join(
        f"stage {s}: modelled busy {modelled[s]:6.2f} ms of work, "
        f"idle {1 - modelled[s] / sum(modelled):4.0%}; measured busy {measured[s] * 1e3:7.1f} ms, "
        f"idle {max(0.0, 1 - measured[s] / window):4.0%}"
        for s in range(case.stages))
    for a in range(case.stages):
        for b in range(case.stages):
            if modelled[a] >= CLEAR_GAP * modelled[b] and measured[a] <= measured[b]:
                return [f"{case.describe()}: your split {starts} run for real: stage {a} has "
                        f"{modelled[a] / modelled[b]:.1f}x stage {b}'s work, yet was measured no busier:\n"
                        f"{_indent(table)}"]
    return []


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())
