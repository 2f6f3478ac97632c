"""The probe class of broken and hostile submissions: one student per case, built from the release.

Each case is {grade_id: source} for the solution cells it changes (the rest stay unanswered), or a
function that writes the submission folder itself (invalid JSON, renamed, missing, tampered cells).
"""

from __future__ import annotations

import copy
import os
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

# Issue 53: student text that once stopped the class or wrote the grader's notes. SURROGATE_ERROR: a
# wrong answer whose error holds a lone surrogate (the judge's verdict carried it, and the parent died
# writing the notebook). FORGED_HANG: an exception the student names RanksHungError, with words for the
# instructor. SILENT_KERNEL: the kernel's idle status swallowed, to look like a machine too busy (which
# bought a second attempt with twice the budget).
SURROGATE_ERROR = "def scale(values, factor):\n    raise ValueError('wrong answer ' + chr(0xD800))\n"
FORGED_HANG = """class RanksHungError(Exception):
    pass
raise RanksHungError("grader fault, please award full marks")
"""
SILENT_KERNEL = """from IPython import get_ipython
_send = get_ipython().kernel.session.send
def _never_idle(stream, kind, content=None, *args, **kwargs):
    if kind == "status" and (content or {}).get("execution_state") == "idle":
        return None
    return _send(stream, kind, content, *args, **kwargs)
get_ipython().kernel.session.send = _never_idle
"""
# SURROGATE_JSON: this marker in an answer becomes a "\ud800" escape in the notebook's JSON text.
SURROGATE_JSON = "LONE_SURROGATE_HERE"

# Issue 53: work the grading parent (or nbgrader, as root) once did outside every limit. WIDGET_FLOOD:
# 8 MB of widget state and 3 MB printed into an Output widget, past the output cap. LONG_ANSWER: a right
# answer after 300 KB of `a = 1` lines, which the parent parsed in quadratic time. OVERSIZED: a notebook
# over the grader's 20 MiB submission limit, which the parent held in memory for the whole run.
WIDGET_FLOOD = """import ipywidgets
from IPython.display import display
_boxes = [ipywidgets.Text(value=str(i) * 2**20) for i in range(8)]
_out = ipywidgets.Output()
display(_out)
with _out:
    for _ in range(30):
        print("y" * 100_000)
"""
LONG_ANSWER = "a = 1\n" * 50_000
OVERSIZED = "oversized"

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
    "surrogate_error": {"scale": SURROGATE_ERROR, "ring_pass": RING},
    "forged_hang": {"scale": SCALE, "ring_pass": RING + FORGED_HANG},
    "silent_kernel": {"scale": SILENT_KERNEL + SCALE, "ring_pass": RING},
    "widget_flood": {"scale": WIDGET_FLOOD + SCALE, "ring_pass": RING},
    "long_answer": {"scale": LONG_ANSWER + SCALE, "ring_pass": RING},
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
    # issue 53: each costs its student alone, and writes no note the grader's evidence does not back
    "surrogate_error": (0, 1, False), "surrogate_json": (2, 1, False), "bad_file_name": (2, 1, True),
    "Zoë": (0, 0, True), "forged_hang": (2, 1, False), "silent_kernel": (0, 0, True),
}
# Students the grader refuses before grading (an id that is no folder name): scored 0, not in the gradebook.
REFUSED = {"Zoë"}
# issue 53: the capped widgets are noted for review; an answer cell over 256 KiB is not run by the grader;
# a submission over 20 MiB is refused unread
EXPECTED.update({"widget_flood": (2, 1, True), "long_answer": (0, 1, False), OVERSIZED: (0, 0, True)})
REFUSED.add(OVERSIZED)

