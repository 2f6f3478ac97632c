"""Visible checks of chapter 04's exercise, the stage split: what the notebook imports below the answer.

``split_stages(forward, backward, state, activation, stages, microbatches, memory_limit)`` returns the
index of each stage's first layer. Its answers are asked for in a child process under the exercise's
refusal: all of course_lib, which holds the simulator's own splits (split_layers, Llama 3's ends_lighter).
PyTorch has no split of its own to refuse (torch.distributed.pipelining takes its split points from you).
The best step of each visible case is stored here as a number, worked out by the instructor's checks
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
    step_problems,
)
from .model import (
    NAME,
    Case,
    stage_memory,
    stage_ranges,
    stage_table,
    stage_times,
    step_time,
    transformer_case,
)
from .ranks import run_split

__all__ = ["NAME", "REFUSAL", "VISIBLE_CASES", "Case", "check_split_stages_balance",
           "check_split_stages_fitting_step", "check_split_stages_memory", "check_split_stages_real_run",
           "stage_memory", "stage_ranges", "stage_table", "stage_times", "step_time", "transformer_case"]

REFUSAL = Refusal(NAME, why="the exercise is to work out where the stages begin yourself")
VISIBLE_TIMEOUT_S = 20
REAL_RUN_TIMEOUT_S = 30
PLENTY_GB = 1000.0       # a memory limit no split reaches: only the time counts

# Blocks of slightly different cost (their attention differs, say), so that one split is best.
_BLOCKS = (1.0, 1.1, 0.9, 1.2, 1.0, 0.8, 1.1, 1.0, 0.9, 1.2)
VISIBLE_CASES = {
    "balance": transformer_case(8, 4, 8, PLENTY_GB, block_times=_BLOCKS[:8], name="8 blocks on 4 stages"),
    "balance, 2 stages": transformer_case(6, 2, 4, PLENTY_GB, head=3.0, block_times=_BLOCKS[2:8],
                                          name="6 blocks on 2 stages"),
    "memory": transformer_case(10, 4, 8, 30.8, block_times=_BLOCKS, name="10 blocks on 4 stages, 30.8 GB"),
    "memory, 3 stages": transformer_case(7, 3, 4, 23.5, head=2.0, block_times=_BLOCKS[:7],
                                         name="7 blocks on 3 stages, 23.5 GB"),
}
# The shortest step of any split that fits, per visible case (ms): the instructor's exhaustive search.
VISIBLE_BEST_MS = {"balance": 95.3, "balance, 2 stages": 72.4, "memory": 117.7, "memory, 3 stages": 62.5}


def _visible(split_stages, names, judge, what: str) -> None:
    student = as_student_function(split_stages, NAME, refusal=REFUSAL)
    cases = [VISIBLE_CASES[n] for n in names]
    run = ask(student, cases, VISIBLE_TIMEOUT_S)
    judges = {c: n for c, n in zip(cases, names, strict=True)}
    fail_with(case_problems(run, lambda case, starts: judge(judges[case], case, starts)), what, limit=2)


def check_split_stages_balance(split_stages) -> None:
    """Visible test: with memory to spare, your split's step is the shortest of any split."""
    _visible(split_stages, ("balance", "balance, 2 stages"),
             lambda name, case, starts: step_problems(case, starts, VISIBLE_BEST_MS[name]),
             "split_stages does not give the shortest step")
    print(f"{NAME}: the shortest GPipe step on {', '.join(c.name for c in _cases('balance'))}")


def check_split_stages_memory(split_stages) -> None:
    """Visible test: every stage of your split fits the memory limit."""
    _visible(split_stages, ("memory", "memory, 3 stages"), lambda name, case, starts: memory_problems(
        case, starts), "a stage of split_stages's split does not fit")
    print(f"{NAME}: every stage fits on {', '.join(c.name for c in _cases('memory'))}")


def check_split_stages_fitting_step(split_stages) -> None:
    """Visible test: under a memory limit that binds, the shortest step of any split that fits."""
    _visible(split_stages, ("memory", "memory, 3 stages"),
             lambda name, case, starts: fitting_step_problems(case, starts, VISIBLE_BEST_MS[name]),
             "split_stages does not give the shortest step that fits")
    print(f"{NAME}: the shortest step of any split that fits, on "
          f"{', '.join(c.name for c in _cases('memory'))}")


def check_split_stages_real_run(split_stages, case: Case | None = None) -> None:
    """Visible test: your split run for real on 4 gloo ranks, one batch at a time: each stage's measured
    busy time follows the modelled one."""
    case = case or replace(VISIBLE_CASES["balance"], name="8 blocks on 4 ranks")
    run = run_split(as_student_function(split_stages, NAME, refusal=REFUSAL), case, REAL_RUN_TIMEOUT_S)
    fail_with(real_run_problems(run, case),
              "split_stages's split, run for real, does not behave as the model says", limit=2)
    print(f"{NAME}: your split ran on {case.stages} gloo ranks; each stage's measured busy time follows "
          f"the model's")


def _cases(prefix: str) -> list[Case]:
    return [c for n, c in VISIBLE_CASES.items() if n.startswith(prefix)]
