"""Every solution notebook headless, as a student's Run All (worked answers shown): seconds each, against
CHAPTERS.md's budget of 3 minutes on the 2-core machine, as a ratio.

The test suite runs each graded chapter's reference once, as a student of the shared grading run
(autograde_tests/test_grading_chapters.py), where three gradings share the cores; this script gives the
quiet, one-at-a-time figure the budget is about. Run: .venv/bin/python benchmarks/bench_notebooks.py [00 09]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.notebooks import execute_notebook  # noqa: E402
from tests.test_solution_notebooks import HEADLESS_BUDGET_S, SOLUTION_NOTEBOOKS  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("chapters", nargs="*", help="chapter numbers (00 01 ...); all by default")
    args = parser.parse_args()
    paths = [p for p in SOLUTION_NOTEBOOKS if not args.chapters or p.parent.name[:2] in args.chapters]
    over = []
    for path in paths:
        load = os.getloadavg()[0]
        _, seconds = execute_notebook(path, cell_timeout=300, total_timeout=10 * HEADLESS_BUDGET_S)
        ratio = seconds / HEADLESS_BUDGET_S
        print(f"{path.parent.name:24s} {seconds:6.1f} s  {ratio:4.2f} of the budget  (load {load:.1f})",
              flush=True)
        over += [path.parent.name] if ratio > 1 else []
    print(f"within {HEADLESS_BUDGET_S} s: {len(paths) - len(over)} of {len(paths)}"
          + (f"; over: {over}" if over else ""))


if __name__ == "__main__":
    main()
