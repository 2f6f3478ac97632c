"""Hidden checks of chapter 04's exercise (instructor-only): the stage split, graded on its step against
the best split's, on memory, on what it does when nothing fits, on large models, and on a real run.

The student's split_stages is asked for fixed cases and for cases drawn at grading time from a seed taken
from os.urandom, in one child process per size under the exercise's refusal (all of course_lib). Small
cases: 2 to 5 stages, 4 to 12 blocks between an embedding and an output layer, 1 to 12 micro-batches.
Large: 38 to 78 blocks on 8 to 16 stages, where trying every split never ends (the child is stopped at
LARGE_TIMEOUT_S and only the large part fails). Layers' backward/forward ratios differ (the embedding 1,
a block 2, a recomputed block 3), so that balancing each stage's forward + backward, or the forwards
alone, is not the best step: the fixed cases are ones where every such split loses. The best step is
worked out here (_ch04_best_split: exact, fast, tested against every split), never in course_lib. A
binding limit is drawn between the least memory any split needs and one that leaves the fastest split
out. The real run plays the student's split as naive model-parallel steps on 3 or 4 gloo ranks. Every
failure names the seed.

Test cells of solutions/04_model_parallel/04_model_parallel.ipynb, their points, and their hidden part:

  grade_id                           points  hidden check
  test_split_stages_balance             3    check_split_stages_balance_hidden(split_stages)
  test_split_stages_memory              2    check_split_stages_memory_hidden(split_stages)
  test_split_stages_fitting_step        2    check_split_stages_fitting_step_hidden(split_stages)
  test_split_stages_large               2    check_split_stages_large_hidden(split_stages)
  test_split_stages_real_run            2    check_split_stages_real_run_hidden(split_stages)
                                       --
                                       11

The expected points of known-wrong submissions: autograde_tests/fixtures/stage_split/expected_scores.json.
"""

from __future__ import annotations

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
)
from course_lib.grading.checks.ch04_stage_split.model import NAME, Case, transformer_case
from course_lib.grading.checks.ch04_stage_split.ranks import run_split
from course_lib.grading.checks.ch04_stage_split.visible import PLENTY_GB, REFUSAL

from ._ch04_best_split import best_step, least_memory
from ._seeds import fresh_seed

POINTS = {"test_split_stages_balance": 3, "test_split_stages_memory": 2, "test_split_stages_fitting_step": 2,
          "test_split_stages_large": 2, "test_split_stages_real_run": 2}
TIMEOUT_S = 20           # every small case's answer, in one child
LARGE_TIMEOUT_S = 40     # every large case's, in another: the reference takes ~0.5 s a case on one core
REAL_RUN_TIMEOUT_S = 30
DRAWN = 6                # small cases drawn from the seed, per kind
DRAWN_LARGE = 2
_CACHE: dict = {}        # the answers of the last function graded, for its checks

# Fixed cases, each one where every split that balances F + B, and every one that balances the forwards
# alone (under the limit), makes a longer step than the best (tests/chapters checks it split by split).
FIXED_BALANCE = (
    transformer_case(11, 4, 12, PLENTY_GB, head=3.15, recomputed=(0, 4, 5, 7), name="11 blocks on 4 stages",
                     block_times=(0.98, 1.0, 1.12, 0.91, 0.86, 1.02, 0.89, 1.18, 1.11, 1.22, 1.12)),
    transformer_case(12, 5, 9, PLENTY_GB, head=2.45, recomputed=(3, 4, 5, 7, 9, 11),
                     block_times=(0.81, 1.02, 0.81, 0.94, 1.21, 0.96, 0.99, 1.22, 1.12, 0.85, 1.24, 1.1),
                     name="12 blocks on 5 stages"),
    transformer_case(10, 4, 9, PLENTY_GB, head=2.06, recomputed=(3, 4, 5, 6, 7, 9),
                     name="10 blocks on 4 stages",
                     block_times=(0.88, 0.84, 1.0, 0.87, 0.8, 1.2, 0.86, 1.05, 0.89, 1.19)),
    transformer_case(12, 5, 2, PLENTY_GB, head=2.74, recomputed=(0, 2, 4, 6, 7),
                     block_times=(0.93, 0.9, 0.92, 0.99, 1.05, 0.87, 0.86, 1.06, 1.21, 1.0, 1.23, 1.07),
                     name="12 blocks on 5 stages, 2 micro-batches"),
    transformer_case(5, 2, 1, PLENTY_GB, recomputed=(1,), name="one micro-batch: every split ties"),
)
FIXED_MEMORY = (
    transformer_case(11, 5, 4, 22.66, head=2.92, recomputed=(2, 4, 5),
                     name="11 blocks on 5 stages, 22.66 GB",
                     block_times=(0.81, 1.13, 1.25, 0.96, 1.12, 0.93, 0.89, 1.01, 1.0, 0.97, 0.92)),
    transformer_case(10, 5, 11, 31.02, head=2.64, recomputed=(3, 5, 6),
                     name="10 blocks on 5 stages, 31.02 GB",
                     block_times=(1.02, 1.01, 1.05, 1.25, 1.0, 1.03, 0.93, 1.17, 1.24, 1.02)),
    transformer_case(9, 4, 10, 30.29, head=2.89, recomputed=(5, 6, 7), name="9 blocks on 4 stages, 30.29 GB",
                     block_times=(0.89, 1.15, 0.86, 1.0, 0.99, 1.14, 1.01, 1.12, 0.91)),
    transformer_case(8, 4, 11, 29.08, head=2.39, recomputed=(2, 3), name="8 blocks on 4 stages, 29.08 GB",
                     block_times=(0.81, 1.23, 0.82, 0.82, 1.07, 0.86, 1.1, 0.91)),
)
# No split fits: the output layer alone (8.4 GB and 1 GB of logits a micro-batch) is over the limit, the
# layers together need more than every stage's limit, or there are fewer layers than stages. The contract
# wants a ValueError.
NO_FIT = (
    transformer_case(6, 3, 8, 16.0, name="6 blocks on 3 stages, 16 GB: no split fits"),
    transformer_case(10, 3, 8, 30.0, name="10 blocks on 3 stages, 30 GB: no split fits"),
    transformer_case(2, 5, 2, PLENTY_GB, name="4 layers on 5 stages"),
)


