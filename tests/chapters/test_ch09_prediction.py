"""Chapter 09's bus-bandwidth prediction fed back (issue 39): the fitted line and the simulated cluster built
from it, held without a clock, and the one line the cell and benchmarks/bench_predictions.py print."""

from __future__ import annotations

import pathlib

import nbformat
import pytest

from course_lib.real.predict.fed_back import fed_back_cluster
from course_lib.real.predict.predictions import Comparison
from course_lib.sim.cluster.laptop import fed_back_link, fit_line

REPO = pathlib.Path(__file__).resolve().parents[2]
SIZES = [1 << 20, 1 << 21, 1 << 22, 1 << 23]


def _line(intercept, slope):
    return [intercept + slope * size for size in SIZES]


def test_the_fit_recovers_a_line_and_one_busy_point_cannot_move_it():
    times = _line(40e-6, 1 / 2e9)
    assert fit_line(SIZES, times) == pytest.approx((40e-6, 1 / 2e9))
    slowed = times[:2] + [3 * times[2]] + times[3:]                 # someone else's work on one point
    assert fit_line(SIZES, slowed) == pytest.approx((40e-6, 1 / 2e9), rel=0.35)


def test_the_fed_back_cluster_passes_through_the_fitted_line_on_two_ranks():
    times = _line(40e-6, 1 / 2e9)
    cluster = fed_back_cluster(SIZES, times, 2)
    assert fed_back_link(40e-6, 1 / 2e9).latency == pytest.approx(20e-6)
    for size, seconds in zip(SIZES, times, strict=True):
        assert cluster.collective_time("all_reduce", size, range(2)) == pytest.approx(seconds, rel=1e-9)
    assert fed_back_link(-1e-5, 1 / 2e9).latency == 1e-6           # a noisy negative intercept


def test_the_comparison_prints_the_courses_one_line():
    line = Comparison("09", "all-reduce fed back from bus bandwidth", 0.03, 0.025).line
    assert line == ("prediction 09 all-reduce fed back from bus bandwidth: measured 30 ms, "
                    "predicted 25 ms, ratio 1.20")


def test_the_benchmark_runs_the_chapters_own_cells():
    """bench_predictions.py executes the solution notebooks and collects their prediction lines, so the
    cell's comparison is the benchmark's (nothing copied); the cell calls course_lib's functions."""
    cells = "\n".join(c.source for c in nbformat.read(
        REPO / "solutions" / "09_on_the_cluster" / "09_on_the_cluster.ipynb", as_version=4).cells)
    for name in ("fed_back_cluster(fit_sizes, fit_times", 'compare_fed_back("09"'):
        assert name in cells, name
    bench = (REPO / "benchmarks" / "bench_predictions.py").read_text()
    assert "execute_notebook(" in bench and 'glob("*/*.ipynb")' in bench
