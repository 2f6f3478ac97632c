"""Unit tests of chapter 01's checks: a correct backward pass passes, each typical mistake is named.

Covers the visible helpers (course_lib.grading.checks.ch01_mlp.visible) and the hidden checks
(autograde_tests).
"""

import pytest
import torch

from course_lib.grading import instructor_checks
from course_lib.grading.attempt.student_function import StudentFunction
from course_lib.grading.checks.ch01_mlp.visible import (
    autograd_gradients,
    check_gradient,
    check_manual_backward,
    course_batch,
    mlp_parameters,
    random_mlp_case,
)
from course_lib.models import make_dataloader, make_mlp

ch01_mlp = instructor_checks("ch01_mlp")

REFERENCE_SOURCE = '''
def manual_backward(x, y, params):
    Z = x @ params["W1"].T + params["b1"]
    H = Z.clamp(min=0)
    G = 2 * (H @ params["W2"].T + params["b2"] - y) / y.numel()
    G_Z = (G @ params["W2"]) * (Z > 0)
    return {"W1": G_Z.T @ x, "b1": G_Z.sum(0), "W2": G.T @ H, "b2": G.sum(0), "x": G_Z @ params["W1"]}
'''
namespace = {"torch": torch}
exec(REFERENCE_SOURCE, namespace)
reference = namespace["manual_backward"]


def altered(change):
    def manual_backward(x, y, params):
        grads = reference(x, y, params)
        change(grads, x, y, params)
        return grads
    return manual_backward


def test_autograd_reference_equals_the_formulas_in_float64():
    x, y, params = random_mlp_case(seed=3, batch=5, in_features=4, hidden_units=3, out_features=2)
    params64 = {k: v.double() for k, v in params.items()}
    want = autograd_gradients(x.double(), y.double(), params64)
    got = reference(x.double(), y.double(), params64)
    assert set(want) == {*params, "x"}
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-12, atol=1e-12)


def test_a_correct_backward_passes_and_reports_its_error(capsys):
    assert check_manual_backward(reference) < 1e-6
    assert "match autograd" in capsys.readouterr().out


def test_course_batch_is_the_loaders_first_batch_and_make_mlp_weights():
    x, y, params = course_batch(0)
    first_x, first_y = next(iter(make_dataloader()))
    assert torch.equal(x, first_x) and torch.equal(y, first_y)
    assert torch.equal(params["W1"], make_mlp(0).hidden_layer.weight.detach())
    with pytest.raises(IndexError, match="no batch 32"):
        course_batch(32)


def test_random_cases_are_reproducible_and_shaped():
    a = random_mlp_case(seed=7, batch=3, in_features=5, hidden_units=2, out_features=4)
    b = random_mlp_case(seed=7, batch=3, in_features=5, hidden_units=2, out_features=4)
    assert all(torch.equal(p, q) for p, q in zip(a[:2], b[:2], strict=True))
    x, y, params = a
    assert x.shape == (3, 5) and y.shape == (3, 4) and params["W1"].shape == (2, 5)


@pytest.mark.parametrize("change, message", [
    (lambda g, x, y, p: g.update(b2=2 * g["b2"], W2=2 * g["W2"]), "twice too large"),
    (lambda g, x, y, p: g.update(b2=0.5 * g["b2"]), "half the right size"),
    (lambda g, x, y, p: g.update(b2=-g["b2"]), "wrong sign"),
    (lambda g, x, y, p: g.update(W2=g["W2"].T), r"gradient of W2 has shape \(4, 2\)"),
    (lambda g, x, y, p: g.update(W1=g["W1"] + 0.1), "gradient of W1 is wrong.*through the ReLU"),
    (lambda g, x, y, p: g.update(x=g["x"].T), r"gradient of x has shape \(6, 32\)"),
    (lambda g, x, y, p: g.pop("b1"), r"has no \['b1'\] key"),
    (lambda g, x, y, p: p["W1"].add_(1.0), "changed params"),
])
def test_each_mistake_is_named(change, message):
    with pytest.raises(AssertionError, match=message):
        check_manual_backward(altered(change))


