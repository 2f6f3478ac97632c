"""Reading where a hung rank is blocked, from the stack dump the standard library's faulthandler writes.

Each rank registers faulthandler on a signal; on timeout the parent signals every live rank and turns
the dumps into one line per rank pointing at the student's own code (frames in torch, in course_lib's
machinery and in the standard library are skipped).
"""

from __future__ import annotations

import linecache
import os
import re
import sysconfig
from dataclasses import dataclass

_FRAME = re.compile(r'^\s+File "(?P<file>.*)", line (?P<line>\d+) in (?P<func>.*)$')
_THREAD = re.compile(r"^(Current thread|Thread) 0x[0-9a-fA-F]+")
_COURSE_LIB = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_MACHINERY_DIRS = tuple(os.path.join(_COURSE_LIB, name) + os.sep for name in ("real", "grading"))
_LIBRARY_DIRS = tuple({os.path.realpath(sysconfig.get_paths()[key]) + os.sep
                       for key in ("stdlib", "platstdlib", "purelib", "platlib")})
BOOTSTRAP_FILE = os.path.join(_COURSE_LIB, "real", "launch", "_child.py")


@dataclass(frozen=True)
class Frame:
    filename: str
    lineno: int
    function: str

    def describe(self) -> str:
        source = linecache.getline(self.filename, self.lineno).strip()
        where = f"{self.filename}:{self.lineno} in {self.function}()"
        return f"{where}: {source}" if source else where


def parse_faulthandler_dump(text: str) -> list[list[Frame]]:
    """The threads of one dump, each a list of frames, most recent call first (faulthandler's order)."""
    threads: list[list[Frame]] = []
    for line in text.splitlines():
        if _THREAD.match(line):
            threads.append([])
            continue
        match = _FRAME.match(line)
        if match and threads:
            threads[-1].append(Frame(match["file"], int(match["line"]), match["func"]))
    return threads


def is_user_frame(frame: Frame) -> bool:
    """False for torch, course_lib's own machinery (real, grading) and the standard library."""
    path = frame.filename
    if path.startswith("<") and path.endswith(">"):
        return path not in ("<frozen runpy>",) and not path.startswith("<frozen ")
    real = os.path.realpath(path)
    if real.startswith(_MACHINERY_DIRS) or os.path.abspath(path).startswith(_MACHINERY_DIRS):
        return False
    return not real.startswith(_LIBRARY_DIRS)


def blocked_line(dump: str) -> str:
    """One line saying where the rank's main thread waits: the innermost frame of user code."""
    threads = parse_faulthandler_dump(dump)
    if not threads:
        return "no stack could be read (the rank did not answer the stack-dump signal)"
    main = next((t for t in threads if any(f.filename == BOOTSTRAP_FILE for f in t)), threads[-1])
    user = next((frame for frame in main if is_user_frame(frame)), None)
    if user is not None:
        return user.describe()
    innermost = main[0] if main else None
    return f"outside your code, in {innermost.describe()}" if innermost else "no Python frame"
