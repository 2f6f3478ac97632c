"""Chapter 11's DeepSeek-V3 part (ch11_deepseek_moe) on the reference and on each known-wrong answer (no
nbgrader).

Every fixture in autograde_tests/fixtures/expert_parallel/ must earn, in the DeepSeek-V3 part's cells,
exactly the points expected_scores.json gives it; the part's own fixtures (deepseek_*, which answer only
AllToAll and deepseek_moe_forward) in the dispatch's cells too. A failing cell's feedback names what went
wrong. The part's reference (examples/one_process_moe.py's gates, the judge's node-limited choice) is
checked against DeepSeek-V3's equations and its node-limited routing here.
"""

import json
from pathlib import Path

import nbformat
import pytest
import torch

from course_lib.examples.one_process_moe import biased_top_k, sigmoid_gate_matrix
from course_lib.grading import instructor_checks
from course_lib.grading.attempt.refusals import LESSON_IMPORTS
from course_lib.grading.attempt.student_function import StudentFunction
from course_lib.grading.autograder.fixtures import solution_sources
from course_lib.grading.checks.ch11_deepseek_moe.judge import node_limited_top_k
from course_lib.notebook_cells import lesson_imports

dispatch = instructor_checks("ch11_expert_parallel")
deepseek = instructor_checks("ch11_deepseek_moe")

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "autograde_tests" / "fixtures" / "expert_parallel"
EXPECTED = json.loads((FIXTURES / "expected_scores.json").read_text())
SOLUTION = ROOT / "solutions" / "11_expert_parallel" / "11_expert_parallel.ipynb"
RELEASE = ROOT / "notebooks" / "11_expert_parallel" / "11_expert_parallel.ipynb"
PRELUDE = lesson_imports(nbformat.read(str(RELEASE), as_version=4))
exec(compile(PRELUDE, LESSON_IMPORTS, "exec"), {"__name__": "lesson_imports"})

NEW_CELLS = {grade_id: (names[0], check) for grade_id, (check, names) in deepseek.ROWS.items()}
OLD_CELLS = {grade_id: (names[0], check) for grade_id, (check, names) in dispatch.ROWS.items()}
OWN = sorted(name for name in EXPECTED["fixtures"] if name.startswith("deepseek_"))
# What the feedback of a failing cell must say, per fixture: (grade_id, words).
DIFFERS = "output differs from the one-process MoE"
MESSAGES = {
    "deepseek_softmax_gates": [("test_deepseek_moe_values", DIFFERS),
                               ("test_deepseek_moe_gradients", "logits.grad differs")],
    "deepseek_bias_in_gates": [("test_deepseek_moe_values", DIFFERS)],
    "deepseek_gates_over_all_experts": [("test_deepseek_moe_values", DIFFERS)],
    "deepseek_shared_added_twice": [("test_deepseek_moe_gradients", "the shared expert's")],
    "deepseek_drops_at_capacity": [("test_deepseek_moe_values", DIFFERS),
                                   ("test_deepseek_moe_node_limit", "reached no routed expert"),
                                   ("test_deepseek_moe_traffic", "not per (token, expert)")],
    "deepseek_no_node_limit": [("test_deepseek_moe_node_limit", "reached the experts of more than"),
                               ("test_deepseek_moe_traffic", "not per (token, expert)")],
    "deepseek_node_score_by_max": [("test_deepseek_moe_values", DIFFERS)],
    "deepseek_row_per_expert": [("test_deepseek_moe_traffic", "not per (token, expert)")],
    "deepseek_shortcut_autograd_all_to_all": [
        (cell, "all_to_all_single from torch.distributed.nn.functional, which this exercise refuses")
        for cell in NEW_CELLS],
}


def earned_points(sources: list[str], cells: dict) -> tuple[dict, dict]:
    """Points per test cell, and the failure message of each failing cell."""
    points, messages = {}, {}
    for grade_id, (name, check) in cells.items():
        try:
            check(StudentFunction(name, sources=sources, prelude=PRELUDE))
        except AssertionError as error:
            points[grade_id], messages[grade_id] = 0, str(error)
        else:
            points[grade_id] = EXPECTED["max_points"][grade_id]
    return points, messages


def test_points_are_the_parts_and_every_fixture_has_its_reason():
    marks = [c.metadata.get("nbgrader") or {} for c in nbformat.read(str(SOLUTION), as_version=4).cells]
    graded = {m["grade_id"]: m["points"] for m in marks if m.get("grade") and m["grade_id"] in NEW_CELLS}
    assert graded == deepseek.POINTS == {g: EXPECTED["max_points"][g] for g in NEW_CELLS}
    assert set(OWN).isdisjoint(EXPECTED["graded_through_nbgrader"])
    assert set(OWN) == set(MESSAGES) and len(OWN) >= 5
    assert all(set(EXPECTED["fixtures"][f]) == set(EXPECTED["max_points"]) for f in EXPECTED["fixtures"])
    assert "shortcut" in EXPECTED["why"]["deepseek_shortcut_autograd_all_to_all"]
    for fixture in ("deepseek_no_node_limit", "deepseek_node_score_by_max", "deepseek_row_per_expert"):
        assert fixture in OWN, fixture


