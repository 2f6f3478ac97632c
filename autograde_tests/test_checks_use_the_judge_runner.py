"""Every exercise's checks run student code on ranks through the one judge runner and read records.

An AST scan of course_lib/grading/checks/ and instructor/checks/ (a new chapter's folder included): no check
calls run_on_ranks itself (run_answer reads the outcomes back as records, so no outcome dict is read by
key), reads ``.per_rank``, reads ``.error`` (the guard and the world-size loop are judge_runner's:
``judging``, ``runs_until_failure``, ``failures``, ``RankRun.completed``) or walks ``.outcomes`` itself
(``cases_of``, ``ranks_of``, ``RankRun.records``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCANNED = sorted([*(REPO / "course_lib" / "grading" / "checks").rglob("*.py"),
                  *(REPO / "instructor" / "checks").glob("*.py")])
RUNNER = "course_lib/grading/attempt/judge_runner.py"
# Rank runs of torch's own implementation only (a reference: no student code, nothing to judge).
REFERENCE_RUNS = {"course_lib/grading/checks/ch03_ddp/ranks.py"}


def _walked_outcomes(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "outcomes"


def violations(source: str, reference_runs: bool = False) -> list[str]:
    """What in ``source`` bypasses the judge runner, with line numbers (``reference_runs``: it may call
    run_ranks for torch's own reference)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            if node.attr == "per_rank":
                found.append(f"line {line}: reads .per_rank (read records: run.records, cases_of, ranks_of)")
            elif node.attr == "error":
                found.append(f"line {line}: reads .error (the guard is judge_runner's: @judging, "
                             "runs_until_failure, failures, run.completed)")
        bypasses = ("run_on_ranks", "attempt") if reference_runs else ("run_on_ranks", "attempt", "run_ranks")
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in bypasses or \
                isinstance(node, ast.alias) and node.name in ("run_on_ranks", "attempt"):
            found.append(f"line {line}: runs ranks without the runner (judge_runner.run_answer reads the "
                         "outcomes back as records)")
        if isinstance(node, (ast.For, ast.comprehension)) and _walked_outcomes(node.iter):
            found.append(f"line {line}: walks .outcomes itself (cases_of, ranks_of)")
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("zip", "enumerate") \
                and any(_walked_outcomes(arg) for arg in node.args):
            found.append(f"line {line}: walks .outcomes itself (cases_of, ranks_of)")
    return found


def _relative(path: Path) -> str:
    return str(path.relative_to(REPO))


@pytest.mark.parametrize("path", SCANNED, ids=_relative)
def test_checks_run_ranks_and_read_outcomes_through_the_judge_runner(path):
    found = violations(path.read_text(), reference_runs=_relative(path) in REFERENCE_RUNS)
    assert not found, f"{_relative(path)} bypasses the judge runner ({RUNNER}):\n" + "\n".join(found)


def test_the_scan_finds_each_way_around_the_runner():
    bypasses = {
        "if run.error:\n    return [run.error]": ".error",
        "for rank, outcome in enumerate(run.per_rank):\n    pass": ".per_rank",
        "from course_lib.grading.attempt.rank_attempt import run_on_ranks": "without the runner",
        "per_rank = run_ranks(side, 2, student, timeout=5)": "without the runner",
        "for case, outcomes in zip(run.cases, run.outcomes):\n    pass": "walks .outcomes",
        "[o for outcomes in run.outcomes for o in outcomes]": "walks .outcomes",
    }
    for source, named in bypasses.items():
        assert any(named in v for v in violations(source)), source
    assert violations("for index, case, outcomes in cases_of(run):\n    rows = run.outcomes[index]") == []
