"""Checks for chapter 01: a hand-written backward pass of the 6->4->2 MLP against PyTorch's autograd.

The visible and hidden tests both go through ``compare_gradients``, one gradient (W2, b2, W1, b1, x) per
graded part, so a student sees the same kind of message (which gradient, which shape, how far off) in both.
"""

from __future__ import annotations

import torch
from torch import nn

from course_lib.grading.attempt.isolation import IsolatedCallError, map_isolated
from course_lib.grading.attempt.refusals import Refusal
from course_lib.grading.checks.ch01_mlp.judge import compare_gradients
from course_lib.models import BATCH_SIZE, TwoLayerMLP, make_dataloader, make_mlp

FUNCTION_NAME = "manual_backward"
# The backward pass by hand is the exercise: autograd (every Python way in: .backward(), torch.autograd,
# torch.func, forward-mode AD, switching gradients back on; and its C++ entry points called directly: grad
# mode switched on in C++, the engine's run_backward, a dual level for forward AD) and course_lib are
# refused while the answer runs.
REFUSAL = Refusal(FUNCTION_NAME, modules=("torch.autograd.functional", "torch.autograd.forward_ad",
                                          "torch._functorch"),
                  functions=("torch.Tensor.backward", "torch.autograd.backward", "torch.autograd.grad",
                             "torch.enable_grad", "torch.set_grad_enabled"),
                  c_functions=("torch._C._set_grad_enabled", "torch._C._ImperativeEngine.run_backward",
                               "torch._C._ImperativeEngine.queue_callback", "torch._C._enter_dual_level",
                               "torch._C._set_fwd_grad_enabled"),
                  why="the exercise is the backward pass by hand, from the formulas, with autograd off")

# The lesson's names for the model's tensors, and where PyTorch keeps each one.
PARAMETER_NAMES = {"W1": "hidden_layer.weight", "b1": "hidden_layer.bias",
                   "W2": "output_layer.weight", "b2": "output_layer.bias"}
# The gradients the answer returns, in the order the backward pass computes them; "x" is the gradient
# with respect to the input, the tensor a pipeline stage sends back (chapter 05). Each is a graded part.
GRADIENT_NAMES = ("W2", "b2", "W1", "b1", "x")


def mlp_parameters(model: TwoLayerMLP) -> dict[str, torch.Tensor]:
    """A detached copy of the model's weights under the lesson's names W1, b1, W2, b2."""
    tensors = dict(model.named_parameters())
    return {short: tensors[long].detach().clone() for short, long in PARAMETER_NAMES.items()}


def autograd_gradients(x: torch.Tensor, y: torch.Tensor, params: dict[str, torch.Tensor]) -> dict:
    """PyTorch's own answer: load ``params`` into a TwoLayerMLP, take nn.MSELoss, call .backward(); the
    gradients of the four parameters and, under "x", of the input."""
    hidden_units, in_features = params["W1"].shape
    out_features = params["W2"].shape[0]
    model = TwoLayerMLP(in_features, hidden_units, out_features).to(params["W1"].dtype)
    model.load_state_dict({PARAMETER_NAMES[short]: value for short, value in params.items()})
    with torch.enable_grad():
        x_leaf = x.detach().clone().requires_grad_()
        nn.MSELoss()(model(x_leaf), y).backward()
    tensors = dict(model.named_parameters())
    return {**{short: tensors[long].grad.detach() for short, long in PARAMETER_NAMES.items()},
            "x": x_leaf.grad.detach()}


