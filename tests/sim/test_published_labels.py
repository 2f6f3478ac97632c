"""A figure is labelled "published" only where a paper prints it; a derived one names its derivation beside
it (issue 38). And DeepSeek-V3's GPU-hours are wall-clock time, compared as such."""

import json
import re
from pathlib import Path

import pytest

from course_lib import sim

ROOT = Path(__file__).resolve().parents[2]
RUNS = (*sim.PUBLISHED_RUNS, sim.DEEPSEEK_V3_RUN)
# Names of figures the simulator derives: printed beside "published" only with "derived" or "converted".
DERIVED = re.compile(r"mfu_from_gpu_hours|derived_mfu|model_flops_mfu|to_model_flops")
WORD = re.compile(r"(?<![\w.])published(?!\w)", re.IGNORECASE)   # the word, not published_gpu_hours
SAYS_HOW = re.compile(r"derived|converted|simulator's count|conversion", re.IGNORECASE)


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r.name)
def test_every_paper_figure_stands_in_its_source_as_the_paper_prints_it(run):
    if run.paper_tflops is not None:
        assert f"{run.paper_tflops / 1e12:.0f} TFLOP/s" in run.source, run.source
    if run.paper_mfu is not None:
        assert f"{round(100 * run.paper_mfu)}%" in run.source, run.source
    if run.published_gpu_hours_per_trillion_tokens is not None:
        assert f"{run.published_gpu_hours_per_trillion_tokens / 1e3:.0f}K" in run.source, run.source
        assert run.derived_mfu is not None and "derived, not published" in run.derivation


def test_deepseek_v3_has_no_published_mfu():
    run = sim.DEEPSEEK_V3_RUN
    assert run.paper_mfu is None and run.paper_tflops is None and run.model_flops_mfu is None
    assert "MFU" not in run.source


def _code_lines():
    for path in sorted(ROOT.glob("solutions/*/*.ipynb")):
        for i, cell in enumerate(json.loads(path.read_text())["cells"]):
            if cell["cell_type"] == "code":
                for line in "".join(cell["source"]).splitlines():
                    yield f"{path.parent.name} cell {i}", line
    for line in (ROOT / "course_lib/sim/search/published.py").read_text().splitlines():
        yield "published.py", line


def test_no_notebook_or_published_py_labels_a_derived_number_published():
    wrong = [(where, line.strip()) for where, line in _code_lines()
             if WORD.search(line) and DERIVED.search(line)
             and not SAYS_HOW.search(line)]
    assert not wrong, f"a derived figure labelled published (say 'derived ...' beside it): {wrong}"


def test_the_rule_catches_the_old_deepseek_line():
    line = 'print(f"simulated {report.mfu:.1%}, published {mfu_from_gpu_hours(180e3, m, p):.1%}")'
    assert WORD.search(line) and DERIVED.search(line) and not SAYS_HOW.search(line)


def test_deepseek_v3_wall_clock_stays_apart_from_the_step_and_the_gap_is_stated():
    # Steady steps, then the ramp (section 4.2) and Llama 3's >90% effective training time (another run's
    # figure, named as such): nothing fitted to the 180K. Known gap: the simulator stays about 20% faster
    # (FP8 at the course's assumed efficiency is the first suspect: chapter 11, section 9).
    clock = sim.wall_clock_hours(sim.DEEPSEEK_V3_RUN)
    assert clock.steady < clock.with_ramp < clock.wall_clock
    assert clock.wall_clock == pytest.approx(clock.with_ramp / 0.9)
    gap = clock.gap(sim.DEEPSEEK_V3_RUN.published_gpu_hours_per_trillion_tokens)
    assert -0.25 < gap < -0.10, gap
