"""Hidden checks of chapter 04's exercise (instructor-only): the stage split, graded on its step against
the best split's, on memory, and on a real run.

The student's split_stages is asked for fixed cases and for cases drawn at grading time from a seed taken
from os.urandom (2 to 5 stages, 4 to 12 blocks between an embedding and an output layer, 1 to 12
micro-batches, block and output-layer costs drawn); it runs in a child process under the exercise's
refusal (all of course_lib, which holds the simulator's own splits). The best step is worked out here, by
trying every split (at most a few thousand), never in course_lib. A case's memory limit is drawn between
the least memory any split needs and the least any fastest split needs, so that it binds. The real run
plays the student's split as naive model-parallel steps on 3 or 4 gloo ranks. Every failure names the seed.

Test cells of solutions/04_model_parallel/04_model_parallel.ipynb, their points, and their hidden part:

  grade_id                           points  hidden check
  test_split_stages_balance             3    check_split_stages_balance_hidden(split_stages)
  test_split_stages_memory              2    check_split_stages_memory_hidden(split_stages)
  test_split_stages_fitting_step        2    check_split_stages_fitting_step_hidden(split_stages)
  test_split_stages_real_run            2    check_split_stages_real_run_hidden(split_stages)
                                       --
                                        9

The expected points of known-wrong submissions: autograde_tests/fixtures/stage_split/expected_scores.json.
"""

from __future__ import annotations

import functools
import itertools
import random
from dataclasses import replace

from course_lib.grading.attempt.exercise import Exercise
from course_lib.grading.attempt.rank_attempt import fail_with
from course_lib.grading.attempt.student_function import as_student_function
from course_lib.grading.checks.ch04_stage_split.judge import (
    ask,
    case_problems,
    fitting_step_problems,
    memory_problems,
    real_run_problems,
    step_problems,
)
from course_lib.grading.checks.ch04_stage_split.model import (
    NAME,
    Case,
    stage_memory,
    step_time,
    transformer_case,
)
from course_lib.grading.checks.ch04_stage_split.ranks import run_split
from course_lib.grading.checks.ch04_stage_split.visible import PLENTY_GB, REFUSAL

from ._seeds import fresh_seed

POINTS = {"test_split_stages_balance": 3, "test_split_stages_memory": 2, "test_split_stages_fitting_step": 2,
          "test_split_stages_real_run": 2}
TIMEOUT_S = 20           # every case's answer, in one child
REAL_RUN_TIMEOUT_S = 30
DRAWN = 6                # cases drawn from the seed, per kind
_CACHE: dict = {}        # the answers of the last function graded, for its checks


def splits(case: Case):
    """Every split of the case: the first stage starts at 0, the others after any of the layers."""
    for cuts in itertools.combinations(range(1, case.layers), case.stages - 1):
        yield [0, *cuts]


@functools.lru_cache(maxsize=256)
def best_step(case: Case) -> float:
    """The shortest GPipe step of any split whose every stage fits the memory limit."""
    fitting = [step_time(case, s) for s in splits(case) if max(stage_memory(case, s)) <= case.memory_limit]
    return min(fitting)


# Fixed cases. Uneven blocks make one split best; each case is one a plausible mistake gets wrong.
_BLOCKS = (1.1, 0.9, 1.0, 1.2, 0.8, 1.0, 1.15, 0.95, 1.05, 1.0, 0.85, 1.1)
FIXED_BALANCE = (
    transformer_case(9, 4, 8, PLENTY_GB, block_times=_BLOCKS[:9], name="9 blocks on 4 stages"),
    transformer_case(10, 3, 6, PLENTY_GB, head=3.2, block_times=_BLOCKS[:10], name="10 blocks on 3 stages"),
    transformer_case(12, 5, 12, PLENTY_GB, head=1.6, block_times=_BLOCKS, name="12 blocks on 5 stages"),
    transformer_case(5, 2, 1, PLENTY_GB, name="one micro-batch: every split takes as long"),
)
FIXED_MEMORY = (
    transformer_case(10, 4, 8, 30.5, block_times=_BLOCKS[:10], name="10 blocks on 4 stages, 30.5 GB"),
    transformer_case(11, 4, 10, 34.5, head=2.0, block_times=_BLOCKS[:11],
                     name="11 blocks on 4 stages, 34.5 GB"),
    transformer_case(8, 3, 4, 27.0, head=3.0, block_times=_BLOCKS[2:10], name="8 blocks on 3 stages, 27 GB"),
)


