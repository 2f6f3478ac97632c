"""Visible checks of chapter 11's DeepSeek-V3 MoE part, ``deepseek_moe_forward``, and what it may not use.

Each check runs the student's layer on 1, 2 and 4 real gloo ranks (uneven tokens per rank; 4 ranks as 2
nodes of 2 and as 4 nodes of 1; k = 1, 2 and 4; a random bias and a bias that sends every token to one
expert) and compares every rank with the one-process layer (judge.py); the node-limit check reads the rows
each routed expert ran on, the traffic check the bytes each all-to-all sent to each node.
"""

from __future__ import annotations

from course_lib.grading.attempt.judge_runner import runs_until_failure
from course_lib.grading.attempt.rank_attempt import RankRun, fail_with
from course_lib.grading.attempt.refusals import Refusal
from course_lib.grading.attempt.student_function import as_student_function
from course_lib.grading.checks.ch11_deepseek_moe.judge import (
    gradient_problems,
    node_limit_problems,
    traffic_problems,
    value_problems,
)
from course_lib.grading.checks.ch11_deepseek_moe.ranks import DeepSeekCase, run_cases
from course_lib.grading.checks.ch11_expert_parallel.visible import REFUSAL as DISPATCH_REFUSAL

REFUSAL = Refusal(
    "your DeepSeek-V3 MoE layer",
    modules=DISPATCH_REFUSAL.modules,
    functions=DISPATCH_REFUSAL.functions,
    why=("the exercise is to write the node-limited dispatch and combine yourself, with "
         "dist.all_to_all_single and an autograd function whose backward reverses them"))

VISIBLE_WORLD_SIZES = (1, 2, 4)
TRAFFIC_WORLD_SIZES = (2, 4)
VISIBLE_SEED = 2412
VISIBLE_TIMEOUT_S = 20
TOKENS = (5, 3, 6, 4)        # uneven: the first ranks' tokens
NAME = "deepseek_moe_forward"


def visible_cases(world_size: int) -> list[DeepSeekCase]:
    """One node per rank and one node a token (4 ranks: 2 nodes of 2, and 4 nodes of 1 with 2 nodes a token
    and k = 4); k = 2 with a random bias, k = 1 and 2 with a bias that sends every token to one expert."""
    tokens = TOKENS[:world_size]
    if world_size < 4:
        return [DeepSeekCase(tokens, 3, 2, dtype="float64"),
                DeepSeekCase(tokens, 3, 1, routing="bias_takes_all"),
                DeepSeekCase(tokens, 3, 2, routing="bias_takes_all", dtype="float64")]
    return [DeepSeekCase(tokens, 2, 2, ranks_per_node=2, dtype="float64"),
            DeepSeekCase(tokens, 2, 4, max_nodes=2),
            DeepSeekCase(tokens, 2, 2, ranks_per_node=2, routing="bias_takes_all", dtype="float64")]


def student_of(candidate):
    """The student's function with this part's refusal (what it may not run) attached."""
    return as_student_function(candidate, NAME, refusal=REFUSAL)


def runs(candidate, world_sizes=VISIBLE_WORLD_SIZES, backward: bool = False, seed: int = VISIBLE_SEED,
         timeout: float = VISIBLE_TIMEOUT_S) -> list[RankRun]:
    """One run per world size of the visible cases; stops at the first that raises or hangs."""
    student = student_of(candidate)
    return runs_until_failure(
        lambda world_size: run_cases(student, visible_cases(world_size), seed, timeout, backward),
        world_sizes)


def check_deepseek_moe_values(deepseek_moe_forward) -> None:
    """Visible test: every rank's output equals its tokens' rows of the one-process layer."""
    fail_with([p for run in runs(deepseek_moe_forward) for p in value_problems(run)],
              "deepseek_moe_forward's output differs from the one-process layer")
    print(f"deepseek_moe_forward: every rank's output equals the one-process layer on {VISIBLE_WORLD_SIZES} "
          "ranks (the best nodes, sigmoid gates over the top k, the bias only choosing, the shared expert)")


def check_deepseek_moe_gradients(deepseek_moe_forward) -> None:
    """Visible test: the gradients of the tokens, the router logits, the routed and the shared experts."""
    fail_with([p for run in runs(deepseek_moe_forward, backward=True) for p in gradient_problems(run)],
              "deepseek_moe_forward's gradients differ from the one-process layer's")
    print("deepseek_moe_forward: the gradients of the tokens, the router logits, every routed expert and the "
          f"shared expert equal the one-process layer's on {VISIBLE_WORLD_SIZES} ranks")


def check_deepseek_moe_node_limit(deepseek_moe_forward) -> None:
    """Visible test: the rows each routed expert ran on; no token's experts on more than max_nodes nodes."""
    fail_with([p for run in runs(deepseek_moe_forward) for p in node_limit_problems(run)],
              "deepseek_moe_forward sends tokens to more nodes than the limit")
    print(f"deepseek_moe_forward: no token reached the experts of more than max_nodes nodes on "
          f"{VISIBLE_WORLD_SIZES} ranks")


def check_deepseek_moe_traffic(deepseek_moe_forward) -> None:
    """Visible test: only all_to_all_single; between nodes one row per (token, node) each way."""
    fail_with([p for run in runs(deepseek_moe_forward, TRAFFIC_WORLD_SIZES, backward=True)
               for p in traffic_problems(run)],
              "deepseek_moe_forward does not cross nodes once per (token, node)")
    print("deepseek_moe_forward: between nodes, forward and backward move one row per (token, node) each "
          f"way and the bookkeeping allowed, on {TRAFFIC_WORLD_SIZES} ranks")
