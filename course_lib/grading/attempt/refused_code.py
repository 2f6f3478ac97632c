"""What an exercise's refusal refuses, worked out once: the files of refused modules, the code objects of
refused functions and classes (to recognise a copy), and the paths of the Python library and the checks.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import sysconfig
import types
from dataclasses import dataclass, field
from pathlib import Path

import course_lib
from course_lib.real.launch.errors import ForbiddenCallError

COURSE = str(Path(course_lib.__file__).resolve().parent)
# course_lib files the student's code may run: what the checks hand it (a model defined in a check, the
# course's models), the recorder that stands in for torch.distributed's calls (and its byte counts), and
# this machinery. They act for whoever calls them: a refused call they make for the student's code is the
# student's.
ALWAYS_ALLOWED = ("models.py", "real/record/traffic_log.py", "real/record/traffic_sizes.py",
                  "real/launch/errors.py", "grading/attempt/", "grading/checks/", "notebook_cells.py")
COURSE_WHY = ("the answer may not use course_lib, the course's own code: the checks call your code, and "
              "your code never needs the course's")
LESSON_IMPORTS = "<lesson imports>"      # the file name the release's own import lines run under
STUDENT_FILES = ("<student cells>", "<your notebook's answer cells>")   # what answers are compiled as
HIDDEN_CHECKS = "the grader's hidden checks"   # the origin of refused code in the hidden-check folders
HIDDEN_WHY = ("the answer may not run the grader's hidden checks: they hold the expected answers, which "
              "only the grader computes")


class RefusedCodeError(ForbiddenCallError):
    """The student's code ran something the exercise refuses (course_lib, or torch's own implementation)."""


@dataclass(frozen=True)
class Refusal:
    """What an exercise's answer may not run, beyond all of course_lib, and why."""

    exercise: str                        # how feedback names the answer, e.g. "your DDP"
    modules: tuple[str, ...] = ()        # torch modules (and their sub-modules) the answer may not run
    functions: tuple[str, ...] = ()      # single functions or classes, e.g. "torch.autograd.grad"
    why: str = "the exercise is to write it yourself"
    allowed: tuple[str, ...] = ()        # course_lib files (under course_lib/) the check hands the answer
    # torch's C++ entry points (builtins, no Python frame: "torch._C._set_grad_enabled", a method as
    # "torch._C._ImperativeEngine.run_backward"), refused when the student's code calls them itself
    c_functions: tuple[str, ...] = ()

    def message(self, what: str, origin: str) -> str:
        reason = {"course_lib": COURSE_WHY, HIDDEN_CHECKS: HIDDEN_WHY}.get(
            origin, f"it is PyTorch's own implementation ({origin}): {self.why}")
        return f"{self.exercise} ran {what}, which this exercise refuses: {reason}"


COURSE_ONLY = Refusal("your answer")    # what every exercise refuses at least


@dataclass
class Armed:
    """An exercise's refusal worked out: what is refused, and the caches of the watch over what runs."""

    refusal: Refusal
    refused_files: dict[str, str]        # file -> where it comes from ("course_lib", "torch.nn.parallel")
    refused_codes: dict                  # code object (compared by content) -> (name, origin)
    library: tuple[str, ...]             # path prefixes of the Python installation (stdlib, site-packages)
    trusted: tuple[str, ...]             # folders of the instructor's hidden checks: the checks' own code
    student_globals: set[int] = field(default_factory=set)   # ids of the student's namespaces
    kinds: dict[str, str] = field(default_factory=dict)      # file -> library|generated|course|student
    labels: dict[int, tuple] = field(default_factory=dict)   # id(code) -> (code, (name, origin) or None)
    refused: list[str] = field(default_factory=list)
    c_functions: dict[tuple, str] = field(default_factory=dict)   # c_function_key -> its dotted name

    def __post_init__(self):
        self.original_ids = {id(code) for code in self.refused_codes}
        # A copy renamed (code.replace(co_name=..., co_filename=...)) keeps its instructions, names and
        # constants. Only whole functions are compared: nested comprehensions are too alike to prove one.
        self.fingerprints = {fingerprint(code): label for code, label in self.refused_codes.items()
                             if not code.co_name.startswith("<")
                             and len(code.co_code) >= MIN_FINGERPRINT_BYTES}


# Shorter bodies are too common to prove a copy: a student's own two-line GPipe order is, instruction for
# instruction, the capstone stand-in's placeholder (58 bytes); what a copy would steal is far longer.
MIN_FINGERPRINT_BYTES = 96


def fingerprint(code: types.CodeType) -> tuple:
    """What a copy keeps whatever it is renamed: instructions, names, constants (nested code's too)."""
    constants = tuple(fingerprint(c) if isinstance(c, types.CodeType) else repr(c) for c in code.co_consts)
    return code.co_code, code.co_names, code.co_varnames, constants


