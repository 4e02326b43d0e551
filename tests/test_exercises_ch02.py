"""Exercises of chapter 02 (Autograd): wrong answers, library shortcuts and right answers.

The generic checks (the reference passes, a stub reads "not attempted", a crash
is reported) are in tests/test_exercises.py. Here: realistic wrong answers fail
with a first-tier hint that names the mistake (and a fuller hint behind it),
every library function that would do the exercise is refused, and right
answers written differently from the reference pass.
"""

from __future__ import annotations

import math
import re

import functorch  # the deprecated package, whose aliases of torch.func must be refused too
import pytest
import torch
import torch._functorch.apis as functorch_apis
import torch._functorch.eager_transforms as functorch_impl
import torch.autograd.forward_ad as fwAD
import torch.func

from helpers.exercises import ch02, check, hint, solution
from tests.exercise_support import assert_rejected

pytestmark = [
    pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:FutureWarning"),  # inside torch.func.jacfwd
    pytest.mark.filterwarnings(r"ignore:Using backward\(\) with create_graph=True:UserWarning"),  # the f' + f'' answer
    pytest.mark.filterwarnings("ignore:We've integrated functorch into PyTorch:FutureWarning"),  # functorch.* outside a check
]


def _stub(*args, **kwargs):
    """What the notebook ships: the learner has not written anything yet."""
    raise NotImplementedError


def test_check_prints_one_line(capsys):
    check("02.derivative", _stub)
    out = capsys.readouterr().out
    assert out.startswith("[TODO] exercise 02.derivative: not attempted yet.")


# --------------------------------------------------------------------------
# 02.derivative: wrong answers
# --------------------------------------------------------------------------


def derivative_returns_value(f, x):
    t = torch.tensor(x, requires_grad=True)
    return f(t).item()


def derivative_returns_tensor(f, x):
    t = torch.tensor(x, requires_grad=True)
    f(t).backward()
    return t.grad


def derivative_without_requires_grad(f, x):
    t = torch.tensor(x)
    return f(t).item()  # never differentiates


def derivative_finite_difference(f, x):
    h = 1e-4
    return ((f(torch.tensor(x + h)) - f(torch.tensor(x - h))) / (2 * h)).item()


def derivative_finite_difference_with_grad(f, x):
    """Central differences on a float64 tensor that requires grad: accurate to ~1e-10, not autograd."""
    t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    h = 1e-5
    return ((f(t + h) - f(t - h)) / (2 * h)).item()


def derivative_catches_the_refusal(f, x):
    """Finite differences that swallow the checker's error and fall back to a guess."""
    t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    h = 1e-5
    try:
        return ((f(t + h) - f(t - h)) / (2 * h)).item()
    except AssertionError:
        (g,) = torch.autograd.grad(f(t), t)
        return g.item()


def derivative_finite_difference_under_vmap(f, x):
    """Both evaluations in one batched call, through a name the shortcut guard does not rebind."""
    from torch._functorch.apis import vmap  # the same function as torch.func.vmap

    h = 1e-5
    ys = vmap(f)(torch.tensor([x + h, x - h], dtype=torch.float64, requires_grad=True))
    return ((ys[0] - ys[1]) / (2 * h)).item()


def derivative_complex_step(f, x):
    """The complex-step method: exact to rounding for analytic f, but f is evaluated off the real line."""
    t = torch.tensor(complex(x, 1e-20), dtype=torch.complex128, requires_grad=True)
    return (f(t).imag / 1e-20).item()


def derivative_func_grad(f, x):
    return torch.func.grad(f)(torch.tensor(x, dtype=torch.float64)).item()


def derivative_functional_vjp(f, x):
    return torch.autograd.functional.vjp(f, torch.tensor(x, dtype=torch.float64))[1].item()


def derivative_func_grad_and_value(f, x):
    return torch.func.grad_and_value(f)(torch.tensor(x, dtype=torch.float64))[0].item()


def derivative_functorch_grad(f, x):
    """The deprecated functorch package: a wrapper that calls torch.func.grad from inside torch."""
    return functorch.grad(f)(torch.tensor(x, dtype=torch.float64)).item()


def derivative_functorch_grad_and_value(f, x):
    return functorch.grad_and_value(f)(torch.tensor(x, dtype=torch.float64))[0].item()


def derivative_functorch_vjp(f, x):
    _, vjp_fn = functorch.vjp(f, torch.tensor(x, dtype=torch.float64))
    return vjp_fn(torch.tensor(1.0, dtype=torch.float64))[0].item()


def derivative_functorch_jvp(f, x):
    one = torch.tensor(1.0, dtype=torch.float64)
    return functorch.jvp(f, (torch.tensor(x, dtype=torch.float64),), (one,))[1].item()


def derivative_functorch_imported_inside(f, x):
    """functorch imported by the answer itself (not yet in sys.modules when the check starts)."""
    import functorch as ft

    return ft.grad(f)(torch.tensor(x, dtype=torch.float64)).item()


def derivative_private_apis_grad(f, x):
    """torch.func.grad where torch.func gets it from."""
    return functorch_apis.grad(f)(torch.tensor(x, dtype=torch.float64)).item()


def derivative_private_vjp(f, x):
    _, vjp_fn = functorch_impl.vjp(f, torch.tensor(x, dtype=torch.float64))
    return vjp_fn(torch.tensor(1.0, dtype=torch.float64))[0].item()


def _raw(f):
    """What an answer that reaches past the checker's wrapper finds: its .f attribute, or a callable in vars(f)."""
    found = getattr(f, "f", None)
    if found is None:
        found = next((v for v in vars(f).values() if callable(v)), f) if hasattr(f, "__dict__") else f
    return found


def derivative_dummy_call_then_differences(f, x):
    """One call that requires grad at x (to satisfy the watch), then central differences on the raw f."""
    t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    f(t)
    h = 1e-5
    return ((getattr(f, "f", f)(t + h) - getattr(f, "f", f)(t - h)) / (2 * h)).item()


def derivative_differences_on_any_attribute(f, x):
    """The same attack, through whatever callable the wrapper keeps in its attributes."""
    t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    f(t)
    raw, h = _raw(f), 1e-5
    try:
        return ((raw(t + h) - raw(t - h)) / (2 * h)).item()
    except AssertionError:  # refused: fall back to a guess, hoping the refusal is forgotten
        return 0.0


