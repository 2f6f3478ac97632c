"""Chapter 04's stage-split checks, on their own: the step they grade is the simulator's GPipe makespan,
the visible cases' best steps are the instructor's search's, the memory cases bind, the fixed cases beat
balancing forward + backward and balancing forwards (every such split), no-fit cases fit nothing, and the
real run's judge reads spans as it says (fabricated records: no ranks)."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import replace

import pytest

from course_lib.grading import instructor_checks
from course_lib.grading.attempt.rank_attempt import RankRun
from course_lib.grading.checks.ch04_stage_split import judge, model, visible
from course_lib.grading.checks.ch04_stage_split.ranks import StepRecord
from instructor.checks import _ch04_best_split as search

ch04 = instructor_checks("ch04_stage_split")
SMALL = [*(c for c in visible.VISIBLE_CASES.values() if c.layers <= 14), *ch04.FIXED_BALANCE,
         *ch04.FIXED_MEMORY]


@pytest.mark.parametrize("case", [*SMALL, visible.VISIBLE_CASES["large"], *ch04.FIXED_LARGE],
                         ids=lambda c: c.name)
def test_the_graded_step_is_the_simulators_gpipe_makespan(case):
    rng = random.Random(0)
    for _ in range(20):
        starts = sorted([0, *rng.sample(range(1, case.layers), case.stages - 1)])
        assert judge.played_step(case, starts) == pytest.approx(search.step_time(case, starts), rel=1e-12)


def test_the_visible_best_steps_are_the_instructors_search():
    for name, best in visible.VISIBLE_BEST_MS.items():
        assert best == pytest.approx(search.best_step(visible.VISIBLE_CASES[name]), rel=1e-12), name
    assert search.best_step(visible.VISIBLE_CASES["no fit"]) is None


def _binds(case) -> bool:
    """Some split fits, and none of the fastest splits does."""
    best = search.best_step(case)
    plenty = search.best_step(replace(case, memory_limit=visible.PLENTY_GB))
    return best is not None and best > plenty * (1 + 1e-9)


def test_every_memory_case_binds_and_every_balance_case_has_memory_to_spare():
    memory = [visible.VISIBLE_CASES["memory"], visible.VISIBLE_CASES["memory, other costs"],
              *ch04.FIXED_MEMORY, ch04.FIXED_LARGE[1]]
    assert all(_binds(case) for case in memory)
    rng = random.Random(7)
    assert all(_binds(ch04.drawn_case(rng, True, "drawn")) for _ in range(4))
    for case in (*ch04.FIXED_BALANCE, *(ch04.drawn_case(rng, False, "drawn") for _ in range(4))):
        assert all(max(model.stage_memory(case, s)) < case.memory_limit for s in search.every_split(case))


def test_no_split_fits_the_no_fit_cases():
    for case in (*ch04.NO_FIT, visible.VISIBLE_CASES["no fit"]):
        assert search.best_split(case) is None and search.exhaustive_best_step(case) is None, case.name


def test_one_micro_batch_makes_every_split_take_as_long():
    case = next(c for c in ch04.FIXED_BALANCE if c.microbatches == 1)
    assert len({round(search.step_time(case, s), 9) for s in search.every_split(case)}) == 1


def _balanced_splits(case, work) -> list:
    """Every split that fits and has the least ``work(forward, backward)`` on its busiest stage."""
    fitting = [s for s in search.every_split(case) if max(model.stage_memory(case, s)) <= case.memory_limit]
    busiest = [max(work(f, b) for f, b in zip(*model.stage_times(case, s), strict=True)) for s in fitting]
    return [s for s, w in zip(fitting, busiest, strict=True) if w <= min(busiest) * (1 + 1e-12)]


@pytest.mark.parametrize("case", [c for c in SMALL if c.microbatches > 1], ids=lambda c: c.name)
def test_balancing_forward_plus_backward_or_forwards_alone_loses_on_every_fixed_case(case):
    """Whatever split such a balance picks among its equals, its step is longer than the best."""
    best = search.best_step(case)
    for work in (lambda f, b: f + b, lambda f, b: f):
        assert all(search.step_time(case, s) > best * (1 + 1e-9) for s in _balanced_splits(case, work))


def _records(case, starts, busy_ms):
    """Ranks' records of one judged step each, as ranks.py sends them, in the naive order."""
    per_rank, clock = [], 0.0
    spans = []
    for ms in busy_ms:                                   # forwards 0..S-1
        spans.append([clock, clock + ms / 2e3])
        clock += ms / 2e3
    for s in reversed(range(len(busy_ms))):              # backwards S-1..0
        spans[s] += [clock, clock + busy_ms[s] / 2e3]
        clock += busy_ms[s] / 2e3
    for s, ms in enumerate(busy_ms):
        per_rank.append(StepRecord(starts=starts, spans=[spans[s]], busy=[ms / 1e3], begins=[0.0],
                                   ends=[clock]))
    return per_rank


def _real_run(records) -> RankRun:
    return RankRun(len(records), per_rank=tuple(records))


def test_the_real_runs_judge_wants_clearly_busier_stages_measured_busier():
    case = visible.VISIBLE_CASES["balance"]
    starts = [0, 3, 6, 8]                                # equal counts: stage 3 has the output layer
    modelled = [f + b for f, b in zip(*model.stage_times(case, starts), strict=True)]
    assert judge.real_run_problems(_real_run(_records(case, starts, [m * 10 for m in modelled])), case) == []
    swapped = [m * 10 for m in modelled]
    light, heavy = modelled.index(min(modelled)), modelled.index(max(modelled))
    swapped[light], swapped[heavy] = swapped[heavy], swapped[light]
    problems = judge.real_run_problems(_real_run(_records(case, starts, swapped)), case)
    assert problems and "measured no busier" in problems[0] and f"stage {heavy}" in problems[0]


