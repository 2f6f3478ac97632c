"""Checks of chapter 06's vocabulary-parallel cross-entropy: each rank holds a vocabulary slice of the logits.

What the notebook imports: the exercise's refusal and its visible checks. Ranks run the student's loss on
their slice of logits (ranks.py); judge.py compares with F.cross_entropy on the whole logits and checks that
the bytes sent do not grow with the vocabulary. No vocabulary-parallel loss is implemented here.
"""

from __future__ import annotations

from course_lib.grading.attempt.judge_runner import failures, run_answer, runs_until_failure
from course_lib.grading.attempt.rank_attempt import FailureText, fail_with
from course_lib.grading.attempt.refusals import Refusal
from course_lib.grading.attempt.student_function import as_student_function

# The judge's and the ranks' names the hidden checks and tests also read from here (the notebook's module).
from .judge import gradient_problems, reference, traffic_problems, value_problems  # noqa: F401
from .ranks import NAME, LossCase, SideBySide, _yours_and_loss_parallel, case_tensors, run_losses  # noqa: F401

# DTensor (parallelize_module, loss_parallel) and the functional collectives it runs on place collectives
# for you, and their traffic starts in C++ where the traffic recorder does not see it.
TP_MODULES = ("torch.distributed.tensor", "torch.distributed._functional_collectives")
REFUSAL = Refusal(NAME, modules=TP_MODULES,
                  why="the exercise is to compute the loss from the slices yourself, as loss_parallel does")
VISIBLE_WORLD_SIZES = (2, 3)
VISIBLE_TIMEOUT_S = 20
VISIBLE_SEED = 2024
VISIBLE_CASES = (LossCase(6, 11), LossCase(6, 29), LossCase(5, 13, offset=120.0), LossCase(4, 7, "float64"))


def _visible(candidate, judge, what: str) -> None:
    student = as_student_function(candidate, NAME, refusal=REFUSAL)
    runs = runs_until_failure(
        lambda world_size: run_losses(student, world_size, VISIBLE_CASES, VISIBLE_SEED, VISIBLE_TIMEOUT_S),
        VISIBLE_WORLD_SIZES)
    fail_with([p for run in runs for p in judge(run)], what, limit=3)


def check_vocab_parallel_loss_values(vocab_parallel_cross_entropy) -> None:
    """Visible test: the loss on 2 and 3 ranks equals F.cross_entropy on the whole logits, large ones too."""
    _visible(vocab_parallel_cross_entropy, value_problems,
             f"{NAME} is not the cross-entropy of the whole logits")
    print(f"{NAME}: the loss equals F.cross_entropy on the whole logits on {VISIBLE_WORLD_SIZES} ranks, "
          "vocabularies that do not divide and logits past exp's float32 range")


def check_vocab_parallel_loss_gradients(vocab_parallel_cross_entropy) -> None:
    """Visible test: each rank's gradient is its slice of F.cross_entropy's gradient."""
    _visible(vocab_parallel_cross_entropy, gradient_problems, f"{NAME}'s gradient is not F.cross_entropy's")
    print(f"{NAME}: every rank's gradient is its slice of F.cross_entropy's, on {VISIBLE_WORLD_SIZES} ranks")


def check_vocab_parallel_loss_traffic(vocab_parallel_cross_entropy) -> None:
    """Visible test: all-reduces only, the same bytes for vocabularies 11 and 29 (no logits gathered)."""
    _visible(vocab_parallel_cross_entropy, traffic_problems, f"{NAME} moves more than per-token values")
    print(f"{NAME}: only all-reduces of per-token values, the same bytes for vocabularies "
          f"{VISIBLE_CASES[0].vocab} and {VISIBLE_CASES[1].vocab}")


def compare_with_loss_parallel(vocab_parallel_cross_entropy, world_size: int = 2,
                               case: LossCase = VISIBLE_CASES[0]) -> dict:
    """Your loss and PyTorch's loss_parallel on the same logits split over ``world_size`` ranks:
    {"yours" | "loss_parallel": (rank 0's loss, {collective: calls in forward and backward})}."""
    # Imported once here, not once per forked rank: DTensor's parallel package pulls in torch._dynamo.
    import torch._dynamo  # noqa: F401
    import torch.distributed.tensor.parallel  # noqa: F401

    student = as_student_function(vocab_parallel_cross_entropy, NAME, refusal=REFUSAL)
    run = run_answer(_yours_and_loss_parallel, world_size, student, case, VISIBLE_SEED, record=SideBySide,
                     text=FailureText(f"{NAME} beside loss_parallel"), timeout=60, one_per_rank=True)
    fail_with(failures([run]), f"{NAME} and loss_parallel could not be run side by side")
    rank_0 = run.records[0]
    return {"yours": rank_0.yours, "loss_parallel": rank_0.loss_parallel}