def test_a_function_that_returns_no_dict_is_told_so():
    with pytest.raises(AssertionError, match="must return a dict"):
        check_manual_backward(lambda x, y, params: [0, 0, 0, 0])


WITH_AUTOGRAD = """def manual_backward(x, y, params):
    leaves = {k: v.clone().requires_grad_() for k, v in params.items()}
    with torch.enable_grad():
        out = torch.relu(x @ leaves["W1"].T + leaves["b1"]) @ leaves["W2"].T + leaves["b2"]
        ((out - y) ** 2).mean().backward()
    return {k: v.grad for k, v in leaves.items()}
"""


@pytest.mark.parametrize("trick", ["", "torch.autograd.grad"])
def test_autograd_is_refused_however_it_is_reached(trick):
    source = WITH_AUTOGRAD if not trick else WITH_AUTOGRAD.replace(
        "((out - y) ** 2).mean().backward()\n    return {k: v.grad for k, v in leaves.items()}",
        "grads = torch.autograd.grad(((out - y) ** 2).mean(), list(leaves.values()))\n"
        "    return dict(zip(leaves, grads))")
    with pytest.raises(AssertionError, match="refuses.*backward pass by hand"):
        check_manual_backward(StudentFunction(name="manual_backward", sources=[source]))


def test_mlp_parameters_is_a_detached_copy():
    model = make_mlp(0)
    params = mlp_parameters(model)
    params["b2"].add_(1.0)
    assert not torch.equal(params["b2"], model.output_layer.bias.detach())
    assert not params["W1"].requires_grad


@pytest.mark.parametrize("check", [check for check, _ in ch01_mlp.ROWS.values()])
def test_hidden_checks_pass_a_correct_function_given_as_source(check):
    check(StudentFunction(name="manual_backward", sources=[REFERENCE_SOURCE]))


def test_hidden_shape_check_fails_a_function_fixed_to_the_course_shapes():
    def fixed(x, y, params):
        grads = reference(x, y, params)
        return {name: grads[name].reshape({"W1": (4, 6), "b1": (4,), "W2": (2, 4), "b2": (2,)}[name])
                for name in ("W1", "b1", "W2", "b2")}
    with pytest.raises((AssertionError, RuntimeError), match="hidden case|shape"):
        ch01_mlp.check_manual_backward_hidden_W1(fixed)


def test_hidden_cases_fail_a_mean_over_the_batch_only():
    def mean_over_batch(x, y, params):
        grads = reference(x, y, params)
        return {k: v * y.shape[1] for k, v in grads.items()}  # divides by B instead of B*K
    with pytest.raises(AssertionError, match="seed"):
        ch01_mlp.check_manual_backward_hidden_b2(mean_over_batch)


def test_hidden_checks_refuse_running_autograd_not_naming_it():
    named_only = REFERENCE_SOURCE.replace("def manual_backward(x, y, params):",
                                          "def manual_backward(x, y, params):\n"
                                          "    # unlike autograd.backward\n    _unused = torch.autograd.grad")
    check = ch01_mlp.check_manual_backward_hidden_x
    check(StudentFunction("manual_backward", sources=[named_only]))
    cheat = REFERENCE_SOURCE.replace("def manual_backward(x, y, params):",
                                     "def manual_backward(x, y, params):\n    torch.set_grad_enabled(True)")
    with pytest.raises(AssertionError, match="refuses"):
        check(StudentFunction("manual_backward", sources=[cheat]))


def test_each_gradient_is_a_part_of_its_own():
    """A wrong dL/dW1 loses the W1 part only; the output layer's parts and the others keep their points."""
    wrong_first_layer = altered(lambda g, x, y, p: g.update(W1=2 * g["W1"]))
    with pytest.raises(AssertionError, match="gradient of W1"):
        ch01_mlp.check_manual_backward_hidden_W1(wrong_first_layer)
    for name in ("W2", "b2", "b1", "x"):
        getattr(ch01_mlp, f"check_manual_backward_hidden_{name}")(wrong_first_layer)
    check_gradient(wrong_first_layer, "W2")
    with pytest.raises(AssertionError, match="gradient of W1"):
        check_gradient(wrong_first_layer, "W1")
