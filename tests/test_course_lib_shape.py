"""course_lib keeps the developers' guide's shape: files under 300 lines, functions under 60, each module
saying what it is for. (That ruff sees every course_lib file is tests/test_lint_coverage.py's check.)
"""

import ast
from pathlib import Path

import pytest

COURSE_LIB = Path(__file__).resolve().parent.parent / "course_lib"
MAX_FILE_LINES = 300
MAX_FUNCTION_LINES = 60   # from the `def` line to the last line of the body, docstring included
SOURCES = sorted(p for p in COURSE_LIB.rglob("*.py") if "__pycache__" not in p.parts)


def _name(path: Path) -> str:
    return str(path.relative_to(COURSE_LIB.parent))


def _functions(tree: ast.AST):
    """Every function and method, nested ones included, with its length in lines."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node, node.end_lineno - node.lineno + 1


def test_sources_found():
    assert len(SOURCES) > 50, f"found only {len(SOURCES)} course_lib sources under {COURSE_LIB}"


def test_every_file_is_under_300_lines():
    lengths = {_name(p): len(p.read_text().splitlines()) for p in SOURCES}
    long = {name: n for name, n in lengths.items() if n > MAX_FILE_LINES}
    assert not long, f"files over {MAX_FILE_LINES} lines (split them by what they do): {long}"


def test_every_function_is_under_60_lines():
    long = [f"{_name(p)}:{node.lineno} {node.name} ({n} lines)" for p in SOURCES
            for node, n in _functions(ast.parse(p.read_text())) if n > MAX_FUNCTION_LINES]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines (split them into named steps): {long}"


def test_every_module_says_what_it_is_for():
    missing = [_name(p) for p in SOURCES if not ast.get_docstring(ast.parse(p.read_text()))]
    assert not missing, f"modules without a docstring saying what the file is for: {missing}"


@pytest.mark.parametrize("source, expected", [
    ("def f():\n    return 1\n", 2),
    ("class A:\n    def m(self):\n        '''doc'''\n\n        return 1\n", 4),
])
def test_function_length_counts_from_def_to_last_line(source, expected):
    assert [n for _, n in _functions(ast.parse(source))] == [expected]
