"""An exercise's refusal holds whatever path reaches the refused code, in the child that runs the answer:
import, importlib, __import__, sys.modules, attribute chains, copied function and code objects, code run
at definition time, a subclass or partial of a refused class or function, a refusal caught and ignored,
the watch switched off. A natural answer, and the checks' own use of the refused code, pass."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import course_lib.grading.checks.ch02_prediction.visible  # noqa: F401 - loaded, as wherever checks run
import course_lib.sim  # noqa: F401
from course_lib.grading.attempt.isolation import IsolatedCallError, map_isolated
from course_lib.grading.attempt.refusals import Refusal
from course_lib.grading.attempt.student_function import StudentFunction

SCHEDULE = Refusal("one_f_one_b", why="the exercise is to write the schedule yourself")
DDP_REFUSAL = Refusal("your DDP", modules=("torch.nn.parallel.distributed",),
                      functions=("torch.autograd.grad",), why="the exercise is to write DDP yourself")


def _answer(source: str, name: str = "answer", refusal: Refusal = SCHEDULE, prelude: str = ""):
    student = StudentFunction(name=name, sources=(source,), refusal=refusal, prelude=prelude)
    return map_isolated(student, [(4, 8)], timeout=60)[0]


def _refused(source: str, match: str = "refuses", **kwargs) -> str:
    with pytest.raises(IsolatedCallError, match=match) as raised:
        _answer(source, **kwargs)
    return str(raised.value)


def test_a_natural_answer_passes():
    assert _answer("def answer(stages, microbatches):\n    return [[('F', m) for m in range(microbatches)]"
                   " for _ in range(stages)]\n") == [[("F", m) for m in range(8)] for _ in range(4)]


@pytest.mark.parametrize("source", [
    "from course_lib.sim import pipeline_schedule\n"
    "def answer(s, m):\n    return pipeline_schedule('1f1b', s, m).ops\n",
    "import importlib\n"
    "def answer(s, m):\n"
    "    return importlib.import_module('course_lib.sim').pipeline_schedule('1f1b', s, m)\n",
    "def answer(s, m):\n    return __import__('course_lib.sim').sim.pipeline_schedule('1f1b', s, m)\n",
])
def test_importing_course_lib_is_refused(source):
    assert "course_lib" in _refused(source)


def test_sys_modules_and_attribute_chains_are_refused():
    source = ("import sys\n"
              "def answer(s, m):\n"
              "    sim = sys.modules['course_lib.sim']\n"
              "    schedule = sim.step.schedules.pipeline_schedule('1f1b', s, m)\n"
              "    return [list(stage) for stage in schedule.ops]\n")
    assert "pipeline_schedule from course_lib" in _refused(source)


def test_copied_function_and_code_objects_are_refused():
    copy = ("import sys, types\n"
            "_original = sys.modules['course_lib.sim'].pipeline_schedule\n"
            "answer = types.FunctionType(_original.__code__, _original.__globals__)\n")
    assert "course_lib" in _refused(copy)
    renamed = ("import sys, types\n"
               "_original = sys.modules['course_lib.sim'].pipeline_schedule\n"
               "_code = _original.__code__.replace(co_filename='mine.py', co_name='answer')\n"
               "answer = types.FunctionType(_code, _original.__globals__)\n")
    assert "a copy of" in _refused(renamed)


def test_a_short_answer_written_like_short_course_code_is_the_students_own():
    """The capstone's stand-in holds a two-line GPipe order, instruction for instruction what a student
    writes as a (wrong) 1F1B: too short to prove a copy, it stays the student's."""
    import course_lib.capstone.standins  # noqa: F401  (imported before the refusal is worked out)

    gpipe = ("def one_f_one_b(stages, microbatches):\n"
             "    return [[(\"F\", m) for m in range(microbatches)] + "
             "[(\"B\", m) for m in range(microbatches)]\n"
             "            for _ in range(stages)]\n")
    refusal = Refusal("a GPipe order", why="a fresh refusal, worked out with the capstone imported")
    ops = _answer(gpipe, name="one_f_one_b", refusal=refusal)
    assert ops[0] == [("F", m) for m in range(8)] + [("B", m) for m in range(8)]


def test_work_done_at_definition_time_is_refused():
    source = ("import sys\n"
              "TABLE = sys.modules['course_lib.sim'].pipeline_schedule('1f1b', 4, 8)\n"
              "def answer(s, m):\n    return 0\n")
    assert "course_lib" in _refused(source)


def test_a_cell_stopped_by_its_refused_import_costs_only_the_answers_it_defines():
    cells = ("def answer(s, m):\n    return s * m\n",
             "import course_lib.sim\ndef other(s, m):\n    return 0\n")
    assert map_isolated(StudentFunction("answer", sources=cells, refusal=SCHEDULE), [(4, 8)])[0] == 32
    with pytest.raises(IsolatedCallError, match="import course_lib.sim"):
        map_isolated(StudentFunction("other", sources=cells, refusal=SCHEDULE), [(4, 8)])