def drawn_case(rng: random.Random, binding: bool, name: str, large: bool = False) -> Case:
    """A case drawn from ``rng`` (about 40 % of its blocks recomputed); ``binding``: its memory limit leaves
    out every fastest split (the best step that fits is longer than the best step)."""
    stages = rng.randint(8, 16) if large else rng.randint(2, 5)
    blocks = rng.randint(max(38, 3 * stages), 78) if large else rng.randint(2 * stages, 12)
    microbatches = rng.choice((rng.randint(2, 12), rng.randint(2, 12), 1 if not binding else 4))
    case = transformer_case(blocks, stages, microbatches, PLENTY_GB, head=round(rng.uniform(1.5, 3.5), 2),
                            block_times=[round(rng.uniform(0.8, 1.25), 2) for _ in range(blocks)],
                            recomputed=[i for i in range(blocks) if rng.random() < 0.4], name=name)
    if not binding:
        return case
    least, fastest = least_memory(case), best_step(case)
    for _ in range(20):
        # Stage memories are whole thousandths of a GB, always even ones: a limit ending in 5 thousandths is
        # never met exactly, so no split sits on the limit where float rounding would decide it.
        limit = round(round(rng.uniform(least + 0.01, least + 4.0), 2) + 0.005, 3)
        limited = replace(case, memory_limit=limit)
        if best_step(limited) is not None and best_step(limited) > fastest * (1 + 1e-9):
            return replace(limited, name=f"{name}, {limited.memory_limit:g} GB")
    return drawn_case(rng, binding, name, large)   # memory cannot bind here: draw again


# Large models drawn from fixed seeds, one with memory to spare and one under a binding limit, each one where
# balancing F + B and balancing the forwards both lose (tests/chapters checks it).
FIXED_LARGE = (drawn_case(random.Random(1), False, "large case 1", large=True),
               drawn_case(random.Random(11), True, "large case 2", large=True))


def _answers(student):
    key = student.identity()
    if _CACHE.get("key") != key:
        seed = fresh_seed()
        rng = random.Random(seed)
        balance = [*FIXED_BALANCE, *(drawn_case(rng, False, f"drawn case {i}") for i in range(DRAWN))]
        memory = [*FIXED_MEMORY, *(drawn_case(rng, True, f"drawn case {DRAWN + i}") for i in range(DRAWN)),
                  *NO_FIT]     # last: the fitting step's part leaves them to the memory part
        large = [*FIXED_LARGE, *(drawn_case(rng, i % 2 == 0, f"drawn large case {i}", large=True)
                                 for i in range(DRAWN_LARGE))]
        real = replace(drawn_case(rng, False, "drawn real run"), stages=rng.choice((3, 4)))
        _CACHE.clear()
        _CACHE.update(key=key, seed=seed, real=real, student=student,   # student: keeps the ids in key alive
                      small=(balance, memory, ask(student, balance + memory, TIMEOUT_S)),
                      large=(large, ask(student, large, LARGE_TIMEOUT_S)))
    return _CACHE


def _check(split_stages, kind: str, judge, what: str) -> None:
    run = _answers(as_student_function(split_stages, NAME, refusal=REFUSAL))
    if kind == "large":
        cases, answers = run["large"]
        within = range(len(cases))
    else:
        balance, memory, answers = run["small"]
        first, cases = (0, balance) if kind == "balance" else (len(balance), memory)
        last = first + len(cases) - (len(NO_FIT) if kind == "fitting_step" else 0)
        within = range(first, last)
    problems = case_problems(answers, judge, within=within, no_fit=NO_FIT)
    fail_with([f"{p}\n  (hidden test seed {run['seed']})" for p in problems], what, limit=2)


def _fitting_step(case: Case, starts) -> list[str]:
    return fitting_step_problems(case, starts, best_step(case))


def check_split_stages_balance_hidden(split_stages) -> None:
    """Memory to spare: the split's GPipe step is the shortest of any split's (any of several such)."""
    _check(split_stages, "balance", _fitting_step,
           "split_stages does not give the shortest step on hidden cases")


def check_split_stages_memory_hidden(split_stages) -> None:
    """A memory limit that leaves out every fastest split: every stage fits it; where no split fits, a
    ValueError."""
    _check(split_stages, "memory", memory_problems,
           "a stage of split_stages's split does not fit on hidden cases (or no split fits and it did not "
           "raise ValueError)")


def check_split_stages_fitting_step_hidden(split_stages) -> None:
    """The same cases (but those where nothing fits): the split fits, and its step is the shortest of any
    split that fits."""
    _check(split_stages, "fitting_step", _fitting_step,
           "split_stages does not give the shortest step that fits on hidden cases")


def check_split_stages_large_hidden(split_stages) -> None:
    """38 to 78 blocks on 8 to 16 stages under a binding limit, all within LARGE_TIMEOUT_S: the split fits
    and its step is the shortest of any split that fits."""
    _check(split_stages, "large", _fitting_step,
           "split_stages does not give the shortest step that fits on large hidden models (in time)")


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
    "test_split_stages_large": (check_split_stages_large_hidden, ANSWERS),
    "test_split_stages_real_run": (check_split_stages_real_run_hidden, ANSWERS),
}
