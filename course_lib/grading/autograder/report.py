"""What a grading run shows and leaves behind: a progress bar, a per-student table and grades.csv.

Plain text on purpose: it reads the same in a terminal, a CI log and a Slurm output file.
"""

from __future__ import annotations

import csv
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from course_lib.grading.student_text import readable

# nbgrader export's columns (duedate, timestamp, late_submission_penalty: docs/instructors.md) and ours
CSV_COLUMNS = ["assignment", "student_id", "duedate", "timestamp", "raw_score", "late_submission_penalty",
               "score", "max_score", "needs_manual_grade", "review_notes", "lost_points"]


@dataclass
class StudentResult:
    """One student's grade on one assignment, with the reasons an instructor should look at it."""

    student: str
    assignment: str
    score: float
    max_score: float
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    cells: dict[str, float] = field(default_factory=dict)   # test grade_id -> points
    lost: dict[str, str] = field(default_factory=dict)      # grade_id below full -> "0/3: <reason>"
    refused: bool = False    # not taken (its id, its zip): 0 in grades.csv, never in the gradebook
    grader_failed: bool = False   # the grader's own error, not the student's: graded again next run

    @property
    def needs_review(self) -> bool:
        return bool(self.notes)


def printable(text: str, stream) -> str:
    """text as ``stream`` can encode it (a student's name or quoted words on a terminal that is not UTF-8:
    "?" where it cannot), so that printing one student's line never stops the run."""
    encoding = getattr(stream, "encoding", None) or "utf-8"
    try:
        return text.encode(encoding, "replace").decode(encoding)
    except LookupError:
        return text.encode("ascii", "replace").decode("ascii")


class ProgressBar:
    """``[#####.....] 3/10 alice 4.2 s`` redrawn in place on a terminal, one line each otherwise."""

    def __init__(self, total: int, label: str, stream=None, width: int = 30):
        self.total, self.label, self.width = total, label, width
        self.stream = stream or sys.stdout
        self.done = 0
        self.start = time.perf_counter()
        self.interactive = getattr(self.stream, "isatty", lambda: False)()

    def advance(self, what: str) -> None:
        self.done += 1
        filled = int(self.width * self.done / max(self.total, 1))
        elapsed = time.perf_counter() - self.start
        line = (f"{self.label} [{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total} "
                f"{elapsed:6.1f} s  {what}")
        line = printable(line, self.stream)
        if self.interactive:
            self.stream.write("\r" + line.ljust(100) + ("\n" if self.done == self.total else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def summary_table(results: list[StudentResult]) -> str:
    """A fixed-width table: student, assignment, score, review flag and the first reason."""
    header = f"{'student':<18} {'assignment':<18} {'score':>11} {'time':>7}  review"
    lines = [header, "-" * len(header)]
    for r in sorted(results, key=lambda r: (r.assignment, r.student)):
        reason = ("yes: " + "; ".join(r.notes))[:90] if r.notes else ""
        lines.append(f"{r.student:<18.18} {r.assignment:<18.18} {r.score:>5g}/{r.max_score:<5g} "
                     f"{r.seconds:>6.1f}s  {reason}")
    if results:
        flagged = sum(r.needs_review for r in results)
        lines.append(f"{len(results)} submissions graded, {flagged} marked for review")
    return "\n".join(lines)


def write_grades_csv(path: Path, rows: list[dict], notes: dict[tuple[str, str], list[str]],
                     lost: dict[tuple[str, str], dict[str, str]] | None = None) -> None:
    """nbgrader's export columns plus review_notes and lost_points (each cell below full marks and why);
    written to a temporary file, then renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".csv.partial")
    with partial.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for row in rows:
            key = (row["assignment"], row["student_id"])
            reasons = sorted((lost or {}).get(key, {}).items())
            line = {**row, "review_notes": " | ".join(map(str, notes.get(key, []))),
                    "lost_points": " | ".join(f"{cell} {why}" for cell, why in reasons)}
            # every value readable: one note holding a lone surrogate stopped the whole file
            writer.writerow({column: readable(value, None) if isinstance(value, str) else value
                             for column, value in line.items()})
    partial.replace(path)
