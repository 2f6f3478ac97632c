"""Visible checks of chapter 04's exercise, the stage split: what the notebook imports below the answer.

``split_stages(forward, backward, state, activation, stages, microbatches, memory_limit)`` returns the
index of each stage's first layer, or raises ValueError when no split fits. Its answers are asked for in
a child process under the exercise's refusal: all of course_lib, which holds the simulator's own splits
(split_layers, Llama 3's ends_lighter) and these checks. PyTorch has no split of its own to refuse
(torch.distributed.pipelining takes its split points from you). Each check names the property that
failed (the step, memory, the step that fits, a large model in time, the real run). The best step of
each visible case is stored here as a number, worked out by the instructor's checks
(tests/chapters/test_ch04_stage_split_checks.py holds them equal); nothing in course_lib searches for it.
"""

from __future__ import annotations

from dataclasses import replace

from course_lib.grading.attempt.rank_attempt import fail_with
from course_lib.grading.attempt.refusals import Refusal
from course_lib.grading.attempt.student_function import as_student_function

from .judge import (
    ask,
    case_problems,
    fitting_step_problems,
    memory_problems,
    real_run_problems,
)
from .model import (
    NAME,
    Case,
    stage_memory,
    stage_ranges,
    stage_table,
    stage_times,
    transformer_case,
)
from .ranks import run_split

__all__ = ["NAME", "REFUSAL", "VISIBLE_CASES", "Case", "check_split_stages_balance",
           "check_split_stages_fitting_step", "check_split_stages_large", "check_split_stages_memory",
           "check_split_stages_real_run", "stage_memory", "stage_ranges", "stage_table", "stage_times",
           "transformer_case"]

REFUSAL = Refusal(NAME, why="the exercise is to work out where the stages begin yourself")
VISIBLE_TIMEOUT_S = 20
LARGE_TIMEOUT_S = 40     # the hidden large cases' limit too: a search that tries every split never ends
REAL_RUN_TIMEOUT_S = 30
PLENTY_GB = 1000.0       # a memory limit no split reaches: only the time counts


def _large_model() -> Case:
    """60 blocks on 12 stages, the first half recomputed, costs varying along the model."""
    times = [round(1.0 + 0.2 * ((7 * i) % 11 - 5) / 5, 2) for i in range(60)]
    return transformer_case(60, 12, 8, 45.0, head=2.4, block_times=times, recomputed=range(30),
                            name="60 blocks on 12 stages, 45 GB")


# Blocks of different cost (their attention differs, say), some recomputed (their backward reruns the
# forward), so that one split is best and balancing forward + backward, or forwards alone, is not it.
VISIBLE_CASES = {
    "balance": transformer_case(8, 4, 8, PLENTY_GB, recomputed=(3, 5), name="8 blocks on 4 stages",
                                block_times=(0.81, 1.17, 1.23, 1.07, 0.86, 0.91, 1.21, 1.22)),
    "balance, other costs": transformer_case(8, 4, 8, PLENTY_GB, recomputed=(1, 2, 4),
                                             block_times=(1.05, 1.21, 0.96, 0.86, 1.01, 1.11, 1.07, 1.1),
                                             name="8 other blocks on 4 stages"),
    "memory": transformer_case(10, 4, 8, 26.3, recomputed=(1, 2), name="10 blocks on 4 stages, 26.3 GB",
                               block_times=(1.1, 1.22, 1.04, 0.98, 0.92, 0.87, 0.83, 1.12, 0.97, 1.07)),
    "memory, other costs": transformer_case(10, 4, 8, 26.8, recomputed=(0, 1, 8, 9),
                                            block_times=(1.23, 1.15, 0.88, 1.24, 0.99, 0.9, 0.92, 0.98, 1.0,
                                                         1.06), name="10 other blocks on 4 stages, 26.8 GB"),
    "no fit": transformer_case(6, 3, 8, 16.0, name="6 blocks on 3 stages, 16 GB (no split fits)"),
    "large": _large_model(),
}
# The shortest step of any split that fits, per visible case (ms): the instructor's search.
VISIBLE_BEST_MS = {"balance": 110.74, "balance, other costs": 111.82, "memory": 127.21,
                   "memory, other costs": 129.59, "large": 364.29}
NO_FIT = (VISIBLE_CASES["no fit"],)


def _visible(split_stages, names, judge, what: str, timeout: float = VISIBLE_TIMEOUT_S) -> None:
    student = as_student_function(split_stages, NAME, refusal=REFUSAL)
    cases = [VISIBLE_CASES[n] for n in names]
    run = ask(student, cases, timeout)
    judges = {c: n for c, n in zip(cases, names, strict=True)}
    fail_with(case_problems(run, lambda case, starts: judge(judges[case], case, starts), no_fit=NO_FIT),
              what, limit=2)


def _fitting_step(name: str, case: Case, starts) -> list[str]:
    return fitting_step_problems(case, starts, VISIBLE_BEST_MS[name])


def check_split_stages_balance(split_stages) -> None:
    """Visible test: with memory to spare, your split's step is the shortest of any split."""
    names = ("balance", "balance, other costs")
    _visible(split_stages, names, _fitting_step, "split_stages does not give the shortest step")
    print(f"{NAME}: the shortest GPipe step on {_named(names)}")


def check_split_stages_memory(split_stages) -> None:
    """Visible test: every stage of your split fits the memory limit; where no split fits, ValueError."""
    names = ("memory", "memory, other costs", "no fit")
    _visible(split_stages, names, lambda name, case, starts: memory_problems(case, starts),
             "a stage of split_stages's split does not fit (or none fits and it did not raise ValueError)")
    print(f"{NAME}: every stage fits on {_named(names[:2])}, and ValueError where nothing fits")


def check_split_stages_fitting_step(split_stages) -> None:
    """Visible test: under a memory limit that binds, the shortest step of any split that fits."""
    names = ("memory", "memory, other costs")
    _visible(split_stages, names, _fitting_step, "split_stages does not give the shortest step that fits")
    print(f"{NAME}: the shortest step of any split that fits, on {_named(names)}")


def check_split_stages_large(split_stages) -> None:
    """Visible test: a large model (60 blocks on 12 stages): the shortest step that fits, within the time
    limit."""
    _visible(split_stages, ("large",), _fitting_step,
             "split_stages does not give the shortest step that fits on a large model (in time)",
             timeout=LARGE_TIMEOUT_S)
    print(f"{NAME}: the shortest step that fits on {_named(('large',))}, within {LARGE_TIMEOUT_S} s")


def check_split_stages_real_run(split_stages, case: Case | None = None) -> None:
    """Visible test: your split run for real on 4 gloo ranks, one batch at a time: each stage's measured
    busy time follows the modelled one."""
    case = case or replace(VISIBLE_CASES["balance"], name="8 blocks on 4 ranks")
    run = run_split(as_student_function(split_stages, NAME, refusal=REFUSAL), case, REAL_RUN_TIMEOUT_S)
    fail_with(real_run_problems(run, case),
              "split_stages's split, run for real, does not behave as the model says", limit=2)
    print(f"{NAME}: your split ran on {case.stages} gloo ranks; each stage's measured busy time follows "
          f"the model's")


def _named(names) -> str:
    return ", ".join(VISIBLE_CASES[n].name for n in names)