def test_a_caught_refusal_still_fails_and_so_does_switching_the_watch_off():
    caught = ("import sys\n"
              "def answer(s, m):\n"
              "    try:\n        sys.modules['course_lib.sim'].pipeline_schedule('1f1b', s, m)\n"
              "    except Exception:\n        pass\n"
              "    return 1\n")
    assert "course_lib" in _refused(caught)
    off = "import sys\ndef answer(s, m):\n    sys.settrace(None)\n    return 1\n"
    assert "switched off" in _refused(off, match="switched off")


def test_torch_modules_and_functions_a_refusal_names_are_refused_by_any_path():
    subclass = ("from torch.nn.parallel import DistributedDataParallel\n"
                "class answer(DistributedDataParallel):\n    pass\n")
    assert "torch.nn.parallel.distributed" in _refused(subclass, refusal=DDP_REFUSAL)
    partial = ("import functools, torch\n"
               "answer = functools.partial(torch.autograd.grad)\n")
    assert "torch.autograd.grad" in _refused(partial, refusal=DDP_REFUSAL)
    through_backward = ("import torch\n"
                        "def answer(s, m):\n"
                        "    x = torch.ones(2, requires_grad=True)\n"
                        "    return torch.autograd.grad((x * x).sum(), x)[0].tolist()\n")
    assert "torch.autograd.grad" in _refused(through_backward, refusal=DDP_REFUSAL)


def test_the_lessons_own_imports_are_there_and_do_not_count_as_the_answers():
    source = ("def answer(s, m):\n"
              "    return [nn.Linear(2, 2).in_features, F.relu(torch.tensor(-1.0)).item()]\n")
    prelude = "from torch import nn\nimport torch.nn.functional as F\nfrom course_lib.sim import Link\n"
    assert _answer(source, prelude=prelude) == [2, 0.0]
    uses_lesson_import = "def answer(s, m):\n    return Link(1e-6, 1e9).latency\n"
    assert "course_lib" in _refused(uses_lesson_import, prelude=prelude)


def test_the_checks_own_use_of_refused_code_is_not_the_students(monkeypatch):
    from course_lib.grading.attempt.rank_attempt import FailureText, run_on_ranks
    from course_lib.grading.settings import HIDDEN_CHECKS_ENV
    from course_lib.real import run_ranks

    # this file plays a hidden check: its folder is where the grading run's checks are
    monkeypatch.setenv(HIDDEN_CHECKS_ENV, os.pathsep.join([str(Path(__file__).parent)]))
    run = run_on_ranks(_rank_uses_ddp_itself, 1, StudentFunction("answer", sources=(
        "def answer(x):\n    return x + 1\n",), refusal=DDP_REFUSAL), text=FailureText("answer"), timeout=60)
    assert run.error is None and run.per_rank == (3,)
    assert run_ranks is not None


def _rank_uses_ddp_itself(rank, world_size, student):
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    answer = student.resolve()
    DistributedDataParallel(nn.Linear(2, 2))   # the check's own reference, after the refusal is armed
    return answer(2)


def test_course_code_the_answer_may_use_acts_for_its_caller():
    """A visible check's helper is the student's to call, but what it runs for them is theirs too: the
    formula it takes from the simulator stays refused (visible checks never bless a call)."""
    source = ("import sys\n"
              "def answer(s, m):\n"
              "    checks = sys.modules['course_lib.grading.checks.ch02_prediction.judge']\n"
              "    return checks.one_in_flight_time(4096, s, 5e-5, 1e9, 2**20)\n")
    assert "from course_lib" in _refused(source)


def test_a_refused_module_that_defines_an_enum_does_not_refuse_every_enum():
    # torch.distributed.checkpoint._experimental defines an Enum; EnumType puts enum.py's own __new__ in
    # its dict, which must stay callable (signal.Signals(15) goes through it)
    refusal = Refusal("your checkpointing", modules=("torch.distributed.checkpoint._experimental",))
    source = "import signal\ndef answer(s, m):\n    return signal.Signals(15).name\n"
    assert _answer(source, refusal=refusal) == "SIGTERM"
    refused = ("from torch.distributed.checkpoint._experimental.utils import wrap_future\n"
               "def answer(s, m):\n    return wrap_future(None).done()\n")
    assert "torch.distributed.checkpoint._experimental" in _refused(refused, refusal=refusal)
FSDP_REFUSAL = Refusal("your FSDP", modules=("torch.distributed.fsdp",), why="the exercise is FSDP itself")


def test_a_method_decorated_like_one_of_a_refused_class_is_not_taken_for_it():
    """@torch.no_grad() wraps every method it decorates in one shared wrapper code; FSDP1's FlatParamHandle
    has such methods, and an answer's own decorated method must not be mistaken for them."""
    source = ("class Answer:\n"
              "    @torch.no_grad()\n"
              "    def __call__(self, s, m):\n"
              "        return s * m\n"
              "answer = Answer()\n")
    assert _answer(source, refusal=FSDP_REFUSAL) == 32


def test_a_decorated_copy_of_refused_code_is_still_refused():
    source = ("import torch.distributed.fsdp._flat_param as flat\n"
              "get_shard = torch.no_grad()(flat.FlatParamHandle._get_shard)\n"
              "def answer(s, m):\n"
              "    return get_shard(torch.arange(float(s * m)), 0, 2)[0].numel()\n")
    assert "torch.distributed.fsdp" in _refused(source, refusal=FSDP_REFUSAL)
