"""Run the visible checks of the course's notebooks, as "Run All" would, and say which exercises pass.

    python tools/check_notebooks.py                  # every chapter under notebooks/
    python tools/check_notebooks.py 02_collectives   # one chapter (folder name or notebook path)

Each notebook runs top to bottom in its own folder (errors do not stop it); every graded test cell is
then reported as passed or failed with its error message. Exit status 1 when any check fails.
The notebooks are read, never written: your answers and outputs stay as you left them.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"


def chapter_notebooks(names: list[str]) -> list[Path]:
    """The notebooks named (chapter folders or paths); every chapter's when none are."""
    if not names:
        return sorted(NOTEBOOKS.glob("*/*.ipynb"))
    found = []
    for name in names:
        path = Path(name)
        if path.suffix == ".ipynb" and path.is_file():
            found.append(path)
        elif (NOTEBOOKS / name).is_dir():
            found += sorted((NOTEBOOKS / name).glob("*.ipynb"))
        else:
            known = ", ".join(sorted(p.name for p in NOTEBOOKS.iterdir() if p.is_dir()))
            raise SystemExit(f"no chapter or notebook {name!r}: give a folder of notebooks/ ({known}) "
                             "or a path to a .ipynb file")
    return found


def _error_text(cell) -> str | None:
    errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    if not errors:
        return None
    error = errors[-1]
    value = str(error.get("evalue", "")).strip()
    return f"{error.get('ename')}: {value}" if value else str(error.get("ename"))


def check_notebook(path: Path, cell_timeout: float) -> list[tuple[str, str | None]]:
    """(test cell's grade_id, its error or None) for every graded test cell, after running the notebook."""
    notebook = nbformat.read(path, as_version=4)
    os.environ.setdefault("MPLBACKEND", "Agg")
    client = NotebookClient(notebook, timeout=cell_timeout, allow_errors=True,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    results = []
    for cell in notebook.cells:
        meta = cell.metadata.get("nbgrader") or {}
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            results.append((meta.get("grade_id", "?"), _error_text(cell)))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("chapters", nargs="*", help="chapter folders under notebooks/ or notebook paths")
    parser.add_argument("--cell-timeout", type=float, default=300, help="seconds one cell may run")
    args = parser.parse_args(argv)
    failed = 0
    for path in chapter_notebooks(args.chapters):
        results = check_notebook(path, args.cell_timeout)
        if not results:
            print(f"{path.stem}: no graded exercise")
            continue
        passed = sum(error is None for _, error in results)
        print(f"{path.stem}: {passed} of {len(results)} visible checks pass")
        for grade_id, error in results:
            if error is not None:  # the check's own first lines say what is wrong
                print(f"  FAIL {grade_id}: " + "\n    ".join(error.splitlines()[:3])[:600])
        failed += len(results) - passed
    if failed:
        print(f"{failed} visible check(s) fail: answer the exercises (cells with `YOUR CODE HERE`) and run "
              "this again. Passing every visible check does not guarantee full marks: the grader has more.")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
