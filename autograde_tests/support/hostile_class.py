"""The probe class of broken and hostile submissions: one student per case, built from the release.

Each case is {grade_id: source} for the solution cells it changes (the rest stay unanswered), or a
function that writes the submission folder itself (invalid JSON, renamed, missing, tampered cells).
"""

from __future__ import annotations

import copy
import socket
from pathlib import Path

import nbformat

from autograde_tests.support import probe_course
from course_lib.grading.autograder import fixtures
from course_lib.grading.sandbox.policy import running_as_root

SCALE, RING = probe_course.SCALE_SOLUTION, probe_course.RING_SOLUTION
WRONG_SCALE = "def scale(values, factor):\n    return [v + factor for v in values]\n"
WRONG_RING = "def ring_pass(rank, world_size, value):\n    return value\n"
DEADLOCK_RING = """def ring_pass(rank, world_size, value):
    incoming = torch.zeros(1)
    dist.recv(incoming, (rank - 1) % world_size)   # every rank waits; nobody sends
    return float(incoming[0])
"""

# Hostile code that tries to leave its sandbox; {root} is the course folder of the test.
SNOOP = '''import glob, os
stolen = []
for pattern in ["{root}/solutions/*/*.ipynb", "{root}/grading/**/*.ipynb",
                "/tmp/course-grading-*/*/source/*/*.ipynb",
                "/tmp/course-grading-*/course-*/autograded/*/*/*.ipynb", "{root}/grading/gradebook.db"]:
    stolen += glob.glob(pattern, recursive=True)
print("SNOOP found", len(stolen), "files")
for path in stolen:
    if path.endswith(".ipynb") and "snoop" not in path:
        try:
            for cell in __import__("json").load(open(path))["cells"]:
                if "def scale" in "".join(cell["source"]):
                    exec("".join(cell["source"]))
        except Exception as error:
            print("SNOOP could not read", path, error)
'''
VANDAL = '''import glob
for target in ["{root}/grading/gradebook.db", "{root}/grading/submitted/full/probe/probe.ipynb",
               *glob.glob("/tmp/course-grading-*/course-*-full/db/gradebook.db")]:
    try:
        with open(target, "w") as handle:
            handle.write("vandalised")
        print("VANDAL wrote", target)
    except OSError as error:
        print("VANDAL refused", target, type(error).__name__)
'''

# Issue 40's sandbox attacks, each bounded in time, bytes and processes and stopping by itself.
# FORGER: every later cell (the tests included) runs as `pass`, and one message holds a lone surrogate,
# which made nbgrader drop the autograded notebook after saving full marks (so the judge never ran).
FORGER = """import json
from IPython import get_ipython
from jupyter_client.session import json_default
get_ipython().input_transformers_post.append(lambda lines: ["pass\\n"])
get_ipython().kernel.session.pack = lambda obj: json.dumps(obj, default=json_default).encode()
print("\\ud800")
""" + WRONG_SCALE
# DAEMON: a process that detaches (setsid, every fd closed) and re-forks every 50 ms, started from the
# kernel and from each rank (in the notebook and in the judge); at most two at a time, 60 s at most.
DAEMON_NAME = "hostile-daemon"
DAEMON = """import ctypes, os, time
def _hide_a_daemon(seconds=60):
    if os.fork():
        return
    try:
        os.setsid()
        ctypes.CDLL(None).prctl(15, b"hostile-daemon", 0, 0, 0)
        os.closerange(0, 4096)
        stop = time.monotonic() + seconds
        while time.monotonic() < stop:
            if os.fork():
                os._exit(0)
            os.setsid()
            time.sleep(0.05)
    finally:
        os._exit(0)
"""
# FLOOD_AND_FORGE: 50 MB to the kernel's own stdout and stderr (not through Jupyter's messages), lines
# written as nbgrader's log would write a kernel that did not start or a machine too busy (to have the
# grader grade it again, or write a review note), and an exception named as the grader's own.
FLOOD_AND_FORGE = """import os, sys
# ipykernel sends what fd 1 and 2 get to the notebook; its copies of the kernel's original ones do not
_original = [getattr(stream, "_original_stdstream_copy", None) or stream.fileno()
             for stream in (sys.stdout, sys.stderr)]
_fake = ("[AutogradeApp | ERROR] Traceback (most recent call last):\\n"
         "RuntimeError: Kernel didn't respond in 120 seconds\\n"
         "[AutogradeApp | ERROR] cell test_scale: GradingMachineBusy: the grading machine was too busy\\n")
_block = b"x" * 2**20
for fd in _original:
    try:                   # a write the grader refuses (a full or closed file) is the flood's loss
        os.write(fd, _fake.encode())
        for _ in range(25):
            os.write(fd, _block)
    except OSError:
        pass
"""
FORGED_ERROR = """class GradingMachineBusy(Exception):
    pass
raise GradingMachineBusy("the grading machine was too busy (it had 1 s in 120 s)")
"""
# NEIGHBOUR: reach a service of the grading machine over the network (PORT: a listener the test opened),
# and leave files in /tmp, /var/tmp and /dev/shm (1 MB each).
LEFTOVER = "hostile-leftover"
NEIGHBOUR = """import os, socket
try:
    socket.create_connection(("127.0.0.1", PORT), timeout=2).close()
    print("NEIGHBOUR reached the grader's listener")
except OSError as error:
    print("NEIGHBOUR refused", type(error).__name__)
for folder in ("/tmp", "/var/tmp", "/dev/shm"):
    try:
        with open(os.path.join(folder, "hostile-leftover-" + str(os.getpid())), "wb") as handle:
            handle.write(b"x" * 2**20)
        print("NEIGHBOUR left a file in", folder)
    except OSError as error:
        print("NEIGHBOUR could not write", folder, type(error).__name__)
"""