def course_batch(index: int = 0, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """Batch ``index`` of the course's dataset and the weights of ``make_mlp(seed)``: the lesson's case."""
    for position, (x, y) in enumerate(make_dataloader(batch_size=BATCH_SIZE)):
        if position == index:
            return x, y, mlp_parameters(make_mlp(seed))
    raise IndexError(f"the course's dataset has no batch {index}: pick one of 0..{position}")


def random_mlp_case(seed: int, batch: int, in_features: int, hidden_units: int, out_features: int,
                    hidden_bias_shift: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """A batch and weights of any shape drawn from ``seed``; a negative shift silences many ReLUs."""
    generator = torch.Generator().manual_seed(seed)
    params = {"W1": torch.randn(hidden_units, in_features, generator=generator),
              "b1": torch.randn(hidden_units, generator=generator) + hidden_bias_shift,
              "W2": torch.randn(out_features, hidden_units, generator=generator),
              "b2": torch.randn(out_features, generator=generator)}
    x = torch.randn(batch, in_features, generator=generator)
    y = torch.randn(batch, out_features, generator=generator)
    return x, y, params


def check_manual_backward(manual_backward, x=None, y=None, params=None, case: str | None = None,
                          quiet: bool = False, names=GRADIENT_NAMES) -> float:
    """Compare ``manual_backward(x, y, params)`` with autograd on the gradients ``names``; by default every
    gradient on batch 0 of the course data. Returns the largest absolute error. Raises AssertionError with
    a message naming what is wrong.
    """
    names = (names,) if isinstance(names, str) else tuple(names)
    if (x is None) != (y is None) or (x is None) != (params is None):
        raise ValueError("pass all of x, y and params, or none of them for the course's first batch")
    if x is None:
        x, y, params = course_batch(0)
        case = case or "batch 0 of the course data, make_mlp(0)"
    case = case or f"batch of {x.shape[0]}, shapes {x.shape[1]}->{params['W1'].shape[0]}->{y.shape[1]}"
    [(got, given)] = gradients_by_hand(manual_backward, [(x, y, params)], "the visible case")
    want = autograd_gradients(x, y, params)
    tensors = {**params, "x": x}
    unchanged_inputs(given, tensors, case, names)
    largest_error = compare_gradients(got, want, tensors, case, names)
    if not quiet:
        print(f"manual_backward's {', '.join(f'dL/d{n}' for n in names)} match autograd on {case}: "
              f"largest error {largest_error:.1e}")
    return largest_error


def check_gradient(manual_backward, name: str) -> None:
    """The visible test of one graded part: ``name``'s gradient on the course's first batch, on an
    8x3->5->1 case and on a batch of one sample."""
    x_all, y_all, params = course_batch(0)
    small = random_mlp_case(seed=1, batch=8, in_features=3, hidden_units=5, out_features=1)
    for x, y, weights, case in ((x_all, y_all, params, "batch 0 of the course data, make_mlp(0)"),
                                (*small, "8 samples, 3 inputs, 5 hidden units, 1 output"),
                                (x_all[:1], y_all[:1], params, "the course data's first sample alone")):
        check_manual_backward(manual_backward, x, y, weights, case, names=(name,))


def _with_inputs(args, gradients):
    """Child side, after each call: the gradients, and the input and weights as the call left them."""
    return gradients, {**args[2], "x": args[0]}


def gradients_by_hand(manual_backward, cases, where: str) -> list:
    """(gradients, {weights and "x" after the call}) of the student's function on each (x, y, params),
    computed in a child with autograd switched off and the exercise's refusal armed."""
    calls = [(x.clone(), y.clone(), {k: v.clone() for k, v in params.items()}) for x, y, params in cases]
    try:
        with torch.no_grad():  # the forked child inherits the switch: autograd stays off there
            return map_isolated(manual_backward, calls, name=FUNCTION_NAME, timeout=60, refusal=REFUSAL,
                                keep=_with_inputs)
    except IsolatedCallError as error:
        raise AssertionError(f"{FUNCTION_NAME} failed on {where}: {error}") from None


def unchanged_inputs(given: dict, tensors: dict, case: str, names=GRADIENT_NAMES) -> None:
    """A part is lost when the tensor it is the gradient of was changed in place."""
    for name in names:
        if not torch.equal(given[name], tensors[name]):
            where = "x" if name == "x" else f"params[{name!r}]"
            raise AssertionError(f"{FUNCTION_NAME} changed {where} in place: compute gradients only,"
                                 f" leave the input and the weights as they were ({case})")
