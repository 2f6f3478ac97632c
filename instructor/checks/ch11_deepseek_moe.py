"""Hidden checks of chapter 11's MoE as DeepSeek-V3 runs it (instructor-only): ``deepseek_moe_forward``.

Test cells of solutions/11_expert_parallel/11_expert_parallel.ipynb, their points, and their hidden checks:

  grade_id                       points  hidden check
  test_deepseek_moe_values          1    check_deepseek_moe_values_hidden(deepseek_moe_forward)
  test_deepseek_moe_gradients       1    check_deepseek_moe_gradients_hidden(deepseek_moe_forward)
  test_deepseek_moe_node_limit      1    check_deepseek_moe_node_limit_hidden(deepseek_moe_forward)
  test_deepseek_moe_traffic         2    check_deepseek_moe_traffic_hidden(deepseek_moe_forward)
                                   --
                                    5

The four checks share one set of runs per submission (one run per world size, forward and backward):
world sizes 3 or 4, then 2, then 1, the nodes (4 ranks: 2 nodes of 2 or 4 of 1; else one rank a node),
the most nodes a token may use M (1 on 2 nodes, 1 or 2 on more; k = 2M, so a node's score sums its 2 best
experts), tokens per rank (2 to 8), routed experts per rank, widths and dtypes drawn at grading time from
a seed taken from os.urandom and named in every failure. Each world size runs a k = 2M case with a random
bias, and k = M and k = 2M cases whose bias sends every token to one expert (a layer that drops at a
capacity loses tokens there). Expected values come from the one-process layer computed in the judging
process (float64), never from the student's code.
- values: every rank's output equals its tokens' rows of s = sigmoid(logits), the top k of s + bias over
  the experts of the token's M nodes with the largest sum of their k/M best s + bias, gates the unbiased
  s over the k, plus the shared expert (DeepSeek-V3, arXiv:2412.19437, section 2.1.2, "Node-Limited
  Routing" and equations (12) to (16)); no token dropped.
- gradients: of the tokens, the router logits, each rank's routed experts and its copy of the shared
  expert (its own tokens' share).
- node limit: the rows each routed expert was called on (a forward pre-hook) are tokens, unchanged, and
  every token reached the experts of at least one node and at most M.
- traffic (2 nodes or more): only all_to_all_single; between nodes, forward and backward each move one
  row per (token, other node its experts ran on) each way, plus at most 8 B per expert of the node with
  each row and 8 B per expert between two ranks (DeepSeek-V3 sends a token once per node over
  InfiniBand and forwards it inside the node over NVLink, section 3.2.2); a row per (token, expert)
  across nodes fails.
Every check fails if the code raises, hangs or runs refused code (course_lib, torch's autograd-aware
all-to-alls, its MoE kernels). The expected points of known-wrong submissions (deepseek_*.py):
autograde_tests/fixtures/expert_parallel/expected_scores.json.
"""

from __future__ import annotations

import random

from course_lib.grading.attempt.exercise import Exercise
from course_lib.grading.attempt.judge_runner import runs_until_failure
from course_lib.grading.attempt.rank_attempt import fail_with
from course_lib.grading.checks.ch11_deepseek_moe.judge import (
    gradient_problems,
    node_limit_problems,
    traffic_problems,
    value_problems,
)
from course_lib.grading.checks.ch11_deepseek_moe.ranks import DeepSeekCase, run_cases
from course_lib.grading.checks.ch11_deepseek_moe.visible import REFUSAL, student_of

from ._seeds import fresh_seed

TIMEOUT_S = 20                      # per run of one world size; a correct layer needs well under 1 s
POINTS = {"test_deepseek_moe_values": 1, "test_deepseek_moe_gradients": 1, "test_deepseek_moe_node_limit": 1,
          "test_deepseek_moe_traffic": 2}
DTYPE_NAMES = ("float32", "float64")
_REPORTS: dict = {}                 # one submission's runs, shared by its three checks (one entry at a time)


