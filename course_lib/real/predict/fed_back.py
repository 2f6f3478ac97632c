"""Chapter 09's bus bandwidth fed back: the measured machine rebuilt from a line fitted through its own
all-reduces, then asked about sizes it never measured, with a control that says how much busier the
machine got since the fit (a ``Comparison`` of ``course_lib.real.predict.predictions``, printed as every
predict-then-measure cell prints it).
"""

from __future__ import annotations

from course_lib.sim import make_cluster, preset_from_measurements
from course_lib.sim.cluster.laptop import fed_back_link, fit_line

from ..measure.timing_harness import measure_all_reduce
from .predictions import Comparison

__all__ = ["compare_fed_back", "fed_back_cluster"]


def fed_back_cluster(fit_sizes, fit_times, world_size: int):
    """The simulated cluster of ``world_size`` ranks whose all-reduce is the line fitted (``fit_line``)
    through the measured all-reduces: the measured machine, as chapter 09 builds it."""
    link = fed_back_link(*fit_line(fit_sizes, fit_times))
    unused = dict(flops=1.0, memory_bytes=1.0)       # a preset needs them; a collective never reads them
    preset = preset_from_measurements(**unused, intra_latency=link.latency, intra_bandwidth=link.bandwidth,
                                      name="this machine, fitted")
    return make_cluster(nodes=1, gpus_per_node=world_size, preset=preset)


def compare_fed_back(chapter: str, cluster, world_size: int, sizes, control: tuple[int, float],
                     repetitions: int = 7) -> Comparison:
    """All-reduces of ``sizes`` (larger than any fitted) predicted by the fed-back ``cluster`` and then
    measured, with a control: ``control`` = (a fitted size, its time in the fit), measured again in
    the same run, whose ratio (the drift) says how much busier the machine got since the fit. The
    comparison is of the sizes summed; ``.ratios`` holds each size's, ``.drift`` the control's."""
    predicted = [cluster.collective_time("all_reduce", n, range(world_size)) for n in sizes]
    again, *measured = measure_all_reduce(world_size, [control[0], *sizes], repetitions=repetitions)
    what = f"all-reduce fed back from bus bandwidth, {world_size} ranks, {len(sizes)} sizes summed"
    comparison = Comparison(chapter, what, sum(measured), sum(predicted))
    comparison.measured_each, comparison.predicted_each = measured, predicted
    comparison.ratios = [m / p for m, p in zip(measured, predicted, strict=True)]
    comparison.drift = again / control[1]
    comparison.details = [f"{n:>10,d} B: measured {m * 1e3:.3g} ms, predicted {p * 1e3:.3g} ms "
                          f"(ratio {m / p:.2f})" for n, m, p in zip(sizes, measured, predicted, strict=True)]
    comparison.details.append(f"control, {control[0]:,d} B again: {again * 1e3:.3g} ms, "
                              f"{comparison.drift:.2f}x its time in the fit (the load since the fit)")
    return comparison
