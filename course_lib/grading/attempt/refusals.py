"""What an exercise's answer may not use, refused by what the student's code runs, whatever path reached it.

An exercise declares a ``Refusal``: all of course_lib (the checks call the student's code; the student's
code never needs the course's), torch's own implementation of the exercise (modules and single
functions), and why. ``arm(refusal)`` sets it in the child process that runs student code, before any
student code runs: every Python frame that starts is classified by its code, and refused code whose
nearest caller outside the Python library is the student's own code raises ``RefusedCodeError``. That
covers ``import``, ``importlib``, ``sys.modules``, attribute chains from an allowed module, function or
code objects copied from a refused module (their code still says where it comes from; a copy under
another file name still equals the original) and code run at definition time. What the student hands
the checks as their answer is checked too (``refused_object``: a refused function, a subclass of
torch's own class). A refusal the student's code catches is still recorded (``check_not_refused``).
"""

from __future__ import annotations

import builtins
import functools
import importlib
import linecache
import sys
import threading
import types
from pathlib import Path

from course_lib.grading.attempt.refused_code import (
    ALWAYS_ALLOWED,
    COURSE,
    COURSE_ONLY,
    HIDDEN_CHECKS,
    LESSON_IMPORTS,
    STUDENT_FILES,
    Armed,
    Refusal,
    RefusedCodeError,
    c_function_key,
    course_refused,
    fingerprint,
    work_out,
)

_ARMED: Armed | None = None

__all__ = ["LESSON_IMPORTS", "Refusal", "RefusedCodeError", "arm", "check_not_refused", "prepare",
           "refused_object", "watch_namespace"]

# -- watching what runs --------------------------------------------------------------------------------
def _kind(state: Armed, path: str) -> str:
    """Who a frame of code from ``path`` acts for, when finding who called refused code:

    "student" (the submitted cells, a notebook's cells); "trusted" (the course's own machinery: every
    course_lib file the exercise refuses, the lesson's import lines): a call it makes is the course's;
    "transparent" (the Python library, the course_lib files the answer may use, the instructor's hidden
    checks): it acts for whoever called it, so the walk goes on; "other" (code generated at run time, a
    dataclass's __init__): the student's when it runs in the student's namespace, else transparent.
    """
    kind = state.kinds.get(path)
    if kind is None:
        if path == LESSON_IMPORTS:
            kind = "trusted"
        elif path.startswith(COURSE + "/"):
            refused = course_refused(path, ALWAYS_ALLOWED + state.refusal.allowed)
            kind = "trusted" if refused else "transparent"
        elif path.startswith(("<frozen", *state.library, *state.trusted)):
            kind = "transparent"
        elif path in STUDENT_FILES or _notebook_cell(path):
            kind = "student"
        else:
            kind = "other"
        state.kinds[path] = kind
    return kind


def _notebook_cell(path: str) -> bool:
    """IPython compiles each cell under a file name that no file on disk has, and keeps its lines."""
    return not path.startswith("<") and not Path(path).exists() and bool(linecache.getlines(path))


def _label(state: Armed, code: types.CodeType):
    """(what, origin) when the exercise refuses this code, else None; worked out once per code object."""
    entry = state.labels.get(id(code))
    if entry is not None:
        return entry[1]
    path, label = code.co_filename, None
    origin = state.refused_files.get(path)
    if origin is None and course_refused(path, ALWAYS_ALLOWED + state.refusal.allowed):
        origin = "course_lib"
    if origin is None and path.startswith(state.trusted) and state.trusted:
        # the checks' own code runs the student's; the student's code never runs theirs (a check's
        # expected-answer function, found in sys.modules of a child forked from the judge)
        origin = HIDDEN_CHECKS
    if origin is not None:
        label = (f"{code.co_qualname} from {origin}", origin)
    elif id(code) in state.original_ids:
        label = state.refused_codes[code]
    elif _kind(state, path) in ("student", "other"):
        copied = None if code.co_name.startswith("<") else state.fingerprints.get(fingerprint(code))
        if copied:
            label = (f"a copy of {copied[0]}", copied[1])
    state.labels[id(code)] = (code, label)   # the code kept alive, so that its id stays its own
    return label


def _student_called(state: Armed, frame) -> bool:
    """Whether the nearest caller that acts for someone (see _kind) is the student's code."""
    while frame is not None:
        kind = _kind(state, frame.f_code.co_filename)
        if kind == "other":
            kind = "student" if id(frame.f_globals) in state.student_globals else "transparent"
        if kind != "transparent":
            return kind == "student"
        frame = frame.f_back
    return False


def _refuse(state: Armed, label: tuple) -> None:
    message = state.refusal.message(*label)
    state.refused.append(message)
    raise RefusedCodeError(message)