def second_derivative_dummy_call_then_differences(f, x):
    t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    f(t)
    raw, h = getattr(f, "f", f), 1e-4
    return ((raw(t + h) - 2 * raw(t) + raw(t - h)) / h**2).item()


def second_derivative_differences_on_any_attribute(f, x):
    t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    f(t)
    raw, h = _raw(f), 1e-4
    return ((raw(t + h) - 2 * raw(t) + raw(t - h)) / h**2).item()


def derivative_integer_point(f, x):
    t = torch.tensor(int(x))  # an integer tensor cannot require grad
    return f(t).item()


# --------------------------------------------------------------------------
# 02.second_derivative: wrong answers and shortcuts
# --------------------------------------------------------------------------


def second_derivative_finite_difference_with_grad(f, x):
    t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    h = 1e-4
    return ((f(t + h) - 2 * f(t) + f(t - h)) / h**2).item()


def second_derivative_of_autograd_by_differences(f, x):
    """Autograd for f', then a finite difference of f' for f''."""

    def first(at):
        t = torch.tensor(at, dtype=torch.float64, requires_grad=True)
        (g,) = torch.autograd.grad(f(t), t)
        return g.item()

    h = 1e-5
    return (first(x + h) - first(x - h)) / (2 * h)


def second_derivative_is_first(f, x):
    """Prints 108 for x**4 at 3, which is right there, and 32 at x = 2, which is not."""
    t = torch.tensor(x, requires_grad=True)
    (g,) = torch.autograd.grad(f(t), t)
    return g.item()


def second_derivative_without_create_graph(f, x):
    t = torch.tensor(x, requires_grad=True)
    (g,) = torch.autograd.grad(f(t), t)
    (g2,) = torch.autograd.grad(g, t)  # RuntimeError: g has no grad_fn
    return g2.item()


def second_derivative_accumulated(f, x):
    """backward twice into the same .grad: returns f' + f'' (216 for x**4 at 3)."""
    t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    f(t).backward(create_graph=True)
    t.grad.backward()
    return t.grad.item()


def second_derivative_complex_step_on_autograd(f, x):
    """Autograd's f' at the complex point x + ih, then Im f'(x + ih) / h: a complex step, not a second pass."""
    h = 1e-20
    t = torch.tensor(complex(x, h), dtype=torch.complex128, requires_grad=True)
    out = f(t)
    (g,) = torch.autograd.grad(out, t, grad_outputs=torch.ones_like(out))  # conj(f'(t)) for analytic f
    return (g.conj().imag / h).item()


def second_derivative_hessian(f, x):
    return torch.autograd.functional.hessian(f, torch.tensor(x, dtype=torch.float64)).item()


def second_derivative_func_hessian(f, x):
    return torch.func.hessian(f)(torch.tensor(x, dtype=torch.float64)).item()


def second_derivative_func_grad_twice(f, x):
    return torch.func.grad(torch.func.grad(f))(torch.tensor(x, dtype=torch.float64)).item()


def second_derivative_hvp(f, x):
    t = torch.tensor(x, dtype=torch.float64)
    return torch.autograd.functional.hvp(f, t, torch.ones_like(t))[1].item()


def second_derivative_jacfwd_of_jacrev(f, x):
    return torch.func.jacfwd(torch.func.jacrev(f))(torch.tensor(x, dtype=torch.float64)).item()


def second_derivative_functorch_hessian(f, x):
    return functorch.hessian(f)(torch.tensor(x, dtype=torch.float64)).item()


def second_derivative_functorch_grad_twice(f, x):
    return functorch.grad(functorch.grad(f))(torch.tensor(x, dtype=torch.float64)).item()


def second_derivative_functorch_jacfwd_of_jacrev(f, x):
    return functorch.jacfwd(functorch.jacrev(f))(torch.tensor(x, dtype=torch.float64)).item()


def second_derivative_private_hessian(f, x):
    return functorch_impl.hessian(f)(torch.tensor(x, dtype=torch.float64)).item()


def second_derivative_private_grad_twice(f, x):
    return functorch_apis.grad(functorch_apis.grad(f))(torch.tensor(x, dtype=torch.float64)).item()


# --------------------------------------------------------------------------
# 02.jacobian: wrong answers and shortcuts
# --------------------------------------------------------------------------


def jacobian_complex_step(f, x):
    """Column j from Im f(x + ih e_j) / h: the complex-step method, column by column."""
    h = 1e-20
    columns = []
    for j in range(x.shape[0]):
        z = x.to(torch.complex128).clone()
        z[j] += 1j * h
        columns.append(f(z.requires_grad_(True)).imag / h)
    return torch.stack(columns, dim=1).detach()



def jacobian_accumulating(f, x):
    """Forgets that .grad accumulates between backward calls."""
    x = x.detach().requires_grad_(True)
    y = f(x)
    rows = []
    for i in range(y.shape[0]):
        v = torch.zeros_like(y)
        v[i] = 1.0
        y.backward(gradient=v, retain_graph=True)
        rows.append(x.grad.clone())
    return torch.stack(rows)


def jacobian_aliased_rows(f, x):
    """Zeroes .grad in place before each row and appends x.grad itself: every row is the last one."""
    x = x.detach().requires_grad_(True)
    y = f(x)
    rows = []
    for i in range(y.shape[0]):
        if x.grad is not None:
            x.grad.zero_()
        v = torch.zeros_like(y)
        v[i] = 1.0
        y.backward(gradient=v, retain_graph=True)
        rows.append(x.grad)
    return torch.stack(rows)


def jacobian_aliased_rows_zeroed_after(f, x):
    """Appends x.grad, then zeroes it in place: every row is the same, zeroed, tensor."""
    x = x.detach().requires_grad_(True)
    y = f(x)
    rows = []
    for i in range(y.shape[0]):
        v = torch.zeros_like(y)
        v[i] = 1.0
        y.backward(gradient=v, retain_graph=True)
        rows.append(x.grad)
        x.grad.zero_()
    return torch.stack(rows)


def jacobian_finite_differences(f, x):
    """Column j from (f(x + h e_j) - f(x - h e_j)) / 2h, in float64."""
    x = x.detach().to(torch.float64)
    h = 1e-6
    columns = []
    for j in range(x.shape[0]):
        e = torch.zeros_like(x)
        e[j] = h
        columns.append((f(x + e) - f(x - e)) / (2 * h))
    return torch.stack(columns, dim=1)


