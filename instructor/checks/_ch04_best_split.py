"""Chapter 04's best stage split, worked out for the hidden checks only (instructor-only: students never
have this file): the GPipe step of a split in closed form, and the shortest step of any split that fits.

The step of a split is sum(F + B) + (m - 1)(max stage F + max stage B) (tests/chapters hold it equal to the
simulator's GPipe makespan). The sum is the same for every split, so the best step minimises max F + max B
under the memory limit. Every stage's constraints (forward <= a cap, backward <= a cap, memory <= the
limit) hold on any part of a stage that holds them, so packing each stage greedily from the left needs the
fewest stages: a pair of caps is feasible when that greedy packing needs at most ``stages`` stages. The
smallest feasible backward cap only falls as the forward cap grows, so one pass over the sorted candidate
caps (every contiguous sum is a candidate) finds the best pair: O(L^2 log L) for L layers, well under a
second for 80 layers, where trying every split of 80 layers into 16 stages never ends.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import replace

from course_lib.grading.checks.ch04_stage_split.model import Case, stage_memory, stage_times

TOLERANCE = 1e-9


def step_time(case: Case, starts) -> float:
    """GPipe's step with free hops: every stage's work, plus (m - 1) times the slowest forward and the
    slowest backward (a flow shop of identical micro-batches, forwards then backwards)."""
    forward, backward = stage_times(case, starts)
    return sum(forward) + sum(backward) + (case.microbatches - 1) * (max(forward) + max(backward))


def _prefix(values) -> list[float]:
    return [0.0, *itertools.accumulate(values)]


class _Packing:
    """Prefix sums of one case, and the greedy left-to-right packing under caps."""

    def __init__(self, case: Case):
        self.case = case
        self.f, self.b = _prefix(case.forward), _prefix(case.backward)
        self.memory = _prefix(s + case.microbatches * a for s, a in zip(case.state, case.activation,
                                                                        strict=True))
        self.limit = case.memory_limit * (1 + TOLERANCE)

    def contiguous_sums(self, prefix) -> list[float]:
        layers = self.case.layers
        return sorted({prefix[j] - prefix[i] for i in range(layers) for j in range(i + 1, layers + 1)})

    def starts(self, cap_f: float, cap_b: float) -> list[int] | None:
        """Each stage as long as the caps and the limit allow; None if a layer alone breaks one."""
        f, b, memory, layers = self.f, self.b, self.memory, self.case.layers
        starts, first = [0], 0
        for j in range(1, layers):       # may layer j join the stage that began at `first`?
            if (f[j + 1] - f[first] > cap_f or b[j + 1] - b[first] > cap_b
                    or memory[j + 1] - memory[first] > self.limit):
                starts.append(j)
                first = j
        ok = all(f[e] - f[s] <= cap_f and b[e] - b[s] <= cap_b and memory[e] - memory[s] <= self.limit
                 for s, e in zip(starts, [*starts[1:], layers], strict=True))
        return starts if ok else None

    def feasible(self, cap_f: float, cap_b: float) -> bool:
        starts = self.starts(cap_f, cap_b)
        return starts is not None and len(starts) <= self.case.stages


def best_split(case: Case) -> list[int] | None:
    """A split with the shortest GPipe step of any split that fits the memory limit (None if none fits)."""
    if case.layers < case.stages:
        return None
    packing = _Packing(case)
    caps_f, caps_b = packing.contiguous_sums(packing.f), packing.contiguous_sums(packing.b)
    best, pair = None, None
    top = len(caps_b)                    # caps_b[top - 1]: the smallest backward cap feasible so far
    for cap_f in caps_f:
        if not packing.feasible(cap_f, caps_b[top - 1]):
            continue
        while top > 1 and packing.feasible(cap_f, caps_b[top - 2]):
            top -= 1
        if best is None or cap_f + caps_b[top - 1] < best:
            best, pair = cap_f + caps_b[top - 1], (cap_f, caps_b[top - 1])
    if pair is None:
        return None
    starts = packing.starts(*pair)
    spare = [i for i in range(1, case.layers) if i not in starts]   # more stages: split at any boundary
    return sorted([*starts, *spare[:case.stages - len(starts)]])


@functools.lru_cache(maxsize=256)
def best_step(case: Case) -> float | None:
    """The shortest GPipe step of any split that fits the memory limit (None if no split fits)."""
    starts = best_split(case)
    return None if starts is None else step_time(case, starts)


def every_split(case: Case):
    """Every split of the case (for small cases and tests): stage 0 starts at 0, the others anywhere."""
    for cuts in itertools.combinations(range(1, case.layers), case.stages - 1):
        yield [0, *cuts]


def exhaustive_best_step(case: Case) -> float | None:
    """``best_step`` by trying every split: the reference the fast search is tested against."""
    steps = [step_time(case, s) for s in every_split(case)
             if max(stage_memory(case, s)) <= case.memory_limit * (1 + TOLERANCE)]
    return min(steps) if steps else None


def least_memory(case: Case) -> float:
    """The smallest peak memory of any split (the limit below which nothing fits): bisection over the
    contiguous memory sums with the greedy packing."""
    packing = _Packing(case)
    needs = packing.contiguous_sums(packing.memory)
    low, high = 0, len(needs) - 1
    while low < high:
        middle = (low + high) // 2
        trial = _Packing(replace(case, memory_limit=needs[middle]))
        if trial.feasible(float("inf"), float("inf")):
            high = middle
        else:
            low = middle + 1
    return needs[low]