CASES: dict[str, dict[str, str]] = {
    "full": {"scale": SCALE, "ring_pass": RING},
    "unanswered": {},
    "infinite_loop": {"scale": "while True:\n    pass\n" + SCALE, "ring_pass": RING},
    "deadlock": {"scale": SCALE, "ring_pass": DEADLOCK_RING},
    "os_exit": {"scale": SCALE, "ring_pass": "import os\nos._exit(3)\n" + RING},
    "sys_exit": {"scale": "import sys\ndef scale(values, factor):\n    sys.exit(0)\n", "ring_pass": RING},
    "memory_hog": {"scale": "def scale(values, factor):\n    hog = bytearray(6 * 2**30)\n"
                            "    return [v * factor for v in values]\n", "ring_pass": RING},
    "print_flood": {"scale": "print('x' * 100_000_000)\n" + SCALE, "ring_pass": RING},
    "patch_check": {"scale": "from course_lib.grading import instructor_checks\n"
                             "instructor_checks('probe').check_scale = lambda f: None\n" + WRONG_SCALE,
                    "ring_pass": RING},
    "patch_allclose": {"scale": "torch.allclose = lambda *a, **k: True\n" + WRONG_SCALE, "ring_pass": RING},
    "patch_course_lib": {"scale": SCALE, "ring_pass": "import course_lib.real\n"
                         "course_lib.real.run_ranks = lambda fn, n, student, values, **k: "
                         "[values[(r - 1) % n] for r in range(n)]\n" + WRONG_RING},
    # A recv that never receives: it lifts the answer from the checker's frame. The ranks make the answer
    # again from its cell's definitions (in the notebook as in the judge), never running the patch, so the
    # ring deadlocks in both: it scores 0 with nothing to review.
    "patch_distributed": {"scale": SCALE, "ring_pass": """import inspect
def _fake_recv(tensor, src=None, **kwargs):
    for info in inspect.stack():
        values = info.frame.f_locals.get("values")
        if isinstance(values, list):
            tensor.fill_(values[src])
            return src
dist.recv = _fake_recv
""" + DEADLOCK_RING},
    # The ranks send a pickle that would patch torch.allclose in the judge when unpickled there; in
    # the kernel (where the cell's own patch is live) they play along with a wrong answer. Results come
    # back through the weights-only loader, which refuses the pickle in the notebook as in the judge.
    "crafted_pickle": {"scale": SCALE, "ring_pass": """torch.allclose = lambda *a, **k: True
def ring_pass(rank, world_size, value):
    import pickle
    import course_lib.real.launch._child as child
    if getattr(torch.allclose, "__name__", "") == "<lambda>":
        return value
    class Payload:
        def __reduce__(self):
            return (eval, ("(__import__('torch').__setattr__('allclose', lambda *a, **k: True), 0.0)[1]",))
    child.plain_encode = child._dumps = pickle.dumps
    return Payload()
"""},
    # Right answers that make Python warn, in the kernel (scale, through the check's child) and on every
    # rank (ring_pass): the warnings are shown on stderr and cost nothing (issue 40).
    "warns": {"scale": "import warnings\ndef scale(values, factor):\n"
                       "    warnings.warn('scale: this path is deprecated', FutureWarning)\n"
                       "    return [v * factor for v in values]\n",
              "ring_pass": "import warnings\n" + RING.replace(
                  "    right, left", "    warnings.warn(f'rank {rank}: deprecated', UserWarning)\n"
                                    "    right, left", 1)},
    "forger": {"scale": FORGER, "ring_pass": RING},
    "daemon": {"scale": DAEMON + "_hide_a_daemon()\n" + SCALE,
               "ring_pass": RING.replace("):\n", "):\n    _hide_a_daemon()\n", 1)},
    "flood_and_forge": {"scale": FLOOD_AND_FORGE + SCALE, "ring_pass": RING + FORGED_ERROR},
}
# Expected (scale points, ring_pass points) and whether the notebook must be marked for review.
EXPECTED = {
    "full": (2, 1, False), "unanswered": (0, 0, False), "infinite_loop": (0, 1, True),
    "deadlock": (2, 0, True), "os_exit": (2, 0, True), "sys_exit": (0, 1, False),
    "memory_hog": (0, 1, False), "print_flood": (2, 1, True), "patch_check": (0, 1, True),
    "patch_allclose": (0, 1, True), "patch_course_lib": (2, 0, True), "patch_distributed": (2, 0, False),
    "crafted_pickle": (2, 0, False),
    "snoop": (0, 1, False), "vandal": (0, 1, False), "invalid_json": (0, 0, True), "renamed": (2, 1, True),
    "missing": (0, 0, True), "wrong_assignment": (0, 0, True), "deleted_test_cell": (2, 1, True),
    "edited_test_cell": (0, 1, True), "warns": (2, 1, False),
    "forger": (0, 1, True), "daemon": (2, 1, False), "flood_and_forge": (2, 1, False),
    "neighbour": (0, 1, False),
}
_LISTENERS: list[socket.socket] = []