def jacobian_without_requires_grad(f, x):
    y = f(x)  # x does not require grad: nothing is recorded
    return torch.zeros(y.shape[0], x.shape[0], dtype=y.dtype)


def jacobian_transposed(f, x):
    return solution("02.jacobian")(f, x).T


def jacobian_forward_ad(f, x):
    """Column j by forward mode: the tangent of f(x + eps e_j)."""
    x = x.detach()
    columns = []
    with fwAD.dual_level():
        for j in range(x.shape[0]):
            dual = fwAD.make_dual(x, torch.eye(x.shape[0], dtype=x.dtype)[j])
            columns.append(fwAD.unpack_dual(f(dual)).tangent)
    return torch.stack(columns, dim=1)


def jacobian_batched_grad(f, x):
    x = x.detach().requires_grad_(True)
    y = f(x)
    (jac,) = torch.autograd.grad(y, x, torch.eye(y.shape[0], dtype=y.dtype), is_grads_batched=True)
    return jac


def jacobian_finite_differences_under_func_vmap(f, x):
    h = 1e-6
    steps = torch.eye(x.shape[0], dtype=torch.float64) * h
    return (torch.func.vmap(lambda e: (f(x + e) - f(x - e)) / (2 * h))(steps)).T


def jacobian_finite_differences_under_hidden_vmap(f, x):
    """The same through torch._functorch.apis.vmap, where torch.func gets vmap from: refused by name too."""
    from torch._functorch.apis import vmap

    h = 1e-6
    steps = torch.eye(x.shape[0], dtype=torch.float64) * h
    xr = x.detach().requires_grad_(True)
    return (vmap(lambda e: (f(xr + e) - f(xr - e)) / (2 * h))(steps)).T


def jacobian_func_vjp(f, x):
    """torch.func.vjp once, then its vjp_fn once per row: the library computes every product."""
    y, vjp_fn = torch.func.vjp(f, x)
    return torch.stack([vjp_fn(e)[0] for e in torch.eye(y.shape[0], dtype=y.dtype)])


def jacobian_functional_vjp_per_row(f, x):
    """torch.autograd.functional.vjp called once per row."""
    m = f(x).shape[0]
    return torch.stack([torch.autograd.functional.vjp(f, x, e)[1] for e in torch.eye(m, dtype=x.dtype)])


def jacobian_private_vjp(f, x):
    y, vjp_fn = functorch_impl.vjp(f, x)
    return torch.stack([vjp_fn(e)[0] for e in torch.eye(y.shape[0], dtype=y.dtype)])


def jacobian_functorch_vjp(f, x):
    y, vjp_fn = functorch.vjp(f, x)
    return torch.stack([vjp_fn(e)[0] for e in torch.eye(y.shape[0], dtype=y.dtype)])


def jacobian_dummy_call_then_differences(f, x):
    """One call that requires grad at x, then finite differences on the raw f the wrapper keeps."""
    xr = x.detach().clone().requires_grad_(True)
    f(xr)
    raw, h = _raw(f), 1e-6
    columns = [(raw(x + h * e) - raw(x - h * e)) / (2 * h) for e in torch.eye(x.shape[0], dtype=x.dtype)]
    return torch.stack(columns, dim=1).detach()


def jacobian_functorch_jacrev(f, x):
    return functorch.jacrev(f)(x)


def jacobian_functorch_jacfwd(f, x):
    return functorch.jacfwd(f)(x)


def jacobian_functorch_jvp(f, x):
    return torch.stack([functorch.jvp(f, (x,), (e,))[1] for e in torch.eye(x.shape[0], dtype=x.dtype)], 1)


def jacobian_functorch_vmap(f, x):
    """Finite differences with all columns batched by functorch.vmap."""
    h = 1e-6
    steps = torch.eye(x.shape[0], dtype=torch.float64) * h
    return (functorch.vmap(lambda e: (f(x + e) - f(x - e)) / (2 * h))(steps)).T


def jacobian_private_jacrev(f, x):
    return functorch_impl.jacrev(f)(x)


def jacobian_private_jacfwd(f, x):
    return functorch_impl.jacfwd(f)(x)


def jacobian_private_jvp(f, x):
    return torch.stack([functorch_impl.jvp(f, (x,), (e,))[1] for e in torch.eye(x.shape[0], dtype=x.dtype)], 1)


# --------------------------------------------------------------------------
# 02.sgd_step: wrong answers and shortcuts
# --------------------------------------------------------------------------


def sgd_without_reset(params, lr):
    with torch.no_grad():
        for p in params:
            if p.grad is not None:
                p -= lr * p.grad


def sgd_rebinds(params, lr):
    """p = p - lr * p.grad makes a new tensor and rebinds the loop variable: params are untouched."""
    with torch.no_grad():
        for p in params:
            if p.grad is not None:
                p = p - lr * p.grad
    for p in params:
        p.grad = None


def sgd_rebinds_list_items(params, lr):
    """Replaces the list's items with new tensors: the caller's tensors are untouched."""
    with torch.no_grad():
        for i, p in enumerate(params):
            if p.grad is not None:
                params[i] = p - lr * p.grad
    for p in params:
        p.grad = None


def sgd_under_grad(params, lr):
    """The naive update while autograd records: refused for a leaf that requires grad."""
    for p in params:
        if p.grad is not None:
            p -= lr * p.grad
        p.grad = None


def sgd_wrong_sign(params, lr):
    with torch.no_grad():
        for p in params:
            if p.grad is not None:
                p += lr * p.grad
            p.grad = None


def sgd_through_data(params, lr):
    """The pre-0.4 spelling: right values, but the change is hidden from autograd."""
    for p in params:
        if p.grad is not None:
            p.data -= lr * p.grad
        p.grad = None


def sgd_data_add_alpha(params, lr):
    """A learner's .data update with add_(alpha=-lr): the task text rules .data out."""
    for p in params:
        if p.grad is None:
            continue
        p.data.add_(p.grad.data, alpha=-lr)
        p.grad.zero_()


def sgd_assigns_data(params, lr):
    for p in params:
        if p.grad is not None:
            p.data = p.data - lr * p.grad
        p.grad = None


