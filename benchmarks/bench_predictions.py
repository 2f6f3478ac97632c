"""Every predict-then-measure comparison of the course, as the chapters make them: runs each chapter's
solution notebook headless (its own cells, nothing copied) and collects the line every comparison prints,
``prediction <chapter> <what>: measured <x> ms, predicted <y> ms, ratio <r>`` (with, outside the band,
where the measured time went, lane by lane), then how many land within [0.67, 1.5] (issue 39).

A goal for a quiet machine, not a timed test: run it with nothing else busy.

    .venv/bin/python benchmarks/bench_predictions.py            # every chapter (a few minutes)
    .venv/bin/python benchmarks/bench_predictions.py 00 03      # some chapters

Prints the machine and the load average before and after each notebook, so that a run beside other work
says so.
"""

from __future__ import annotations

import os
import platform
import re
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from course_lib.sim import WITHIN  # noqa: E402
from tests.support.notebooks import code_outputs_text, execute_notebook  # noqa: E402

PREDICTION = re.compile(r"^prediction (?P<chapter>\d\d) (?P<what>.+): measured (?P<measured>[\d.]+) ms, "
                        r"predicted (?P<predicted>[\d.]+) ms, ratio (?P<ratio>[\d.]+)$")


def prediction_blocks(text: str) -> list[tuple[float, list[str]]]:
    """Each prediction line of a notebook's printed output with the indented lines after it (the lanes
    and details a comparison prints outside the band): [(ratio, lines)]."""
    blocks: list[tuple[float, list[str]]] = []
    current = None
    for line in text.splitlines():
        found = PREDICTION.match(line.strip())
        if found:
            current = [line.strip()]
            blocks.append((float(found["ratio"]), current))
        elif current is not None and line.startswith("  ") and line.strip():
            current.append(line.rstrip())
        else:
            current = None
    return blocks


def chapter_notebooks(chapters: list[str]) -> list[Path]:
    notebooks = sorted((ROOT / "solutions").glob("*/*.ipynb"))
    return [path for path in notebooks if not chapters or path.parent.name[:2] in chapters]


def main(chapters: list[str]) -> None:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"machine: {platform.machine()}, {cores} of {os.cpu_count()} CPU(s) usable, "
          f"torch {torch.__version__}, load average {os.getloadavg()[0]:.1f} at start")
    ratios = []
    for path in chapter_notebooks(chapters):
        notebook, seconds = execute_notebook(path, cell_timeout=300, total_timeout=900)
        blocks = prediction_blocks(code_outputs_text(notebook))
        print(f"-- {path.parent.name}: {len(blocks)} comparison(s), {seconds:.0f} s, "
              f"load average {os.getloadavg()[0]:.1f}")
        for ratio, lines in blocks:
            ratios.append(ratio)
            print("\n".join(lines))
    inside = sum(WITHIN[0] <= r <= WITHIN[1] for r in ratios)
    print(f"predictions: {inside} of {len(ratios)} within [{WITHIN[0]}, {WITHIN[1]}]")


if __name__ == "__main__":
    main(sys.argv[1:])
