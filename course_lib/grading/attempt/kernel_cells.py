"""A notebook's answer re-made from its own cells, in the child that runs it for a visible check.

In a notebook the check receives the function (or class) itself, made when its cell ran, before any
refusal existed. The child re-runs the definitions of that cell and of the cells of every notebook
function or class it names, in a copy of the notebook's namespace, under the exercise's refusal: what the
isolated judge does with the submitted cells, so the notebook says what the grader will say.
"""

from __future__ import annotations

import dis
import functools
import linecache
import os
import types

from course_lib.notebook_cells import definitions_only


def _codes(value) -> list[types.CodeType]:
    """The code objects a function, partial or class (its methods) was made from."""
    if isinstance(value, functools.partial):
        return _codes(value.func)
    if isinstance(value, (types.FunctionType, types.MethodType)):
        return [getattr(value, "__func__", value).__code__]
    if isinstance(value, type):
        return [member.__code__ for member in vars(value).values() if isinstance(member, types.FunctionType)]
    return []


def _cell(code: types.CodeType) -> str | None:
    """The file name of the notebook cell ``code`` was compiled from (IPython keeps its source in linecache
    under a name no file on disk has), else None."""
    name = code.co_filename
    if os.path.exists(name) or not linecache.getlines(name):
        return None
    return name


GLOBAL_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_NAME"})


def _names(code: types.CodeType) -> set[str]:
    """The global names ``code`` reads (not attribute names: ``t.nbytes`` is not the notebook's nbytes)."""
    names = {instruction.argval for instruction in dis.get_instructions(code)
             if instruction.opname in GLOBAL_LOADS}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def notebook_cells(value, namespace: dict) -> list[str]:
    """The cells (file names) defining ``value`` and every notebook function or class it names, the
    ones it depends on first."""
    cells, pending, seen = [], [value], set()
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        for code in _codes(current):
            cell = _cell(code)
            if cell is None:
                continue
            if cell not in cells:
                cells.insert(0, cell)
            pending += [namespace[n] for n in _names(code) if _codes(namespace.get(n))]
    own = [c for c in (_cell(code) for code in _codes(value)) if c]
    return [c for c in cells if c not in own] + [c for c in cells if c in own]


def namespace_of(value) -> dict | None:
    """The globals a notebook function (or a class's first method) runs in: the notebook's namespace."""
    members = list(vars(value).values()) if isinstance(value, type) else []
    for holder in (value, getattr(value, "func", None), *members):
        holder = getattr(holder, "__func__", holder)
        if isinstance(holder, types.FunctionType):
            return holder.__globals__
    return None


def redefined(value, name: str, watch=lambda namespace: None):
    """``value`` made again from its notebook cells (definitions only) in a copy of its namespace; ``value``
    itself when it was not made in a notebook cell (a test file, a module)."""
    namespace = namespace_of(value)
    cells = notebook_cells(value, namespace) if namespace is not None else []
    if not cells:
        return value
    fresh = dict(namespace)
    watch(fresh)
    for cell in cells:
        exec(compile(definitions_only("".join(linecache.getlines(cell))), cell, "exec"), fresh)
    return fresh.get(name, fresh.get(getattr(value, "__name__", name), value))
