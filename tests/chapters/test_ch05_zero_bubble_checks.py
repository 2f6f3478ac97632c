"""Chapter 05's zero-bubble checks on hand-made F/B/W schedules (no student code runs), and the claims the
lesson makes about them: the bubbles of 1F1B, of 1F1B with the backward split, and of ZB-H1.

No ZB-H1 generator exists outside the solution notebook; the one these tests need is read from it.
"""

import math
import random
from pathlib import Path

import pytest

from course_lib import sim
from course_lib.grading.checks.ch05_zero_bubble import judge as zb_judge
from course_lib.grading.checks.ch05_zero_bubble import visible as zb
from course_lib.notebook_cells import answer_sources

ROOT = Path(__file__).resolve().parents[2]
SOLUTION = ROOT / "solutions" / "05_pipeline_parallel" / "05_pipeline_parallel.ipynb"


def _reference():
    """The solution notebook's zero_bubble_h1 (the answer lives only there)."""
    namespace: dict = {}
    exec(answer_sources(SOLUTION, strip_markers=True)["zero_bubble_h1"], namespace)
    return namespace["zero_bubble_h1"]


ZB_H1 = _reference()


def plain(schedule) -> list:
    return [[[str(p), int(m)] for p, m in stage] for stage in schedule]


def split_1f1b(stages, microbatches) -> list:
    """1F1B with each backward split, its W right after its B."""
    return [[op for phase, m, _ in stage for op in ([[phase, m], ["W", m]] if phase == "B" else [[phase, m]])]
            for stage in sim.pipeline_schedule("1f1b", stages, microbatches).ops]


@pytest.mark.parametrize("stages, microbatches", [(1, 1), (1, 4), (2, 1), (3, 3), (4, 8), (8, 3), (8, 16)])
def test_the_solution_passes_every_aspect(stages, microbatches):
    ops = plain(ZB_H1(stages, microbatches))
    for aspect, judge in zb.ASPECTS.items():
        assert judge(stages, microbatches, ops) == [], aspect


def test_zb_h1_reaches_the_papers_bubble_for_random_times_and_is_never_slower_than_1f1b():
    rng = random.Random(29)
    for _ in range(300):
        p, m = rng.randint(1, 8), rng.randint(1, 16)
        forward, backward = rng.uniform(0.5, 1.5), rng.uniform(0.5, 2.0)
        times = (forward, backward, rng.uniform(0.2, min(forward, backward)))
        made = zb_judge.play(p, m, plain(ZB_H1(p, m)), times)
        one_f_one_b = sim.simulate_pipeline(sim.pipeline_schedule("1f1b", p, m), times[0], times[1],
                                            t_weight=times[2])
        assert made.makespan <= zb_judge.target_makespan(p, m, times)[0] * (1 + 1e-9) + 1e-9
        assert made.makespan <= one_f_one_b.makespan + 1e-9
        assert max(made.peak_activations) <= min(p, m)


@pytest.mark.parametrize("times", [(1.0, 1.0, 1.0), (1.0, 1.5, 0.5), (1.2, 1.0, 0.8)])
def test_bubbles_of_1f1b_split_1f1b_and_zb_h1(times):
    p, m = 4, 8
    forward, backward, weight = times
    work = m * (forward + backward + weight)
    full = sim.simulate_pipeline(sim.pipeline_schedule("1f1b", p, m), forward, backward, t_weight=weight)
    split = zb_judge.play(p, m, split_1f1b(p, m), times)
    made = zb_judge.play(p, m, plain(ZB_H1(p, m)), times)
    assert math.isclose(full.makespan - work, (p - 1) * (forward + backward + weight))
    assert math.isclose(split.makespan - work, (p - 1) * (forward + backward))
    assert math.isclose(made.makespan - work, (p - 1) * (forward + backward - weight))
    # DualPipe's README writes ZB1P's bubble (PP-1)(F+B-2W) with B the whole backward: the same number
    assert math.isclose((p - 1) * (forward + (backward + weight) - 2 * weight), made.makespan - work)


def test_split_1f1b_is_valid_and_frugal_but_misses_the_makespan_with_a_drawing():
    ops = split_1f1b(4, 5)
    assert zb_judge.dependency_problems(4, 5, ops) == [] and zb_judge.memory_problems(4, 5, ops) == []
    [problem] = zb_judge.makespan_problems(4, 5, ops)
    assert "ZB-H1's is 18" in problem and "(p-1)(F+B-W)" in problem
    rows = problem.split("how long ZB-H1 takes:\n")[1].splitlines()
    assert [row.split("|")[0].strip() for row in rows] == [*(f"stage {s}" for s in range(4)), "ZB-H1"]
    assert len(rows[-1].split("|")[1]) == round(18 / (1 / 3))       # the bar is ZB-H1's makespan long


def test_large_failing_cases_are_described_not_drawn():
    problem = zb_judge.makespan_problems(9, 20, split_1f1b(9, 20))
    assert problem and "how long ZB-H1 takes" not in problem[0]


@pytest.mark.parametrize("ops, expected", [
    ([[["F", 0], ["W", 0], ["B", 0]]], "comes before ('B', 0)"),
    ([[["F", 0], ["B", 0]]], "exactly once"),
    ([[["F", 0], ["B", 0], ["X", 0]]], "is not an op"),
])
def test_malformed_zb_schedules_say_what_is_wrong(ops, expected):
    assert expected in zb_judge.dependency_problems(1, 1, ops)[0]


def test_memory_counts_a_microbatch_until_its_w():
    ops = [[["F", m] for m in range(3)] + [["B", m] for m in range(3)] + [["W", m] for m in range(3)]]
    assert "holds the activations of 3 micro-batches" in zb_judge.memory_problems(1, 3, ops)[0]


def test_a_deadlock_is_a_broken_dependency():
    ops = [[["F", 0], ["B", 0], ["W", 0], ["F", 1], ["B", 1], ["W", 1]],
           [["F", 1], ["F", 0], ["B", 0], ["W", 0], ["B", 1], ["W", 1]]]
    assert "dependency is broken" in zb_judge.dependency_problems(2, 2, ops)[0]


def test_no_zb_h1_generator_ships_in_course_lib():
    text = "\n".join(path.read_text() for path in (ROOT / "course_lib").rglob("*.py"))
    assert "def zero_bubble_h1" not in text
    assert "zero_bubble_h1" in text        # the checks name the student's function, nothing more
