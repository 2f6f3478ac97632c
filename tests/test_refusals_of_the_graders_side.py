"""Issue 53: what of the grader's side an answer may not reach. torch's C++ entry points an exercise
refuses, called by the answer itself (no Python frame, so a profile hook watches them); the hidden checks'
own code, which a child forked from the judge holds in memory; and, in a grading kernel whose hidden cells
the judge re-checks apart, hidden checks that only defer to it."""

from __future__ import annotations

import pytest

from course_lib.grading.attempt import hidden_checks
from course_lib.grading.attempt.isolation import IsolatedCallError, map_isolated
from course_lib.grading.attempt.refusals import Refusal
from course_lib.grading.attempt.student_function import StudentFunction
from course_lib.grading.settings import HIDDEN_CHECKS_ENV

NO_AUTOGRAD = Refusal("manual_backward", c_functions=("torch._C._set_grad_enabled",
                                                     "torch._C._ImperativeEngine.run_backward"),
                      why="the exercise is the backward pass by hand")
GRAD_OF_SQUARE = """def answer(value):
    from torch.autograd import Variable
    leaf = torch.tensor(float(value), requires_grad=True)
    {switch_on}
    loss = leaf * leaf
    {run_backward}
    return float(leaf.grad)
"""
ENGINE_ARGUMENTS = "(loss,), (torch.ones_like(loss),), False, False, (), True, True"
BOUND = f"Variable._execution_engine.run_backward({ENGINE_ARGUMENTS})"
UNBOUND = f"torch._C._ImperativeEngine.run_backward(Variable._execution_engine, {ENGINE_ARGUMENTS})"
SWITCH_ON = "torch._C._set_grad_enabled(True)"


def _answer(source: str, refusal: Refusal, keep=None):
    student = StudentFunction(name="answer", sources=(source,), refusal=refusal)
    extra = {"keep": keep} if keep else {}
    return map_isolated(student, [(3.0,)], timeout=60, **extra)[0]


@pytest.mark.parametrize("run_backward", [BOUND, UNBOUND], ids=["bound", "descriptor"])
def test_cpp_autograd_the_answer_calls_itself_is_refused(run_backward):
    source = GRAD_OF_SQUARE.format(switch_on=SWITCH_ON, run_backward=run_backward)
    assert _answer(source, Refusal("manual_backward")) == 6.0   # what it would earn: the right gradient
    with pytest.raises(IsolatedCallError, match=r"ran torch\._C\._set_grad_enabled, which this exercise"):
        _answer(source, NO_AUTOGRAD)
    engine_only = Refusal("manual_backward", c_functions=NO_AUTOGRAD.c_functions[1:])
    with pytest.raises(IsolatedCallError, match=r"ran torch\._C\._ImperativeEngine\.run_backward"):
        _answer(source, engine_only)


def _keep_with_grad_mode(args, result):
    import torch

    torch._C._set_grad_enabled(False)   # the check's own call: not the answer's
    return result


def test_the_checks_own_cpp_calls_and_a_plain_answer_pass():
    plain = "def answer(value):\n    return 2 * float(value)\n"
    assert _answer(plain, NO_AUTOGRAD, keep=_keep_with_grad_mode) == 6.0


HIDDEN_CHECK = "def expected(value):\n    return 2 * float(value)\n"


def test_the_hidden_checks_code_is_refused_to_the_answer(tmp_path, monkeypatch):
    (tmp_path / "peeked.py").write_text(HIDDEN_CHECK)
    monkeypatch.setenv(HIDDEN_CHECKS_ENV, str(tmp_path))
    hidden_checks.instructor_checks("peeked")            # the judge holds it, as its forked children do
    source = ("import sys\ndef answer(value):\n"
              "    return sys.modules['course_hidden_checks.peeked'].expected(value)\n")
    with pytest.raises(IsolatedCallError, match="the grader's hidden checks"):
        _answer(source, Refusal("answer"))


def test_a_kernel_judged_apart_gets_hidden_checks_that_only_defer(monkeypatch, capsys):
    monkeypatch.setenv(hidden_checks.JUDGED_APART_ENV, "1")
    checks = hidden_checks.instructor_checks("ch02_prediction")
    assert "expected_time" not in vars(checks)
    checks.check_predict_hidden(lambda *args: 0.0)
    assert hidden_checks.DEFERRED in capsys.readouterr().out
    with pytest.raises(AttributeError):
        checks.expected_time  # noqa: B018