def grader_listener() -> int:
    """The port of a listener of the grading machine (this process) that no student may reach."""
    if not _LISTENERS:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        _LISTENERS.append(listener)
    return _LISTENERS[0].getsockname()[1]


def _write(folder: Path, name: str, notebook) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, folder / name)


def write_class(root: Path) -> list[str]:
    """Every case's submission under root/grading/submitted/<case>/probe/."""
    release = probe_course.release(root)
    submitted = root / "grading" / "submitted"
    cases = dict(CASES)
    cases["snoop"] = {"scale": SNOOP.format(root=root), "ring_pass": RING}
    cases["vandal"] = {"scale": VANDAL.format(root=root), "ring_pass": RING}
    if running_as_root():  # without root nothing keeps its files out of the machine's /tmp
        cases["neighbour"] = {"scale": NEIGHBOUR.replace("PORT", str(grader_listener())), "ring_pass": RING}
    for student, answers in cases.items():
        _write(submitted / student / "probe", "probe.ipynb", fixtures.make_submission(release, answers))
    full = fixtures.make_submission(release, CASES["full"])
    (submitted / "invalid_json" / "probe").mkdir(parents=True)
    (submitted / "invalid_json" / "probe" / "probe.ipynb").write_text(nbformat.writes(full)[:500])
    _write(submitted / "renamed" / "probe", "probe (1).ipynb", full)
    (submitted / "missing" / "probe").mkdir(parents=True)
    (submitted / "missing" / "probe" / "notes.txt").write_text("I forgot the notebook")
    _write(submitted / "wrong_assignment" / "probe", "probe.ipynb", probe_course.release(root, "probe_other"))
    deleted = copy.deepcopy(full)  # right answers: the restored test must run and pass
    deleted.cells = [c for c in deleted.cells
                     if c.metadata.get("nbgrader", {}).get("grade_id") != "test_scale"]
    _write(submitted / "deleted_test_cell" / "probe", "probe.ipynb", deleted)
    edited = fixtures.make_submission(release, {"scale": WRONG_SCALE, "ring_pass": RING})
    for cell in edited.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "test_scale":
            cell.source = "pass  # the test is gone"
    _write(submitted / "edited_test_cell" / "probe", "probe.ipynb", edited)
    return sorted(p.name for p in submitted.iterdir())