def _trace(frame, event, arg):
    state = _ARMED
    if state is not None:
        label = _label(state, frame.f_code)
        if label is not None and (label[0].startswith("a copy of ") or _student_called(state, frame.f_back)):
            _refuse(state, label)
    return None


def _profile(frame, event, arg):
    """torch's C++ entry points an exercise refuses, called by the student's code itself: a builtin starts
    no Python frame, so the trace above never sees it; the profile hook's c_call event does."""
    state = _ARMED
    if event == "c_call" and state is not None:
        dotted = state.c_functions.get(c_function_key(arg))
        if dotted is not None and _student_called(state, frame):
            _refuse(state, (dotted, dotted.rsplit(".", 1)[0]))


_import = builtins.__import__
_import_module = importlib.import_module


def _refuse_course_import(name: str, caller) -> None:
    state = _ARMED
    if state is not None and (name == "course_lib" or name.startswith("course_lib.")) \
            and _student_called(state, caller):
        _refuse(state, (f"import {name}", "course_lib"))


def _guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
    if level == 0:
        _refuse_course_import(name, sys._getframe(1))
    return _import(name, globals, locals, fromlist, level)


def _guarded_import_module(name, package=None):
    _refuse_course_import(name, sys._getframe(1))
    return _import_module(name, package)


# -- the public side -------------------------------------------------------------------------------------
_PREPARED: dict[tuple, Armed] = {}


def prepare(refusal: Refusal | None, trusted_folders=()) -> Armed:
    """What ``refusal`` refuses, worked out once per process: a check prepares it before it forks, so
    that every rank it forks arms it at once (working it out takes about 0.2 s)."""
    key = (refusal or COURSE_ONLY, tuple(str(f) for f in trusted_folders))
    if key not in _PREPARED:
        _PREPARED[key] = work_out(*key)
    return _PREPARED[key]


def arm(refusal: Refusal | None, trusted_folders=()) -> None:
    """From now on in this process (a child that runs student code), refuse what ``refusal`` refuses.

    Arming twice keeps the first refusal: a process runs one exercise's answer."""
    global _ARMED
    if _ARMED is not None:
        return
    _ARMED = prepare(refusal, trusted_folders)
    builtins.__import__ = _guarded_import
    importlib.import_module = _guarded_import_module
    threading.settrace(_trace)
    sys.settrace(_trace)
    if _ARMED.c_functions:   # only where a refusal names C entry points: a profile hook costs every call
        threading.setprofile(_profile)
        sys.setprofile(_profile)


def watch_namespace(namespace: dict) -> None:
    """The student's code runs in ``namespace`` (code it generates there counts as the student's)."""
    if _ARMED is not None:
        _ARMED.student_globals.add(id(namespace))


def refused_object(value) -> str | None:
    """What is refused in an answer the student hands the checks, or None: a refused function (or a copy),
    a class that inherits or holds refused code (a subclass of torch's own ZeroRedundancyOptimizer)."""
    state = _ARMED
    if state is None:
        return None
    if isinstance(value, functools.partial):
        return refused_object(value.func)
    if isinstance(value, types.MethodType):
        value = value.__func__
    if isinstance(value, types.FunctionType):
        label = _label(state, value.__code__)
        wrapped = getattr(value, "__wrapped__", None)   # a decorated function: what it wraps counts
        if label is None and wrapped is not None and wrapped is not value:
            return refused_object(wrapped)
        return state.refusal.message(*label) if label else None
    if not isinstance(value, type):
        return refused_object(type(value)) if callable(value) else None
    for klass in value.__mro__:
        for member in vars(klass).values():
            found = refused_object(member) if isinstance(member, (types.FunctionType, functools.partial)) \
                else None
            if found:
                return found
    return None


def refusals_so_far() -> int:
    """How many refusals this process has met: a mark for `forget_refusals_since`."""
    return len(_ARMED.refused) if _ARMED is not None else 0


def forget_refusals_since(mark: int) -> None:
    """Drop the refusals met since ``mark``: a notebook cell stopped by its own refused import defined
    nothing past that line, so it costs only the answers it defines, never those of other cells."""
    if _ARMED is not None:
        del _ARMED.refused[mark:]


def check_not_refused() -> None:
    """Raise RefusedCodeError if anything was refused in this process (even a refusal the student's code
    caught), or if the student's code switched the watch off."""
    state = _ARMED
    if state is None:
        return
    if state.refused:
        raise RefusedCodeError(state.refused[0])
    if sys.gettrace() is not _trace or (state.c_functions and sys.getprofile() is not _profile):
        raise RefusedCodeError(f"{state.refusal.exercise} switched off the grader's watch over what it runs "
                               "(sys.settrace, sys.setprofile): the checks refuse an answer that does")
