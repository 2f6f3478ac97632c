"""course_lib.real is the only part of course_lib that starts, execs or kills processes (DESIGN.md).

Everything else goes through ``course_lib.real.plumbing.processes`` (a call in a fresh child, sessions,
exec, the reapers) or ``run_ranks``; a new ``import subprocess`` or ``os.fork()`` elsewhere fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COURSE_LIB = ROOT / "course_lib"
PROCESS_MODULES = {"subprocess", "multiprocessing", "pty"}
PROCESS_CALLS = {"fork", "forkpty", "system", "popen", "kill", "killpg", "posix_spawn", "posix_spawnp"}
PROCESS_PREFIXES = ("exec", "spawn")


def process_starts(path: Path) -> list[str]:
    """Each place in ``path`` that imports a process module or calls os.fork/exec*/spawn*/kill and kin."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [(node.module or "").split(".")[0]]
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os"
              and (node.attr in PROCESS_CALLS or node.attr.startswith(PROCESS_PREFIXES))):
            names = [f"os.{node.attr}"]
        else:
            continue
        found += [f"{path.name}:{node.lineno}: {name}" for name in names
                  if name in PROCESS_MODULES or name.startswith("os.")]
    return found


def test_only_course_lib_real_starts_processes():
    outside = [path for path in sorted(COURSE_LIB.rglob("*.py"))
               if "real" not in path.relative_to(COURSE_LIB).parts[:1]]
    assert [line for path in outside for line in process_starts(path)] == []


def test_the_scan_sees_each_way_of_starting_a_process(tmp_path):
    planted = tmp_path / "launcher.py"
    planted.write_text("import os\nimport subprocess\nfrom multiprocessing import Process\nos.fork()\n"
                       "os.execv('x', [])\nos.getpid()\n")
    found = process_starts(planted)
    assert [line.rsplit(": ", 1)[1] for line in found] == ["subprocess", "multiprocessing", "os.fork",
                                                           "os.execv"]
