"""Chapter 04's instructor search (instructor/checks/_ch04_best_split.py) against trying every split: the
fast best step equals the exhaustive one on small drawn cases (memory to spare, binding, none fitting, one
micro-batch), its split is valid and fits, and it answers an 80-layer model on 16 stages in well under a
second, where trying every split never ends."""

from __future__ import annotations

import random
import time
from dataclasses import replace

import pytest

from course_lib import sim
from course_lib.grading.checks.ch04_stage_split import model
from instructor.checks import _ch04_best_split as search
from instructor.checks.ch04_stage_split import drawn_case


def _small(rng: random.Random) -> model.Case:
    stages = rng.randint(1, 5)
    blocks = rng.randint(max(0, stages - 2), 11)
    case = model.transformer_case(blocks, stages, rng.randint(1, 12), 1000.0,
                                  head=round(rng.uniform(1, 4), 2),
                                  block_times=[round(rng.uniform(0.5, 1.5), 2) for _ in range(blocks)],
                                  recomputed=[i for i in range(blocks) if rng.random() < 0.4])
    if rng.random() < 0.7:       # a limit anywhere from nothing fits to plenty
        case = replace(case, memory_limit=round(rng.uniform(10.0, 60.0), 2))
    return case


@pytest.mark.parametrize("seed", range(4))
def test_the_fast_best_step_is_the_exhaustive_one(seed):
    rng = random.Random(seed)
    for _ in range(60):
        case = _small(rng)
        exhaustive = search.exhaustive_best_step(case)
        starts = search.best_split(case)
        if exhaustive is None:
            assert starts is None and search.best_step(case) is None, case
            continue
        assert model.structure_problems(case, starts) == [], (case, starts)
        assert max(model.stage_memory(case, starts)) <= case.memory_limit * (1 + 1e-9)
        assert search.step_time(case, starts) == pytest.approx(exhaustive, rel=1e-12), case


def test_the_least_memory_is_the_least_peak_of_any_split():
    rng = random.Random(11)
    for _ in range(30):
        case = _small(rng)
        if case.layers < case.stages:
            continue
        least = min(max(model.stage_memory(case, s)) for s in search.every_split(case))
        assert search.least_memory(case) == pytest.approx(least, rel=1e-12)


def test_the_closed_form_step_is_the_simulators_gpipe_makespan():
    rng = random.Random(5)
    for _ in range(40):
        case = _small(rng)
        if case.layers < case.stages:
            continue
        starts = next(search.every_split(case))
        played = sim.simulate_pipeline(sim.pipeline_schedule("gpipe", case.stages, case.microbatches),
                                       *model.stage_times(case, starts))
        assert played.makespan == pytest.approx(search.step_time(case, starts), rel=1e-12)


def test_a_large_model_is_answered_fast():
    case = replace(drawn_case(random.Random(3), False, "large", large=True), memory_limit=1000.0)
    case = replace(case, stages=16) if case.layers >= 48 else case
    began = time.process_time()
    starts = search.best_split(case)
    assert time.process_time() - began < 3.0
    assert model.structure_problems(case, starts) == []