def sgd_turns_off_requires_grad(params, lr):
    for p in params:
        if p.grad is not None:
            p.requires_grad_(False)
            p -= lr * p.grad
        p.grad = None


def sgd_records_the_update(params, lr):
    """Dodges the leaf error by switching requires_grad off; a step size that requires grad records the update."""
    step = torch.tensor(lr, requires_grad=True)
    for p in params:
        if p.grad is not None:
            p.requires_grad_(False)
            p.sub_(step * p.grad)  # p now has grad_fn SubBackward0 and requires grad again: not a leaf
        p.grad = None


def sgd_replaces_storage(params, lr):
    with torch.no_grad():
        for p in params:
            if p.grad is not None:
                p.set_(p - lr * p.grad)  # new memory: the version moves, but p no longer holds its old storage
            p.grad = None


def sgd_crashes_on_none(params, lr):
    with torch.no_grad():
        for p in params:
            p -= lr * p.grad
            p.grad = None


def sgd_zeroes_before_updating(params, lr):
    with torch.no_grad():
        for p in params:
            if p.grad is not None:
                p.grad.zero_()
                p -= lr * p.grad


def sgd_fixed_lr(params, lr):
    """Ignores the lr argument: right at the first step (lr = 0.1), wrong at the second."""
    solution("02.sgd_step")(params, 0.1)


def sgd_steps_the_unused_tensor(params, lr):
    with torch.no_grad():
        for p in params:
            p -= lr * (p.grad if p.grad is not None else torch.ones_like(p))
            p.grad = None


def sgd_torch_optim(params, lr):
    torch.optim.SGD(params, lr=lr).step()
    for p in params:
        p.grad = None


def sgd_torch_optim_adam_subclass(params, lr):
    """Any torch optimizer is refused, a learner's subclass of one too."""

    class Mine(torch.optim.Adam):
        pass

    Mine(params, lr=lr).step()


def sgd_functional(params, lr):
    from torch.optim.sgd import sgd  # torch.optim does not keep its submodule sgd as an attribute

    with_grad = [p for p in params if p.grad is not None]
    with torch.no_grad():
        sgd(with_grad, [p.grad for p in with_grad], [None] * len(with_grad), weight_decay=0.0,
            momentum=0.0, lr=lr, dampening=0.0, nesterov=False, maximize=False)
    for p in params:
        p.grad = None


#: A private alias (torch._functorch...) is the same function object as its public name; the guard may
#: report either name, so those rows expect the short name and "does it for you".
WRONG = [
    ("02.derivative", derivative_returns_value, "not f'(x)"),
    ("02.derivative", derivative_returns_tensor, "should be a Python float, got Tensor"),
    ("02.derivative", derivative_without_requires_grad, "does not require grad"),
    ("02.derivative", derivative_finite_difference, "finite differences"),
    ("02.derivative", derivative_finite_difference_with_grad, "finite differences"),
    ("02.derivative", derivative_catches_the_refusal, "finite differences"),
    ("02.derivative", derivative_finite_difference_under_vmap, "cannot be read"),
    ("02.derivative", derivative_complex_step, "complex-step"),
    ("02.derivative", derivative_integer_point, "int64"),
    ("02.derivative", derivative_dummy_call_then_differences, "finite differences"),
    ("02.derivative", derivative_differences_on_any_attribute, "finite differences"),
    ("02.second_derivative", second_derivative_dummy_call_then_differences, "finite differences"),
    ("02.second_derivative", second_derivative_differences_on_any_attribute, "finite differences"),
    ("02.derivative", derivative_func_grad, "torch.func.grad"),
    ("02.derivative", derivative_func_grad_and_value, "torch.func.grad_and_value"),
    ("02.derivative", derivative_functional_vjp, "torch.autograd.functional.vjp"),
    ("02.derivative", derivative_functorch_grad, "functorch.grad"),
    ("02.derivative", derivative_functorch_grad_and_value, "functorch.grad_and_value"),
    ("02.derivative", derivative_functorch_vjp, "functorch.vjp"),
    ("02.derivative", derivative_functorch_jvp, "functorch.jvp"),
    ("02.derivative", derivative_private_apis_grad, "grad` does it for you"),
    ("02.derivative", derivative_private_vjp, "vjp` does it for you"),
    ("02.second_derivative", second_derivative_finite_difference_with_grad, "finite differences"),
    ("02.second_derivative", second_derivative_of_autograd_by_differences, "finite differences"),
    ("02.second_derivative", second_derivative_is_first, "FIRST derivative"),
    ("02.second_derivative", second_derivative_without_create_graph, "no grad_fn"),
    ("02.second_derivative", second_derivative_accumulated, "f' + f''"),
    ("02.second_derivative", second_derivative_complex_step_on_autograd, "complex-step"),
    ("02.second_derivative", second_derivative_hessian, "torch.autograd.functional.hessian"),
    ("02.second_derivative", second_derivative_func_hessian, "torch.func.hessian"),
    ("02.second_derivative", second_derivative_func_grad_twice, "torch.func.grad"),
    ("02.second_derivative", second_derivative_hvp, "torch.autograd.functional.hvp"),
    ("02.second_derivative", second_derivative_jacfwd_of_jacrev, "torch.func.jac"),
    ("02.second_derivative", second_derivative_functorch_hessian, "functorch.hessian"),
    ("02.second_derivative", second_derivative_functorch_grad_twice, "functorch.grad"),
    ("02.second_derivative", second_derivative_functorch_jacfwd_of_jacrev, "functorch.jac"),
    ("02.second_derivative", second_derivative_private_hessian, "hessian` does it for you"),
    ("02.second_derivative", second_derivative_private_grad_twice, "grad` does it for you"),
    ("02.jacobian", jacobian_accumulating, "accumulates"),
    ("02.jacobian", jacobian_complex_step, "complex-step"),
    ("02.jacobian", jacobian_aliased_rows, "LAST row"),
    ("02.jacobian", jacobian_aliased_rows_zeroed_after, "every entry of your answer is 0"),
    ("02.jacobian", jacobian_transposed, "transpose"),
    ("02.jacobian", jacobian_finite_differences, "finite differences"),
    ("02.jacobian", jacobian_without_requires_grad, "does not require grad"),
    ("02.jacobian", jacobian_forward_ad, "torch.autograd.forward_ad.make_dual"),
    ("02.jacobian", jacobian_batched_grad, "is_grads_batched=True"),
    ("02.jacobian", jacobian_finite_differences_under_func_vmap, "torch.func.vmap"),
    ("02.jacobian", jacobian_finite_differences_under_hidden_vmap, "vmap`, which batches"),
    ("02.jacobian", jacobian_functorch_jacrev, "functorch.jacrev"),
    ("02.jacobian", jacobian_func_vjp, "torch.func.vjp"),
    ("02.jacobian", jacobian_functional_vjp_per_row, "torch.autograd.functional.vjp"),
    ("02.jacobian", jacobian_private_vjp, "vjp` does it for you"),
    ("02.jacobian", jacobian_functorch_vjp, "functorch.vjp"),
    ("02.jacobian", jacobian_dummy_call_then_differences, "finite differences"),
    ("02.jacobian", jacobian_functorch_jacfwd, "functorch.jacfwd"),
    ("02.jacobian", jacobian_functorch_jvp, "functorch.jvp"),
    ("02.jacobian", jacobian_functorch_vmap, "functorch.vmap"),
    ("02.jacobian", jacobian_private_jacrev, "jacrev` does it for you"),
    ("02.jacobian", jacobian_private_jacfwd, "jacfwd` does it for you"),
    ("02.jacobian", jacobian_private_jvp, "jvp` does it for you"),
    ("02.jacobian", lambda f, x: torch.autograd.functional.jacobian(f, x), "torch.autograd.functional.jacobian"),
    ("02.jacobian", lambda f, x: torch.func.jacrev(f)(x), "torch.func.jacrev"),
    ("02.jacobian", lambda f, x: torch.func.jacfwd(f)(x), "torch.func.jacfwd"),
    ("02.jacobian", lambda f, x: torch.vmap(lambda v: v)(x) @ torch.eye(x.shape[0]), "vmap`, which batches"),
    (
        "02.jacobian",
        lambda f, x: torch.stack([torch.func.jvp(f, (x,), (e,))[1] for e in torch.eye(x.shape[0], dtype=x.dtype)], 1),
        "torch.func.jvp",
    ),
    ("02.sgd_step", sgd_without_reset, ".grad still holds"),
    ("02.sgd_step", sgd_rebinds, "did not change"),
    ("02.sgd_step", sgd_rebinds_list_items, "did not change"),
    ("02.sgd_step", sgd_under_grad, "leaf Variable"),
    ("02.sgd_step", sgd_wrong_sign, "uphill"),
    ("02.sgd_step", sgd_through_data, ".data"),
    ("02.sgd_step", sgd_data_add_alpha, "your update went through .data"),
    ("02.sgd_step", sgd_assigns_data, ".data"),
    ("02.sgd_step", sgd_turns_off_requires_grad, "no longer requires grad"),
    ("02.sgd_step", sgd_records_the_update, "grad_fn SubBackward0"),
    ("02.sgd_step", sgd_replaces_storage, "new memory"),
    ("02.sgd_step", sgd_crashes_on_none, "is None"),
    ("02.sgd_step", sgd_zeroes_before_updating, "did not change"),
    ("02.sgd_step", sgd_fixed_lr, "lr = 0.05"),
    ("02.sgd_step", sgd_steps_the_unused_tensor, "received no gradient"),
    ("02.sgd_step", sgd_torch_optim, "torch.optim"),
    ("02.sgd_step", sgd_torch_optim_adam_subclass, "torch.optim"),
    ("02.sgd_step", sgd_functional, "torch.optim.sgd.sgd"),
]