def hidden_cases(world_size: int, rng: random.Random) -> list[DeepSeekCase]:
    """Uneven tokens per rank (at least two), 1 to 3 routed experts per rank (at least 3 in all, at least 2
    a node); on 3 or more nodes a token may use 1 or 2 of them, and k = 2M."""
    ranks_per_node = rng.choice((1, 2)) if world_size == 4 else 1
    nodes = world_size // ranks_per_node
    max_nodes = rng.choice((1, 2)) if nodes > 2 else 1
    tokens = tuple(rng.randint(2, 8) for _ in range(world_size))   # 2 or more: some cross nodes
    per_rank = max(rng.randint(1, 3), -(-3 // world_size), -(-2 // ranks_per_node))
    # rows much wider than the bookkeeping allowed with them, so a row per (token, expert) cannot hide in it
    sizes = dict(ranks_per_node=ranks_per_node, max_nodes=max_nodes, hidden=rng.choice((32, 48)),
                 ffn=rng.choice((8, 16)))
    dtype, k = rng.choice(DTYPE_NAMES), 2 * max_nodes
    return [DeepSeekCase(tokens, per_rank, k, dtype="float64", **sizes),
            DeepSeekCase(tokens, per_rank, max_nodes, routing="bias_takes_all", dtype=dtype, **sizes),
            DeepSeekCase(tokens, per_rank, k, routing="bias_takes_all", dtype="float64", **sizes)]


def _runs(deepseek_moe_forward) -> tuple[list, int]:
    """The submission's runs (world sizes 3 or 4, 2, 1; stopped at the first that fails) and their seed."""
    student = student_of(deepseek_moe_forward)
    key = student.identity()
    if key not in _REPORTS:
        seed = fresh_seed(5)
        rng = random.Random(seed)
        world_sizes = (rng.choice((3, 4)), 2, 1)
        runs = runs_until_failure(
            lambda world_size: run_cases(student, hidden_cases(world_size, rng), seed, TIMEOUT_S, True),
            world_sizes)
        _REPORTS.clear()
        _REPORTS[key] = (runs, seed)
    return _REPORTS[key]


def _fail(problems: list[str], seed: int, what: str) -> None:
    fail_with([f"{p}\n  (hidden test seed {seed})" for p in dict.fromkeys(problems)], what)


def check_deepseek_moe_values_hidden(deepseek_moe_forward) -> None:
    """Every rank's output equals the one-process layer's rows for its tokens, on 1 to 4 ranks."""
    runs, seed = _runs(deepseek_moe_forward)
    _fail([p for run in runs for p in value_problems(run)], seed,
          "deepseek_moe_forward's output is wrong on hidden cases")


def check_deepseek_moe_gradients_hidden(deepseek_moe_forward) -> None:
    """Gradients of tokens, router logits, each rank's routed experts and its shared expert's copy."""
    runs, seed = _runs(deepseek_moe_forward)
    _fail([p for run in runs for p in gradient_problems(run)], seed,
          "deepseek_moe_forward's gradients are wrong on hidden cases")


def check_deepseek_moe_node_limit_hidden(deepseek_moe_forward) -> None:
    """The rows each routed expert ran on: no token on the experts of more than M nodes."""
    runs, seed = _runs(deepseek_moe_forward)
    _fail([p for run in runs for p in node_limit_problems(run)], seed,
          "deepseek_moe_forward sends tokens to more nodes than the limit on hidden cases")


def check_deepseek_moe_traffic_hidden(deepseek_moe_forward) -> None:
    """Only all_to_all_single; between nodes one row per (token, node) each way, forward and backward."""
    runs, seed = _runs(deepseek_moe_forward)
    several = [run for run in runs if run.cases[0].world_size > 1]
    _fail([p for run in several for p in traffic_problems(run)], seed,
          "deepseek_moe_forward does not cross nodes once per (token, node) on hidden cases")


EXERCISE = Exercise(
    "ch11_deepseek_moe", "11_expert_parallel", answers=("deepseek_moe_forward",),
    points=POINTS, fixtures="expert_parallel", refusals=(REFUSAL,))
# grade_id -> (its hidden check, the answers the check is given): the rows instructor/registry.py collects
ROWS = {
    "test_deepseek_moe_values": (check_deepseek_moe_values_hidden, ("deepseek_moe_forward",)),
    "test_deepseek_moe_gradients": (check_deepseek_moe_gradients_hidden, ("deepseek_moe_forward",)),
    "test_deepseek_moe_node_limit": (check_deepseek_moe_node_limit_hidden, ("deepseek_moe_forward",)),
    "test_deepseek_moe_traffic": (check_deepseek_moe_traffic_hidden, ("deepseek_moe_forward",)),
}