def test_the_grading_paragraph_states_the_parts_points():
    cells = nbformat.read(str(SOLUTION), as_version=4).cells
    text = " ".join(" ".join(cell.source for cell in cells).split())
    assert f"MoE as DeepSeek-V3 runs it (graded, {sum(deepseek.POINTS.values())} points)" in text
    for part in ("values", "gradients", "node limit", "traffic"):
        grade_id = "test_deepseek_moe_" + part.replace(" ", "_")
        assert f"{part} ({deepseek.POINTS[grade_id]})" in text, part


def test_the_reference_gates_are_deepseek_v3s():
    """Section 2.1.2 of arXiv:2412.19437: s = Sigmoid(u^T e) (15); the k largest s + b chosen (16); the
    gates the chosen s, unbiased, over their sum (13, 14). A bias that changes the choice changes which
    gates are nonzero, never their values' formula."""
    logits = torch.tensor([[2.0, 0.0, -1.0, 0.5]], dtype=torch.float64)
    bias = torch.tensor([0.0, 0.0, 0.9, 0.0], dtype=torch.float64)
    chosen = biased_top_k(logits, bias, 2)
    assert sorted(chosen[0].tolist()) == [0, 2]           # sigmoid(-1) + 0.9 = 1.17 beats sigmoid(0.5) = 0.62
    gates = sigmoid_gate_matrix(logits, chosen)
    s = torch.sigmoid(logits[0])
    assert torch.allclose(gates[0, [0, 2]], s[[0, 2]] / (s[0] + s[2]))
    assert gates[0, [1, 3]].eq(0).all() and torch.isclose(gates.sum(), torch.tensor(1.0, dtype=torch.float64))
    # the top k of sigmoid(u) + b is not the top k of u + b: the bias moves a squeezed score further
    assert sorted((logits + bias).topk(2).indices[0].tolist()) == [0, 3]


def test_the_reference_limits_each_token_to_its_best_nodes():
    """Section 2.1.2, "Node-Limited Routing": at most M nodes a token, chosen by the sum of each node's
    K/M highest affinities (s + b, the choosing scores); the K experts the top K among those nodes only.
    Here node 1's best single expert beats node 0's, but node 0's two best sum higher."""
    s = torch.tensor([[0.80, 0.70, 0.10, 0.05, 0.90, 0.10, 0.05, 0.02]], dtype=torch.float64)
    logits, bias = torch.logit(s), torch.zeros(8, dtype=torch.float64)
    assert sorted(node_limited_top_k(logits, bias, 2, nodes=2, max_nodes=1)[0].tolist()) == [0, 1]
    assert sorted(s.topk(2).indices[0].tolist()) == [0, 4]               # without the limit: two nodes
    # four nodes of two, M = 2, k = 4: nodes 0 (0.80 + 0.70) and 2 (0.90 + 0.10) win; node 1 loses
    assert sorted(node_limited_top_k(logits, bias, 4, nodes=4, max_nodes=2)[0].tolist()) == [0, 1, 4, 5]
    # the bias takes part in the nodes' scores as in the experts' choice
    bias[6] = 1.0
    assert 6 in node_limited_top_k(logits, bias, 2, nodes=2, max_nodes=1)[0].tolist()


@pytest.mark.slow
def test_the_solution_earns_full_marks_in_the_deepseek_part():
    sources = list(solution_sources(nbformat.read(str(SOLUTION), as_version=4)).values())
    points, messages = earned_points(sources, NEW_CELLS)
    assert points == {g: EXPECTED["solution"][g] for g in NEW_CELLS}, messages


@pytest.mark.slow
@pytest.mark.parametrize("fixture", sorted(EXPECTED["fixtures"]))
def test_each_fixture_earns_exactly_its_deepseek_points(fixture):
    cells = {**OLD_CELLS, **NEW_CELLS} if fixture in OWN else NEW_CELLS
    points, messages = earned_points([(FIXTURES / f"{fixture}.py").read_text()], cells)
    assert points == {g: EXPECTED["fixtures"][fixture][g] for g in cells}, (
        f"{fixture} ({EXPECTED['why'][fixture]}) earned {points}; failures:\n"
        + "\n\n".join(messages.values()))
    for grade_id, message in messages.items():
        assert "hidden test seed" in message, (grade_id, message)
    for grade_id, words in MESSAGES.get(fixture, []):
        assert words in messages[grade_id], (fixture, grade_id, words, messages[grade_id][:2000])