@pytest.mark.parametrize(
    ("name", "wrong", "words"),
    WRONG,
    ids=[f"{n}-{getattr(w, '__name__', 'lambda')}-{i}" for i, (n, w, _) in enumerate(WRONG)],
)
def test_wrong_answer_fails_with_hint(name, wrong, words):
    assert_rejected(name, wrong, words)


@pytest.mark.parametrize(
    ("name", "wrong", "first_tier", "fuller"),
    [
        ("02.second_derivative", second_derivative_accumulated, "216", "t.grad = None"),
        ("02.jacobian", jacobian_aliased_rows, "LAST row", ".clone()"),
        ("02.jacobian", jacobian_accumulating, "accumulates", "x.grad = None"),
        ("02.second_derivative", second_derivative_without_create_graph, "no grad_fn", "create_graph=True"),
        ("02.derivative", derivative_finite_difference_with_grad, "finite differences", "requires_grad=True"),
        ("02.sgd_step", sgd_under_grad, "leaf Variable", "torch.no_grad()"),
        ("02.sgd_step", sgd_without_reset, ".grad still holds", "zero_grad"),
    ],
)
def test_the_fix_is_in_the_fuller_hint_not_the_first(name, wrong, first_tier, fuller):
    """The first failure names the case and the symptom; hint(name) then gives the fix."""
    from helpers.exercises import _failures

    _failures.pop(name, None)  # a first attempt
    result = assert_rejected(name, wrong, first_tier)
    assert fuller not in result.message, f"the first failure already gives the fix: {result.message}"
    assert f'hint("{name}")' in result.message
    assert fuller in hint(name, show=False)
    second = check(name, wrong, show=False)  # a second failed attempt shows the fuller hint itself
    assert fuller in second.message, second.message


def test_hint_before_any_failure_is_a_general_one():
    from helpers.exercises import _fuller

    _fuller.pop("02.derivative", None)
    assert "section 2" in hint("02.derivative", show=False)
    _fuller.pop("02.second_derivative", None)
    assert "create_graph" in hint("02.second_derivative", show=False)
    _fuller.pop("02.jacobian", None)
    assert "vector-Jacobian product" in hint("02.jacobian", show=False)
    _fuller.pop("02.sgd_step", None)
    assert "torch.no_grad()" in hint("02.sgd_step", show=False)


#: A call with arguments of the function the exercise asks for, as code: the answer, not a hint.
_CODE = re.compile(r"autograd\.grad\(\w|\(\w+,\) =|\w+ -= lr \* \w+\.grad")


