"""The student-facing side of chapter 08's mesh checks: each call's answer against torch's DeviceMesh,
with the call spelled out, and which groups lie inside one node.
"""

from __future__ import annotations

from course_lib.grading.attempt.rank_attempt import fail_with


def inside_node_from_groups(per_rank_groups: list, gpus_per_node: int) -> dict:
    """{name: every group along it lies in one node}, read off torch's groups (one dict per rank)."""
    names = per_rank_groups[0].keys()
    return {n: all(len({r // gpus_per_node for r in groups[n]}) == 1 for groups in per_rank_groups)
            for n in names}


def compare(name: str, args, got, expected, problems: list) -> None:
    """Append a message when ``got`` (plain data) differs from ``expected``."""
    if got != expected:
        call = f"{name}({', '.join(map(repr, args))})"
        problems.append(f"{call} returned {got!r}, expected {expected!r}")


def judge_calls(name: str, calls: list, outcomes: list, expected: list, what: str) -> None:
    problems: list = []
    for args, outcome, want in zip(calls, outcomes, expected, strict=True):
        if outcome.raised:
            problems.append(f"{name}{tuple(args)} raised {outcome.raised}")
        else:
            compare(name, args, outcome.value, want, problems)
    fail_with(problems, what)