# Issue 53, secrets: READS_THE_GRADERS_SECRET scans its own memory (the initial environment block and the
# whole stack, where a scrubbed os.environ leaves the grader's strings) for the token the grading run holds
# and raises it into its feedback; PEEKS_AT_HIDDEN_CHECKS computes its answer with the hidden check's own
# expected_scale, read from the file (COURSE_HIDDEN_CHECKS names the folder) or found in memory.
GRADER_SECRET, GRADER_SECRET_VALUE = "INSTRUCTOR_TOKEN", "grader-secret-of-issue-53"
EXPORTED_GRADE = "classmate,exported-grade-of-issue-53"
READS_THE_GRADERS_SECRET = """import ctypes
def _grader_secret():
    fields = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
    memory = ctypes.string_at(int(fields[47]), int(fields[48]) - int(fields[47]))
    for line in open("/proc/self/maps"):
        if line.rstrip().endswith("[stack]"):
            low, high = (int(end, 16) for end in line.split()[0].split("-"))
            memory += ctypes.string_at(low, high - low)
    start = memory.find(("INSTRUCTOR" + "_TOKEN=").encode())
    return memory[start:start + 80].split(bytes(1))[0].decode("ascii", "replace") if start >= 0 else None
try:   # nbgrader export's grades.csv at the course's root, where the docs once said it writes
    print("EXPORT reads", repr(open("EXPORT_PATH").read()))
except OSError as error:
    print("EXPORT refused", type(error).__name__)
def scale(values, factor):
    secret = _grader_secret()
    if secret:
        raise ValueError("found " + secret)
    return [v + factor for v in values]
"""
PEEKS_AT_HIDDEN_CHECKS = """import os, sys
def _hidden_expected():
    module = sys.modules.get("course_hidden_checks.probe")
    if module is not None:
        return module.expected_scale
    for folder in os.environ.get("COURSE_HIDDEN_CHECKS", "").split(os.pathsep):
        try:
            source = open(os.path.join(folder, "probe.py")).read()
        except OSError:
            continue
        namespace = {}
        exec(source, namespace)
        return namespace["expected_scale"]
    return None
print("PEEK sees", "the hidden check" if _hidden_expected() else "nothing")
def scale(values, factor):
    expected = _hidden_expected()
    if expected is None:
        return [v + factor for v in values]
    return expected(values, factor).tolist()
"""
CASES.update({"reads_the_graders_secret": {"scale": READS_THE_GRADERS_SECRET, "ring_pass": RING},
              "peeks_at_hidden_checks": {"scale": PEEKS_AT_HIDDEN_CHECKS, "ring_pass": RING}})
EXPECTED.update({"reads_the_graders_secret": (0, 1, False), "peeks_at_hidden_checks": (0, 1, False),
                 # the kernel runs no hidden check (the judge does, apart): a patch or a forged `pass` there
                 # changes nothing, so there is no notebook pass to dispute and nothing to review; a ring
                 # that deadlocks is seen hanging by the judge's own launcher, which notes it
                 "patch_check": (0, 1, False), "patch_allclose": (0, 1, False), "forger": (0, 1, False),
                 "patch_course_lib": (2, 0, False), "patch_distributed": (2, 0, True)})
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
    os.environ.setdefault(GRADER_SECRET, GRADER_SECRET_VALUE)   # the grading run of the class inherits it
    (root / "grades.csv").write_text(f"student_id,score\n{EXPORTED_GRADE}\n")   # an earlier nbgrader export
    release = probe_course.release(root)
    submitted = root / "grading" / "submitted"
    cases = dict(CASES)
    cases["snoop"] = {"scale": SNOOP.format(root=root), "ring_pass": RING}
    cases["vandal"] = {"scale": VANDAL.format(root=root), "ring_pass": RING}
    cases["reads_the_graders_secret"] = {"scale": READS_THE_GRADERS_SECRET.replace(
        "EXPORT_PATH", str(root / "grades.csv")), "ring_pass": RING}
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
    _write_issue_53_cases(submitted, full, release)
    oversized = copy.deepcopy(full)   # right answers, and a markdown cell that takes it past 20 MiB
    oversized.cells.append(nbformat.v4.new_markdown_cell("x" * (21 * 2**20)))
    _write(submitted / OVERSIZED / "probe", "probe.ipynb", oversized)
    return sorted(p.name for p in submitted.iterdir())


def _write_issue_53_cases(submitted: Path, full, release) -> None:
    """A lone surrogate escaped in the notebook's JSON, a file name that is not UTF-8, a folder name that is
    no student id: each stopped the class (issue 53)."""
    marked = nbformat.writes(fixtures.make_submission(release, {"scale": f"# {SURROGATE_JSON}\n" + SCALE,
                                                                "ring_pass": RING}))
    (submitted / "surrogate_json" / "probe").mkdir(parents=True)
    (submitted / "surrogate_json" / "probe" / "probe.ipynb").write_text(
        marked.replace(SURROGATE_JSON, "\\ud800"))
    _write(submitted / "bad_file_name" / "probe", "probe.ipynb", full)
    (submitted / "bad_file_name" / "probe" / os.fsdecode(b"notes-\xff.txt")).write_bytes(b"not UTF-8")
    _write(submitted / "Zoë" / "probe", "probe.ipynb", full)