@pytest.mark.parametrize(("name", "wrong", "words"), WRONG, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(WRONG)])
def test_the_fuller_hint_names_the_idea_not_the_code(name, wrong, words):
    """Tier 2 says what to use (create_graph, grad_outputs = e_i, retain_graph, no_grad); solution() has the code."""
    from helpers.exercises import EXERCISES, _fuller

    _fuller.pop(name, None)
    check(name, wrong, show=False)
    for text in (hint(name, show=False), EXERCISES[name].hint):
        assert not _CODE.search(text), f"the hint for {name} pastes code: {text}"


def test_the_general_hints_name_the_concept():
    from helpers.exercises import EXERCISES

    second = EXERCISES["02.second_derivative"].hint
    assert "create_graph=True" in second and "torch.autograd.grad" in second and "reference cycle" in second, second
    jac = EXERCISES["02.jacobian"].hint
    assert "e_i" in jac and "section 5" in jac and "retain_graph" in jac, jac


@pytest.mark.parametrize(
    ("name", "recipe"),
    [
        ("02.derivative", ("requires_grad=True", "evaluate f", ".item()", "Make the point")),
        ("02.second_derivative", ("both passes", "second pass", "same tensor", "first pass")),
        ("02.jacobian", ("requires_grad=True", "call f once", "Stack", "stack", "[m, n]")),
        ("02.sgd_step", ("-=", "sub_", "add_", "alpha", "to None", "zero it")),
    ],
)
def test_the_general_hint_leaves_the_recipe_to_the_solution(name, recipe):
    """Tier 2 names the idea and the section; the step-by-step algorithm is solution()'s."""
    from helpers.exercises import EXERCISES

    text = EXERCISES[name].hint
    assert "section" in text, text
    for step in recipe:
        assert step not in text, f"the general hint for {name} spells out {step!r}: {text}"


def test_the_raw_test_function_is_out_of_reach():
    """The wrapper keeps no unguarded f in an attribute: every callable in it refuses a call away from x."""
    watched = ch02._Watched(torch.sin, "f = sin(x)", 0.7)
    assert not hasattr(watched, "f")
    for value in vars(watched).values():
        if callable(value):
            with pytest.raises(AssertionError, match="finite differences"):
                value(torch.tensor(0.7 + 1e-5, dtype=torch.float64))
    with pytest.raises(AssertionError, match="finite differences"):
        watched.verify()  # the refusal is remembered even if the answer catches it


def test_the_attribute_attacks_would_be_right_if_the_raw_function_were_reachable():
    """Why the raw f must be private: finite differences on it pass the value tolerance."""
    class Exposed:
        def __init__(self, f):
            self.f = f

        def __call__(self, t):
            return self.f(t)

    for label, f, x, _, first, second in ch02._SCALAR_CASES:
        assert ch02._close(derivative_dummy_call_then_differences(Exposed(f), x), first), label
        assert math.isclose(second_derivative_dummy_call_then_differences(Exposed(f), x), second, rel_tol=1e-3,
                            abs_tol=1e-3), label


def test_second_derivative_of_x4_differs_from_first_away_from_3():
    """At x = 3 both derivatives of x**4 are 108; at x = 2 they are 32 and 48."""
    d1, d2 = solution("02.derivative"), solution("02.second_derivative")
    assert d1(lambda t: t**4, 3.0) == pytest.approx(108.0)
    assert d2(lambda t: t**4, 3.0) == pytest.approx(108.0)
    assert d1(lambda t: t**4, 2.0) == pytest.approx(32.0)
    assert d2(lambda t: t**4, 2.0) == pytest.approx(48.0)


def test_accumulated_second_derivative_is_first_plus_second():
    """The case the f' + f'' hint is written for: 108 + 108 = 216 for x**4 at 3."""
    assert second_derivative_accumulated(lambda t: t**4, 3.0) == pytest.approx(216.0)


def test_aliased_rows_all_equal_the_last_row():
    f, point = ch02._f_products, torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    got, want = jacobian_aliased_rows(f, point), solution("02.jacobian")(f, point)
    assert torch.equal(got, want[-1].expand_as(got)) and not torch.equal(got, want)


def test_finite_differences_are_accurate_enough_to_have_passed_a_tolerance_check():
    """Why the checker watches where f is evaluated: the values alone would pass."""
    for label, f, x, _, first, _ in ch02._SCALAR_CASES:
        assert ch02._close(derivative_finite_difference_with_grad(f, x), first), label


def test_the_shortcut_candidates_would_be_right_if_allowed():
    """The refused library answers are refused for being shortcuts, not for wrong values."""
    f, x = ch02._f_coupled, torch.tensor([0.3, -1.0, 2.0, 0.5], dtype=torch.float64)
    want = solution("02.jacobian")(f, x)
    for got in (jacobian_forward_ad(f, x), jacobian_batched_grad(f, x), torch.func.jacrev(f)(x)):
        assert torch.allclose(got, want, atol=1e-10)
    assert torch.allclose(jacobian_finite_differences_under_func_vmap(f, x), want, atol=1e-6)
    assert second_derivative_func_grad_twice(torch.sin, 0.7) == pytest.approx(solution("02.second_derivative")(torch.sin, 0.7))
    assert second_derivative_hessian(torch.sin, 0.7) == pytest.approx(solution("02.second_derivative")(torch.sin, 0.7))
    for label, f, x, _, first, second in ch02._SCALAR_CASES:  # the complex step is exact to rounding here
        assert derivative_complex_step(f, x) == pytest.approx(first, rel=1e-12), label
        assert derivative_func_grad(f, x) == pytest.approx(first, rel=1e-12), label
        assert second_derivative_complex_step_on_autograd(f, x) == pytest.approx(second, rel=1e-10), label
    point = torch.tensor([0.3, -1.0, 2.0, 0.5], dtype=torch.float64)
    assert torch.allclose(jacobian_complex_step(ch02._f_coupled, point), want, atol=1e-12)


