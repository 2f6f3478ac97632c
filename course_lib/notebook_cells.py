"""The one reader of a notebook's nbgrader cells: its answer (solution) cells and any cell by grade_id.

Graders, fixtures, the isolated judge and the lessons that reuse a student's earlier answers (chapter 03's
ring, chapter 08's capstone) all read cells through here, from a path or an already-read notebook.
"""

from __future__ import annotations

import ast
import re
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

KEPT_STATEMENTS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                   ast.Assign, ast.AnnAssign)
SOLUTION_MARKERS = re.compile(r"^\s*### (BEGIN|END) SOLUTION\s*$\n?", re.MULTILINE)
# A line as Python's parser counts lines (ast._splitlines_no_ff): \r\n, \r or \n ends it; \f does not.
PYTHON_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")
# The longest answer cell the grader parses: the course's longest is 8 KB; a bigger cell is no answer.
MAX_DEFINITIONS_CHARS = 256 * 1024
# The definitions of the sources asked for lately (graders run in threads), up to 64 MiB of text: a
# submission's answer cells (20 MiB at most) are parsed once, not once per registered test cell.
_RECENT: dict[str, str] = {}
_RECENT_LOCK = threading.Lock()
_recent_chars = 0
MAX_RECENT_CHARS = 64 * 1024**2
TOO_LONG = ("this answer cell is {size} characters long, over the grader's limit of {limit}: the grader does "
            "not run it")


def read_notebook(notebook):
    """A notebook (nbformat node or plain dict) as given, or read from a path."""
    if isinstance(notebook, (str, Path)):
        import nbformat

        return nbformat.read(str(notebook), as_version=4)
    return notebook


def marks(cell) -> dict:
    """The cell's nbgrader metadata (empty for a cell nbgrader does not manage)."""
    return cell.get("metadata", {}).get("nbgrader") or {}


def _source(cell) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def answer_cells(notebook) -> Iterator[tuple[str, str]]:
    """(grade_id, source) of every answer cell (nbgrader ``solution``), in notebook order."""
    for cell in read_notebook(notebook).get("cells", []):
        if marks(cell).get("solution") and marks(cell).get("grade_id"):
            yield marks(cell)["grade_id"], _source(cell)


def answer_ids(notebook) -> list[str]:
    return [grade_id for grade_id, _ in answer_cells(notebook)]


def answer_sources(notebook, strip_markers: bool = False) -> dict[str, str]:
    """grade_id -> source of every answer cell; ``strip_markers`` drops ``### BEGIN/END SOLUTION``."""
    return {grade_id: SOLUTION_MARKERS.sub("", source) if strip_markers else source
            for grade_id, source in answer_cells(notebook)}


def sources_by_id(notebook, grade_ids: Sequence[str], answers_only: bool = False) -> list[str]:
    """The sources of the cells named ``grade_ids``, in that order; a missing one raises KeyError naming it.

    ``answers_only`` looks only at answer cells (a student's own code, never a lesson's cell)."""
    notebook = read_notebook(notebook)
    found = {marks(cell).get("grade_id"): _source(cell) for cell in notebook.get("cells", [])
             if marks(cell).get("grade_id") and (marks(cell).get("solution") or not answers_only)}
    missing = [grade_id for grade_id in grade_ids if grade_id not in found]
    if missing:
        raise KeyError(f"the notebook has no {'answer ' if answers_only else ''}cell with grade_id "
                       f"{', '.join(map(repr, missing))}; is it the right chapter's notebook?")
    return [found[grade_id] for grade_id in grade_ids]


def _patches(node: ast.stmt) -> bool:
    """An assignment to an attribute or item (torch.allclose = ..., module.check = ...): a monkeypatch."""
    if isinstance(node, ast.Assign):
        return any(not isinstance(target, ast.Name) for target in node.targets)
    if isinstance(node, ast.AnnAssign):
        return not isinstance(node.target, ast.Name)
    return False


def source_segments(text: str, nodes) -> list[str]:
    """Each node's text, as ``ast.get_source_segment`` gives it, in time linear in the text: that
    function splits the whole text again for every node, so a cell of n statements cost n² (a 32 KB cell
    of ``a = 1`` lines took the grading parent 170 s of CPU). Column offsets are UTF-8 byte offsets."""
    encoded = [line.encode() for line in PYTHON_LINE.findall(text)]
    segments = []
    for node in nodes:
        first, last = node.lineno - 1, node.end_lineno - 1
        if first == last:
            segments.append(encoded[first][node.col_offset:node.end_col_offset].decode())
        else:
            segments.append(b"".join([encoded[first][node.col_offset:], *encoded[first + 1:last],
                                      encoded[last][:node.end_col_offset]]).decode())
    return segments


def definitions_only(source: str) -> str:
    """Top-level definitions of a cell; calls, prints, magics and loops are dropped.

    A cell over MAX_DEFINITIONS_CHARS is not parsed (the parser's tree of a 1 MB cell takes hundreds of
    MB): its definitions are one line that raises, so the answer fails with the reason. The grader asks
    again for every answer cell once per registered test cell: each source is parsed once (_RECENT)."""
    with _RECENT_LOCK:
        kept = _RECENT.get(source)
    if kept is None:
        kept = _definitions(source)
        _remember(source, kept)
    return kept


def _remember(source: str, kept: str) -> None:
    """Keep the latest sources' definitions, at most MAX_RECENT_CHARS of text in all (oldest out first)."""
    global _recent_chars
    with _RECENT_LOCK:
        if source not in _RECENT:
            _RECENT[source] = kept
            _recent_chars += len(source) + len(kept)
        while _recent_chars > MAX_RECENT_CHARS and _RECENT:
            oldest = next(iter(_RECENT))
            _recent_chars -= len(oldest) + len(_RECENT.pop(oldest))


def _definitions(source: str) -> str:
    if len(source) > MAX_DEFINITIONS_CHARS:
        return f"raise ValueError({TOO_LONG.format(size=len(source), limit=MAX_DEFINITIONS_CHARS)!r})\n"
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    text = "\n".join(lines)
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text  # executing it reports the syntax error to the student, as the kernel did
    kept = [node for node in tree.body if isinstance(node, KEPT_STATEMENTS) and not _patches(node)]
    return "\n".join(source_segments(text, kept))


def lesson_imports(notebook) -> str:
    """The import lines of the lesson's own code cells (neither answers nor graded tests), in order: what
    an answer may rely on without importing it, as it did in the notebook."""
    lines = []
    for cell in read_notebook(notebook).get("cells", []):
        if cell.get("cell_type") != "code" or marks(cell).get("solution") or marks(cell).get("grade"):
            continue
        text = "\n".join(line for line in _source(cell).splitlines()
                         if not line.lstrip().startswith(("%", "!")))   # magics are not Python
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        lines += source_segments(text, [node for node in tree.body
                                        if isinstance(node, (ast.Import, ast.ImportFrom))])
    return "\n".join(dict.fromkeys(lines)) + ("\n" if lines else "")