def drawn_case(rng: random.Random, binding: bool, name: str) -> Case:
    """A case drawn from ``rng``; ``binding``: its memory limit rules out every fastest split."""
    stages = rng.randint(2, 5)
    blocks = rng.randint(2 * stages, 12)
    microbatches = rng.choice((rng.randint(2, 12), rng.randint(2, 12), 1 if not binding else 4))
    case = transformer_case(blocks, stages, microbatches, PLENTY_GB, head=round(rng.uniform(1.5, 3.5), 2),
                            block_times=[round(rng.uniform(0.8, 1.25), 2) for _ in range(blocks)], name=name)
    if not binding:
        return case
    every = list(splits(case))
    least = min(max(stage_memory(case, s)) for s in every)
    fastest = best_step(case)
    least_fastest = min(max(stage_memory(case, s)) for s in every if step_time(case, s) <= fastest)
    if least_fastest - least < 0.05:   # memory cannot bind here: draw again
        return drawn_case(rng, binding, name)
    limit = round(rng.uniform(least + 0.01, least_fastest - 0.01), 2)
    return replace(case, memory_limit=limit, name=f"{name}, {limit:g} GB")


def _answers(student):
    key = student.identity()
    if _CACHE.get("key") != key:
        seed = fresh_seed()
        rng = random.Random(seed)
        balance = [*FIXED_BALANCE, *(drawn_case(rng, False, f"drawn case {i}") for i in range(DRAWN))]
        memory = [*FIXED_MEMORY, *(drawn_case(rng, True, f"drawn case {DRAWN + i}") for i in range(DRAWN))]
        real = replace(drawn_case(rng, False, "drawn real run"), stages=rng.choice((3, 4)))
        answers = ask(student, balance + memory, TIMEOUT_S)
        _CACHE.clear()
        _CACHE.update(key=key, seed=seed, balance=balance, memory=memory, real=real, answers=answers,
                      student=student)   # keeps the ids in key alive
    return _CACHE


def _check(split_stages, kind: str, judge, what: str) -> None:
    run = _answers(as_student_function(split_stages, NAME, refusal=REFUSAL))
    cases = run[kind]
    first = 0 if kind == "balance" else len(run["balance"])
    problems = case_problems(run["answers"], judge, within=range(first, first + len(cases)))
    fail_with([f"{p}\n  (hidden test seed {run['seed']})" for p in problems], what, limit=2)


def check_split_stages_balance_hidden(split_stages) -> None:
    """Memory to spare: the split's GPipe step is the shortest of any split's."""
    _check(split_stages, "balance", lambda case, starts: step_problems(case, starts, best_step(case)),
           "split_stages does not give the shortest step on hidden cases")


def check_split_stages_memory_hidden(split_stages) -> None:
    """A memory limit that rules out every fastest split: every stage fits it."""
    _check(split_stages, "memory", memory_problems,
           "a stage of split_stages's split does not fit on hidden cases")


def check_split_stages_fitting_step_hidden(split_stages) -> None:
    """The same cases: the split fits, and its step is the shortest of any split that fits."""
    _check(split_stages, "memory", lambda case, starts: fitting_step_problems(case, starts, best_step(case)),
           "split_stages does not give the shortest step that fits on hidden cases")


def check_split_stages_real_run_hidden(split_stages) -> None:
    """A drawn case's split run for real on 3 or 4 gloo ranks: the ranks agree on it, run it in the naive
    order, and stages whose modelled work differs clearly are measured busy in that order."""
    student = as_student_function(split_stages, NAME, refusal=REFUSAL)
    run = _answers(student)
    case = run["real"]
    real = run_split(student, case, REAL_RUN_TIMEOUT_S)
    problems = real_run_problems(real, case)
    fail_with([f"{p}\n  (hidden test seed {run['seed']})" for p in problems],
              "split_stages's split, run for real, does not behave as the model says", limit=2)


ANSWERS = (NAME,)
EXERCISE = Exercise("ch04_stage_split", "04_model_parallel", answers=ANSWERS, points=POINTS,
                    fixtures="stage_split", refusals=(REFUSAL,))
# grade_id -> (its hidden check, the answers the check is given): the rows instructor/registry.py collects
ROWS = {
    "test_split_stages_balance": (check_split_stages_balance_hidden, ANSWERS),
    "test_split_stages_memory": (check_split_stages_memory_hidden, ANSWERS),
    "test_split_stages_fitting_step": (check_split_stages_fitting_step_hidden, ANSWERS),
    "test_split_stages_real_run": (check_split_stages_real_run_hidden, ANSWERS),
}