def test_the_functorch_routes_would_be_right_if_allowed():
    """The functorch aliases and the torch._functorch functions are refused as shortcuts, not for wrong values."""
    d1, d2, jac = solution("02.derivative"), solution("02.second_derivative"), solution("02.jacobian")
    for derivative in (derivative_functorch_grad, derivative_functorch_grad_and_value, derivative_functorch_vjp,
                       derivative_functorch_jvp, derivative_private_apis_grad, derivative_private_vjp):
        assert derivative(torch.sin, 0.7) == pytest.approx(d1(torch.sin, 0.7), rel=1e-12), derivative.__name__
    for second in (second_derivative_functorch_hessian, second_derivative_functorch_grad_twice,
                   second_derivative_functorch_jacfwd_of_jacrev, second_derivative_private_hessian,
                   second_derivative_private_grad_twice):
        assert second(torch.sin, 0.7) == pytest.approx(d2(torch.sin, 0.7), rel=1e-12), second.__name__
    x = torch.tensor([0.3, -1.0, 2.0, 0.5], dtype=torch.float64)
    want = jac(ch02._f_coupled, x)
    for jacobian in (jacobian_functorch_jacrev, jacobian_functorch_jacfwd, jacobian_functorch_jvp,
                     jacobian_private_jacrev, jacobian_private_jacfwd, jacobian_private_jvp):
        assert torch.allclose(jacobian(ch02._f_coupled, x), want, atol=1e-10), jacobian.__name__
    assert torch.allclose(jacobian_functorch_vmap(ch02._f_coupled, x), want, atol=1e-6)


def test_functorch_imported_inside_the_answer_is_refused(monkeypatch):
    """A lazy shortcut: functorch not yet imported when the check starts, imported by the answer itself."""
    import sys

    monkeypatch.delitem(sys.modules, "functorch")
    assert_rejected("02.derivative", derivative_functorch_imported_inside, "functorch.grad")


def test_the_checks_leave_functorch_and_torch_func_working():
    """The names are rebound only during a check."""
    check("02.jacobian", jacobian_functorch_jacrev, show=False)
    check("02.second_derivative", second_derivative_private_hessian, show=False)
    assert functorch_impl.jacrev is torch.func.jacrev and functorch_apis.grad is torch.func.grad
    assert functorch.grad.__module__ == "torch._functorch.deprecated"
    assert torch.func.grad(torch.sin)(torch.tensor(0.0)).item() == pytest.approx(1.0)


def test_sgd_step_through_data_names_the_rule():
    """The task text rules .data updates out; the message says that one was used, not only what autograd saw."""
    result = assert_rejected("02.sgd_step", sgd_data_add_alpha, "went through .data", "rules out .data updates")
    assert "no_grad" not in result.message.split("Hint:")[0], result.message


def test_the_refused_sgd_steps_would_be_right_if_allowed():
    """torch.optim.SGD, its functional form and the .data update give the reference's values."""
    for step in (sgd_torch_optim, sgd_functional, sgd_through_data):
        mine, ref = ch02._sgd_params(), ch02._sgd_params()
        for params in (mine, ref):
            ch02._sgd_loss(params, 1).backward()
        step(mine, 0.1)
        solution("02.sgd_step")(ref, 0.1)
        assert all(torch.equal(a, b) for a, b in zip(mine, ref)), step.__name__


def test_the_sgd_checker_leaves_torch_optim_working():
    """The Optimizer shortcut is patched only during the check."""
    check("02.sgd_step", sgd_torch_optim, show=False)
    w = torch.nn.Parameter(torch.ones(2))
    w.grad = torch.ones(2)
    torch.optim.SGD([w], lr=0.5).step()
    assert torch.equal(w.detach(), torch.full((2,), 0.5))


# --------------------------------------------------------------------------
# Right answers written differently from the reference
# --------------------------------------------------------------------------


def derivative_float32(f, x):
    t = torch.tensor(x, requires_grad=True)  # float32, the default dtype
    f(t).backward()
    return t.grad.item()


def derivative_backward_float64(f, x):
    t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    f(t).backward()
    return float(t.grad)


def second_derivative_float32(f, x):
    t = torch.tensor(x, requires_grad=True)
    (g,) = torch.autograd.grad(f(t), t, create_graph=True)
    g.backward()
    return t.grad.item()


def second_derivative_backward_twice_with_reset(f, x):
    t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    f(t).backward(create_graph=True)
    first = t.grad
    t.grad = None
    first.backward()
    return t.grad.item()


def jacobian_backward_with_reset(f, x):
    x = x.detach().clone().requires_grad_(True)
    y = f(x)
    rows = []
    for i in range(y.shape[0]):
        x.grad = None
        y.backward(
            gradient=torch.nn.functional.one_hot(torch.tensor(i), y.shape[0]).to(y.dtype),
            retain_graph=True,
        )
        rows.append(x.grad.clone())
    return torch.stack(rows)


def jacobian_zero_and_clone(f, x):
    x = x.detach().requires_grad_(True)
    y = f(x)
    rows = []
    for i in range(y.shape[0]):
        if x.grad is not None:
            x.grad.zero_()
        y[i].backward(retain_graph=True)
        rows.append(x.grad.clone())
    return torch.stack(rows)


def jacobian_float32(f, x):
    return solution("02.jacobian")(lambda t: f(t.double()).float(), x.float())


def jacobian_plain_float32(f, x):
    """The reference's method in float32 throughout: f sees a float32 x (and A @ x must work in float32)."""
    x = x.detach().float().requires_grad_(True)
    y = f(x)
    return torch.stack([torch.autograd.grad(y[i], x, retain_graph=True)[0] for i in range(y.shape[0])])


def jacobian_reads_shape_first(f, x):
    """Calls f once on the plain x (no grad) to read m, then one autograd.grad per row on a copy that requires grad."""
    m = f(x).shape[0]
    xr = x.detach().clone().requires_grad_(True)
    return torch.stack([torch.autograd.grad(f(xr)[i], xr)[0] for i in range(m)])


def derivative_prints_value_first(f, x):
    """Evaluates f at the plain x first (to look at it), then differentiates on a tensor that requires grad."""
    _ = f(torch.tensor(x, dtype=torch.float64))
    t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(f(t), t)
    return g.item()


def sgd_add_alpha_and_zero(params, lr):
    """add_ with alpha, and .grad zeroed in place instead of set to None."""
    with torch.no_grad():
        for p in params:
            if p.grad is not None:
                p.add_(p.grad, alpha=-lr)
                p.grad.zero_()


@torch.no_grad()
def sgd_decorated_sub(params, lr):
    for p in params:
        if p.grad is None:
            continue
        p.sub_(lr * p.grad)
        p.grad = None