def _module_files(module: types.ModuleType) -> list[str]:
    if hasattr(module, "__path__"):     # a package: every Python file under it
        return [str(p.resolve()) for folder in module.__path__ for p in Path(folder).rglob("*.py")]
    return [str(Path(module.__file__).resolve())] if getattr(module, "__file__", None) else []


def _codes_of(value, seen: set, into: dict, label: tuple, home: frozenset) -> None:
    """Every code object a function or class written in ``home`` (its files) holds: methods, nested
    functions, what a decorator wraps. Code from elsewhere (the decorator's own wrapper, a base class's
    methods, code generated at run time: a NamedTuple's __new__) is not this object's to refuse."""
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, types.CodeType):
        if value.co_filename in home:
            into[value] = label
            for const in value.co_consts:
                _codes_of(const, seen, into, label, home) if isinstance(const, types.CodeType) else None
    elif isinstance(value, types.FunctionType):
        _codes_of(value.__code__, seen, into, label, home)
        if getattr(value, "__wrapped__", None) is not None:
            _codes_of(value.__wrapped__, seen, into, label, home)
    elif isinstance(value, (staticmethod, classmethod)):
        _codes_of(value.__func__, seen, into, label, home)
    elif isinstance(value, property):
        for part in (value.fget, value.fset):
            _codes_of(part, seen, into, label, home) if part is not None else None
    elif isinstance(value, type):
        for member in vars(value).values():
            _codes_of(member, seen, into, label, home)


def _home(path) -> frozenset:
    """A source file as code objects may name it: as imported, and with links resolved."""
    return frozenset({str(path), str(Path(path).resolve())}) if path else frozenset()


def _defined_here(module: types.ModuleType, into: dict, seen: set, origin: str) -> None:
    home = _home(getattr(module, "__file__", None))
    for value in list(vars(module).values()):
        if getattr(value, "__module__", None) == module.__name__:
            label = (f"{module.__name__}.{getattr(value, '__qualname__', '?')}", origin)
            _codes_of(value, seen, into, label, home)


def _home_of(value) -> frozenset:
    """The file a single refused function or class is written in."""
    target = inspect.unwrap(value) if callable(value) else value
    code = getattr(target, "__code__", None)
    if code is not None:
        return _home(code.co_filename)
    try:
        return _home(inspect.getsourcefile(target))
    except TypeError:
        return frozenset()


def _import_object(dotted: str):
    """``torch.autograd.grad`` -> the object: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        for attribute in parts[end:]:
            value = getattr(value, attribute)
        return value
    raise ValueError(f"a refusal names {dotted!r}, which does not import")


def c_function_key(function) -> tuple | None:
    """(the module or class that defines it, its name) for a builtin function or method, bound or not:
    what a profile hook's c_call event is compared by (``Variable._execution_engine.run_backward``, a bound
    method, and ``torch._C._ImperativeEngine.run_backward``, its descriptor, give the same key)."""
    name = getattr(function, "__name__", None)
    owner = getattr(function, "__objclass__", None)
    if owner is None:
        bound = getattr(function, "__self__", None)
        if bound is None or isinstance(bound, types.ModuleType):
            return (getattr(bound, "__name__", None) or getattr(function, "__module__", None), name)
        owner = getattr(getattr(type(bound), name, None), "__objclass__", type(bound))
    return (f"{owner.__module__}.{owner.__qualname__}", name)


def course_refused(path: str, allowed: tuple[str, ...]) -> bool:
    return path.startswith(COURSE + "/") and not path[len(COURSE) + 1:].startswith(allowed)


def work_out(refusal: Refusal, trusted_folders) -> Armed:
    files: dict[str, str] = {}
    codes: dict = {}
    seen: set = set()
    for name in refusal.modules:
        module = importlib.import_module(name)   # its own code runs now, not under the watch
        for sub_name, sub in list(sys.modules.items()):
            if sub_name == name or sub_name.startswith(name + "."):
                files.update(dict.fromkeys(_module_files(sub), name))
                _defined_here(sub, codes, seen, name)
    for dotted in refusal.functions:
        value = _import_object(dotted)
        _codes_of(value, seen, codes, (dotted, dotted.rsplit(".", 1)[0]), _home_of(value))
    allowed = ALWAYS_ALLOWED + refusal.allowed
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if name.startswith("course_lib.") and path and course_refused(str(Path(path).resolve()), allowed):
            _defined_here(module, codes, seen, "course_lib")
    library = tuple(str(Path(sysconfig.get_paths()[key]).resolve()) + "/"
                    for key in ("stdlib", "platstdlib", "purelib", "platlib"))
    trusted = tuple(str(Path(folder).resolve()) + "/" for folder in trusted_folders)
    c_functions = {c_function_key(_import_object(dotted)): dotted for dotted in refusal.c_functions}
    return Armed(refusal, files, codes, library, trusted, c_functions=c_functions)


