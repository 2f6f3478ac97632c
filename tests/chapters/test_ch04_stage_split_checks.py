"""Chapter 04's stage-split checks, on their own: the step they grade is the simulator's GPipe makespan,
the visible cases' best steps are the instructor's exhaustive search's, the memory cases bind, and the
real run's judge reads spans as it says (fabricated records: no ranks)."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import replace

import pytest

from course_lib import sim
from course_lib.grading import instructor_checks
from course_lib.grading.attempt.rank_attempt import RankRun
from course_lib.grading.checks.ch04_stage_split import judge, model, visible
from course_lib.grading.checks.ch04_stage_split.ranks import StepRecord

ch04 = instructor_checks("ch04_stage_split")
CASES = [*visible.VISIBLE_CASES.values(), *ch04.FIXED_BALANCE, *ch04.FIXED_MEMORY]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_graded_step_is_the_simulators_gpipe_makespan(case):
    rng = random.Random(0)
    every = list(ch04.splits(case))
    for starts in rng.sample(every, min(20, len(every))):
        forward, backward = model.stage_times(case, starts)
        played = sim.simulate_pipeline(sim.pipeline_schedule("gpipe", case.stages, case.microbatches),
                                       forward, backward)
        assert played.makespan == pytest.approx(model.step_time(case, starts), rel=1e-12)


def test_the_visible_best_steps_are_the_exhaustive_searchs():
    for name, case in visible.VISIBLE_CASES.items():
        assert visible.VISIBLE_BEST_MS[name] == pytest.approx(ch04.best_step(case), rel=1e-12), name


def _binds(case) -> bool:
    """Some split fits, and none of the fastest splits does."""
    plenty = replace(case, memory_limit=visible.PLENTY_GB)
    fastest = ch04.best_step(plenty)
    every = list(ch04.splits(case))
    fits = [max(model.stage_memory(case, s)) <= case.memory_limit for s in every]
    return any(fits) and not any(f for f, s in zip(fits, every, strict=True)
                                 if model.step_time(case, s) <= fastest * (1 + 1e-12))


def test_every_memory_case_binds_and_every_balance_case_has_memory_to_spare():
    memory = [visible.VISIBLE_CASES["memory"], visible.VISIBLE_CASES["memory, 3 stages"], *ch04.FIXED_MEMORY]
    assert all(_binds(case) for case in memory)
    rng = random.Random(7)
    assert all(_binds(ch04.drawn_case(rng, True, "drawn")) for _ in range(4))
    for case in (*ch04.FIXED_BALANCE, *(ch04.drawn_case(rng, False, "drawn") for _ in range(4))):
        assert all(max(model.stage_memory(case, s)) < case.memory_limit for s in ch04.splits(case))


def test_one_micro_batch_makes_every_split_take_as_long():
    case = next(c for c in ch04.FIXED_BALANCE if c.microbatches == 1)
    assert len({round(model.step_time(case, s), 9) for s in ch04.splits(case)}) == 1


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


def test_feedback_shows_the_students_stages_never_the_best_split():
    case = visible.VISIBLE_CASES["memory"]
    message = judge.fitting_step_problems(case, [0, 3, 6, 9], visible.VISIBLE_BEST_MS["memory"])[0]
    assert "OVER THE LIMIT" in message and "stage 0: layers" in message
    message = judge.step_problems(visible.VISIBLE_CASES["balance"], [0, 3, 6, 8], 95.3)[0]
    assert "95.30 ms" in message and "[0, 4, 6, 9]" not in message


def test_nothing_in_course_lib_searches_for_a_split():
    """The best step is the instructor's: course_lib's check files hold the model, not a search."""
    from pathlib import Path

    folder = Path(visible.__file__).parent
    text = "\n".join(p.read_text() for p in folder.glob("*.py"))
    assert "combinations" not in text and "def best_step" not in text


def _exercise_prose() -> str:
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "solutions" / "04_model_parallel" / "04_model_parallel.ipynb"
    cells = json.loads(path.read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def test_what_the_exercise_prose_states_is_what_the_checks_do():
    prose = " ".join(_exercise_prose().split())
    assert judge.CLEAR_GAP == 1.6 and "clearly more work (1.6 times)" in prose
    assert "2 to 5 stages, up to 14 layers and 1 to 12 micro-batches" in prose
    rng = random.Random(3)
    drawn = [ch04.drawn_case(rng, binding, "d") for binding in (True, False) * 30]
    assert {c.stages for c in drawn} <= set(range(2, 6)) and max(c.layers for c in drawn) <= 14
    assert {c.microbatches for c in (*drawn, *ch04.FIXED_BALANCE)} <= set(range(1, 13))
    memory = visible.VISIBLE_CASES["memory"]
    assert (memory.layers, memory.stages, memory.microbatches, memory.memory_limit) == (12, 4, 8, 30.8)
    assert "3 layers a stage over 4 stages, with 8 micro-batches" in prose and "30.8 GB" in prose
    block = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14_336        # Llama 3 8B (Table 3)
    assert round(block / 1e6) == 218 and round(128_256 * 4096 / 1e6) == 525
    assert round(128_256 * 4096 / block, 1) == memory.forward[-1] == 2.4
    assert round(16 * block / 1e9, 1) == memory.state[1]
    assert round(16 * 128_256 * 4096 / 1e9, 1) == memory.state[0]
    assert "218 M parameters" in prose and "525 M each" in prose and "2.4 blocks'" in prose
    assert "Dubey et al. 2024, section 3.3.2" in prose and "Table 3 rounds to 128,000" in prose