def sgd_foreach(params, lr):
    with_grad = [p for p in params if p.grad is not None]
    with torch.no_grad():
        torch._foreach_add_(with_grad, [p.grad for p in with_grad], alpha=-lr)
    for p in params:
        p.grad = None


RIGHT = [
    ("02.derivative", derivative_float32),
    ("02.derivative", derivative_backward_float64),
    ("02.second_derivative", second_derivative_float32),
    ("02.second_derivative", second_derivative_backward_twice_with_reset),
    ("02.jacobian", jacobian_backward_with_reset),
    ("02.jacobian", jacobian_zero_and_clone),
    ("02.jacobian", jacobian_float32),
    ("02.jacobian", jacobian_plain_float32),
    ("02.jacobian", jacobian_reads_shape_first),
    ("02.derivative", derivative_prints_value_first),
    ("02.sgd_step", sgd_add_alpha_and_zero),
    ("02.sgd_step", sgd_decorated_sub),
    ("02.sgd_step", sgd_foreach),
]


@pytest.mark.parametrize(("name", "right"), RIGHT, ids=[f"{n}-{r.__name__}" for n, r in RIGHT])
def test_right_answer_passes(name, right):
    result = check(name, right, show=False)
    assert result.passed, result.message


def test_sgd_step_private_functional_alias_is_refused():
    import torch.optim._functional as optim_functional

    def private_alias(params, lr):
        with torch.no_grad():
            grads = [p.grad for p in params if p.grad is not None]
            live = [p for p in params if p.grad is not None]
            optim_functional.sgd(live, grads, [None] * len(live), weight_decay=0.0, momentum=0.0, lr=lr,
                                 dampening=0.0, nesterov=False, maximize=False)
        for p in params:
            p.grad = None

    assert_rejected("02.sgd_step", private_alias, "does it for you")


# --------------------------------------------------------------------------
# 16-bit floats: the answer is wrong because of the dtype, and the hint says so
# --------------------------------------------------------------------------


def _derivative_in(dtype):
    def derivative_low_precision(f, x):
        t = torch.tensor(x, dtype=dtype, requires_grad=True)
        f(t).backward()
        return t.grad.item()

    return derivative_low_precision


def _second_derivative_in(dtype):
    def second_derivative_low_precision(f, x):
        t = torch.tensor(x, dtype=dtype, requires_grad=True)
        (g,) = torch.autograd.grad(f(t), t, create_graph=True)
        (g2,) = torch.autograd.grad(g, t)
        return g2.item()

    return second_derivative_low_precision


def _jacobian_in(dtype):
    def jacobian_low_precision(f, x):
        x = x.to(dtype).requires_grad_(True)
        y = f(x)
        rows = [torch.autograd.grad(y, x, e, retain_graph=True)[0] for e in torch.eye(y.shape[0], dtype=dtype)]
        return torch.stack(rows)

    return jacobian_low_precision


@pytest.mark.parametrize(("dtype", "bits"), [(torch.bfloat16, "8 significant bits"), (torch.float16, "11 significant bits")])
@pytest.mark.parametrize(
    ("name", "make"),
    [("02.derivative", _derivative_in), ("02.second_derivative", _second_derivative_in), ("02.jacobian", _jacobian_in)],
)
def test_a_16_bit_point_is_named_as_the_cause(name, make, dtype, bits):
    """Autograd in float16/bfloat16 is right but rounded: the hint blames the dtype, not the method."""
    result = assert_rejected(name, make(dtype), str(dtype).removeprefix("torch."), bits)
    assert "Use a fresh tensor" not in result.message, result.message
    assert "float32" in hint(name, show=False)


@pytest.mark.parametrize(
    ("name", "make"),
    [("02.derivative", _derivative_in), ("02.second_derivative", _second_derivative_in), ("02.jacobian", _jacobian_in)],
)
def test_the_same_answers_in_float32_and_float64_pass(name, make):
    """The dtype is the only mistake in the answers above (the checker's A @ x follows the answer's dtype)."""
    for dtype in (torch.float32, torch.float64):
        result = check(name, make(dtype), show=False)
        assert result.status == "passed", result.message


# --------------------------------------------------------------------------
# Calls without requires_grad: refused only when no call required grad
# --------------------------------------------------------------------------


def _derivative_backward_without_grad(f, x):
    t = torch.tensor(x, dtype=torch.float64)
    f(t).backward()  # RuntimeError: element 0 of tensors does not require grad
    return t.grad.item()


def _second_derivative_without_grad(f, x):
    t = torch.tensor(x, dtype=torch.float64)
    (g,) = torch.autograd.grad(f(t), t, create_graph=True)  # RuntimeError: does not require grad
    (g2,) = torch.autograd.grad(g, t)
    return g2.item()


def _jacobian_rows_without_grad(f, x):
    y = f(x)
    return torch.stack([torch.autograd.grad(y[i], x, retain_graph=True)[0] for i in range(y.shape[0])])


@pytest.mark.parametrize(
    ("name", "wrong"),
    [
        ("02.derivative", _derivative_backward_without_grad),
        ("02.second_derivative", _second_derivative_without_grad),
        ("02.jacobian", _jacobian_rows_without_grad),
    ],
)
def test_a_crash_without_requires_grad_is_blamed_on_the_point(name, wrong):
    """autograd's own RuntimeError is replaced by the hint that names the cause: x does not require grad."""
    result = assert_rejected(name, wrong, "every call had a tensor that does not require grad")
    assert "raised RuntimeError" not in result.message and "create_graph" not in result.message, result.message


def test_a_call_without_grad_next_to_one_with_grad_is_allowed():
    """_Watched refuses only an answer that never called f on a tensor that requires grad."""
    watched = ch02._Watched(torch.sin, "f = sin(x)", 0.7)
    watched(torch.tensor(0.7))
    with pytest.raises(AssertionError, match="every call had a tensor that does not require grad"):
        watched.verify()
    watched(torch.tensor(0.7, requires_grad=True))
    watched.verify()  # now one call required grad: nothing to refuse


def test_the_linear_case_follows_the_answer_dtype():
    """A float32 x gives a float32 A @ x, equal to the float64 one to float32 rounding."""
    x = torch.tensor([1.0, 2.0, -1.0])
    assert ch02._f_linear(x).dtype == torch.float32
    assert torch.allclose(ch02._f_linear(x).double(), ch02._f_linear(x.double()))
