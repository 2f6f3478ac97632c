"""What a graded notebook prints names the course's paths relative to the course, never where the
instructor's checkout or the grading run's scratch folder lives (issue 58): a traceback through course_lib
reads `course_lib/real/ranks.py`, a file the student's code wrote reads as it does beside their notebook.

Applied to every output of the autograded notebook (stream text, error tracebacks and values, text in
display data) before it is kept and turned into feedback.
"""

from __future__ import annotations

import re
from pathlib import Path


def replacements(code_root: Path, run_dir: Path, student: str, assignment: str) -> list[tuple[str, str]]:
    """(absolute prefix, what it reads as), longest first: the student's notebook folder in the grading
    run (its kernel's working folder), the rest of the run's private course, then the checkout."""
    notebook_folder = run_dir / "autograded" / student / assignment
    pairs = [(f"{notebook_folder}/", ""), (str(notebook_folder), "."), (f"{run_dir}/", ""),
             (f"{code_root}/", ""), (str(code_root), ".")]
    for real, shown in list(pairs):   # the same folders reached through a symlink (/tmp on some systems)
        resolved = str(Path(real.rstrip("/")).resolve()) + ("/" if real.endswith("/") else "")
        if resolved != real:
            pairs.append((resolved, shown))
    return sorted(pairs, key=lambda pair: -len(pair[0]))


def _relative(text: str, pairs: list[tuple[str, str]]) -> str:
    for real, shown in pairs:
        if real in text:
            # a folder named without its trailing slash only where its name ends (not /course in /course2)
            ending = "" if real.endswith("/") else r"(?![\w.\-])"
            text = re.sub(re.escape(real) + ending, lambda _, shown=shown: shown, text)
    return text


def make_relative(notebook, pairs: list[tuple[str, str]]) -> None:
    """Rewrite, in place, every absolute path of ``pairs`` in the notebook's outputs."""
    for cell in notebook.get("cells", []):
        for output in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            if isinstance(output.get("text"), str):
                output["text"] = _relative(output["text"], pairs)
            if isinstance(output.get("evalue"), str):
                output["evalue"] = _relative(output["evalue"], pairs)
            if isinstance(output.get("traceback"), list):
                output["traceback"] = [_relative(line, pairs) if isinstance(line, str) else line
                                       for line in output["traceback"]]
            data = output.get("data") or {}
            for mimetype, value in data.items():
                if mimetype.startswith("text/") and isinstance(value, str):
                    data[mimetype] = _relative(value, pairs)