def test_the_real_runs_judge_names_ranks_that_disagree_and_spans_out_of_order():
    case = visible.VISIBLE_CASES["balance"]
    records = _records(case, [0, 3, 6, 8], [10.0, 10.0, 10.0, 10.0])
    records[1] = dataclasses.replace(records[1], starts=[0, 4, 6, 9])
    assert "different splits" in judge.real_run_problems(_real_run(records), case)[0]
    records = _records(case, [0, 3, 6, 8], [10.0, 10.0, 10.0, 10.0])
    records[2].spans[0][0] = records[1].spans[0][0]   # stage 2 computing before stage 1 sent
    assert "not a naive model-parallel step" in judge.real_run_problems(_real_run(records), case)[0]


def test_feedback_shows_the_students_stages_never_the_best_split_nor_the_pace():
    case = visible.VISIBLE_CASES["memory"]
    over = next(s for s in search.every_split(case) if max(model.stage_memory(case, s)) > case.memory_limit)
    message = judge.fitting_step_problems(case, over, visible.VISIBLE_BEST_MS["memory"])[0]
    assert "OVER THE LIMIT" in message and "stage 0: layers" in message
    case = visible.VISIBLE_CASES["balance"]
    message = judge.step_problems(case, [0, 3, 6, 8], visible.VISIBLE_BEST_MS["balance"])[0]
    assert "110.74 ms" in message and str(search.best_split(case)) not in message
    assert "pace" not in message and "slowest" not in message


def test_a_no_fit_case_wants_a_value_error():
    from course_lib.grading.attempt.judge_runner import CaseAnswer

    case = visible.VISIBLE_CASES["no fit"]
    assert judge.no_fit_problems(case, CaseAnswer(raised="ValueError: nothing fits")) == []
    assert "should raise ValueError" in judge.no_fit_problems(case, CaseAnswer(value=[0, 3, 6]))[0]
    assert "should raise ValueError" in judge.no_fit_problems(case, CaseAnswer(raised="IndexError: x"))[0]


def test_nothing_in_course_lib_searches_for_a_split_or_states_the_step():
    """The best step and the step's closed form are the instructor's: course_lib's check files hold the
    per-stage sums and memory, and play the simulator for a split's step."""
    from pathlib import Path

    folder = Path(visible.__file__).parent
    text = "\n".join(p.read_text() for p in folder.glob("*.py"))
    assert "combinations" not in text and "def best_step" not in text and "def step_time" not in text
    assert "max(forward)" not in text and "microbatches - 1" not in text and "slowest" not in text


def _exercise_prose() -> str:
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "solutions" / "04_model_parallel" / "04_model_parallel.ipynb"
    cells = json.loads(path.read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def test_what_the_exercise_prose_states_is_what_the_checks_do():
    prose = " ".join(_exercise_prose().split())
    assert judge.CLEAR_GAP == 1.6 and "clearly more work (1.6 times)" in prose
    assert "small ones (2 to 5 stages, up to 14 layers and 1 to 12 micro-batches)" in prose
    assert "large ones (40 to 80 layers on 8 to 16 stages" in prose and "within 40 seconds" in prose
    assert visible.LARGE_TIMEOUT_S == ch04.LARGE_TIMEOUT_S == 40
    rng = random.Random(3)
    drawn = [ch04.drawn_case(rng, binding, "d") for binding in (True, False) * 30]
    assert {c.stages for c in drawn} <= set(range(2, 6)) and max(c.layers for c in drawn) <= 14
    assert {c.microbatches for c in (*drawn, *ch04.FIXED_BALANCE)} <= set(range(1, 13))
    large = [ch04.drawn_case(rng, binding, "d", large=True) for binding in (True, False) * 3]
    large += [*ch04.FIXED_LARGE, visible.VISIBLE_CASES["large"]]
    assert {c.stages for c in large} <= set(range(8, 17)) and {c.layers for c in large} <= set(range(40, 81))
    memory = visible.VISIBLE_CASES["memory"]
    assert (memory.layers, memory.stages, memory.microbatches, memory.memory_limit) == (12, 4, 8, 26.3)
    assert "3 layers a stage over 4 stages, with 8 micro-batches" in prose and "26.3 GB" in prose
    assert "three times their forward" in prose and "`ValueError`" in prose
    block = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14_336        # Llama 3 8B (Table 3)
    assert round(block / 1e6) == 218 and round(128_256 * 4096 / 1e6) == 525
    assert round(128_256 * 4096 / block, 1) == memory.forward[-1] == 2.4
    assert round(16 * block / 1e9, 1) == memory.state[1]
    assert round(16 * 128_256 * 4096 / 1e9, 1) == memory.state[0]
    assert "218 M parameters" in prose and "525 M each" in prose and "2.4 blocks'" in prose
    assert "Dubey et al. 2024, section 3.3.2" in prose and "Table 3 rounds to 128,000" in prose


def test_the_release_states_no_step_formula_and_imports_none():
    """What a student has of the exercise (the release notebook) names the step's definition (the
    simulator's GPipe) and the contract, never its closed form: that is the design question."""
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "notebooks" / "04_model_parallel" / "04_model_parallel.ipynb"
    text = "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"])
    assert "step_time" not in text and "max F + max B" not in text and "(m - 1)" not in text
    assert "raise ValueError" in text and "any one of them will do" in text
