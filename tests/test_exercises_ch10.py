"""Exercises of chapter 10: realistic wrong answers fail with a hint that names the mistake."""

from __future__ import annotations

import torch

from helpers.exercises import check, solution
from tests.exercise_support import assert_rejected

# --------------------------------------------------------------------------
# 10.sgd_step
# --------------------------------------------------------------------------


def _sgd(param, grad, buf, lr, momentum, weight_decay, nesterov, *, ema=False, lr_inside=False,
         use_buf_for_nesterov=False, decay=True, decay_after=False):
    g = grad + weight_decay * param if decay and not decay_after else grad
    if momentum == 0:
        new = param - lr * g
        return (new - lr * weight_decay * param if decay_after else new), None
    scale = lr if lr_inside else (1 - momentum if ema else 1.0)
    new_buf = scale * g if buf is None else momentum * buf + scale * g
    if lr_inside:
        return param - new_buf, new_buf
    direction = g + momentum * new_buf if nesterov and not use_buf_for_nesterov else new_buf
    new = param - lr * direction
    if decay_after:
        new = new - lr * weight_decay * param
    return new, new_buf


def test_sgd_ema_buffer_fails():
    def ema(param, grad, buf, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
        return _sgd(param, grad, buf, lr, momentum, weight_decay, nesterov, ema=True)

    assert_rejected("10.sgd_step", ema, "dampening=0")


def test_sgd_lr_inside_buffer_fails():
    def sutskever(param, grad, buf, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
        return _sgd(param, grad, buf, lr, momentum, weight_decay, nesterov, lr_inside=True)

    assert_rejected("10.sgd_step", sutskever, "inside the buffer")


def test_sgd_step_mutating_the_inputs_fails():
    """Right values, but written into the caller's param, grad and buffer: the task asks for new tensors."""
    def in_place(param, grad, buf, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
        g = grad.add_(param, alpha=weight_decay)
        if momentum == 0:
            return param.sub_(g, alpha=lr), None
        buf = g.clone() if buf is None else buf.mul_(momentum).add_(g)
        direction = g + momentum * buf if nesterov else buf
        return param.sub_(direction, alpha=lr), buf

    result = assert_rejected("10.sgd_step", in_place, "changed its input", "`param`", "in place", "new tensors")
    assert "plain SGD, step 1" in result.message, result.message


def test_sgd_step_updating_only_the_buffer_in_place_fails():
    def buffer_in_place(param, grad, buf, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
        g = grad + weight_decay * param
        if momentum == 0:
            return param - lr * g, None
        buf = g.clone() if buf is None else buf.mul_(momentum).add_(g)
        return param - lr * (g + momentum * buf if nesterov else buf), buf

    assert_rejected("10.sgd_step", buffer_in_place, "changed its input `buf` in place")


def test_sgd_nesterov_ignored_fails():
    def no_lookahead(param, grad, buf, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
        return _sgd(param, grad, buf, lr, momentum, weight_decay, nesterov, use_buf_for_nesterov=True)

    assert_rejected("10.sgd_step", no_lookahead, "nesterov=True")


def test_sgd_without_weight_decay_fails():
    def no_decay(param, grad, buf, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
        return _sgd(param, grad, buf, lr, momentum, weight_decay, nesterov, decay=False)

    assert_rejected("10.sgd_step", no_decay, "missing")


def test_sgd_without_weight_decay_only_when_momentum_is_zero_fails():
    def no_decay_without_momentum(param, grad, buf, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
        return _sgd(param, grad, buf, lr, momentum, weight_decay, nesterov, decay=momentum != 0)

    result = assert_rejected("10.sgd_step", no_decay_without_momentum, "missing")
    assert "plain SGD, weight_decay 0.1" in result.message, result.message


def test_sgd_hints_do_not_paste_the_update():
    from helpers.exercises.ch10 import _SGD_MISTAKES

    for kind, (what, more) in _SGD_MISTAKES.items():
        for text in (what, more):
            for line in ("momentum * buf + grad", "grad + momentum * buf", "buf = grad", "param - lr * buf"):
                assert line not in text, f"the {kind} hint pastes the fix {line!r}: {text}"


def test_sgd_decoupled_decay_fails():
    def decoupled(param, grad, buf, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
        return _sgd(param, grad, buf, lr, momentum, weight_decay, nesterov, decay_after=True)

    assert_rejected("10.sgd_step", decoupled, "builds momentum")


def test_sgd_returning_only_the_parameter_fails():
    def only_param(param, grad, buf, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
        return solution("10.sgd_step")(param, grad, buf, lr, momentum, weight_decay, nesterov)[0]

    assert_rejected("10.sgd_step", only_param, "tuple")


def test_sgd_stale_buffer_fails():
    def stale(param, grad, buf, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
        new_param, _ = solution("10.sgd_step")(param, grad, buf, lr, momentum, weight_decay, nesterov)
        return new_param, buf

    assert_rejected("10.sgd_step", stale, "new_buf")


def test_sgd_through_torch_optim_is_refused():
    def by_library(param, grad, buf, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
        p = param.clone().requires_grad_(True)
        opt = torch.optim.SGD([p], lr=lr, momentum=momentum, weight_decay=weight_decay, nesterov=nesterov)
        if buf is not None:
            opt.state[p]["momentum_buffer"] = buf.clone()
        p.grad = grad.clone()
        opt.step()
        new_buf = opt.state[p].get("momentum_buffer")
        return p.detach(), None if new_buf is None else new_buf.clone()

    assert_rejected("10.sgd_step", by_library, "write the SGD update yourself", "torch.optim.SGD")


def test_sgd_through_the_functional_sgd_is_refused():
    from torch.optim.sgd import sgd

    def functional(param, grad, buf, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
        p, bufs = param.clone(), [None if buf is None else buf.clone()]
        sgd([p], [grad.clone()], bufs, weight_decay=weight_decay, momentum=momentum, lr=lr,
            dampening=0.0, nesterov=nesterov, maximize=False)
        return p, bufs[0] if momentum else None

    assert_rejected("10.sgd_step", functional, "write the SGD update yourself")


def test_sgd_with_torch_ops_is_accepted():
    """Tensor methods with alpha=, out of place (the task asks for new tensors, the inputs left unchanged)."""
    def with_ops(param, grad, buf, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
        g = grad.add(param, alpha=weight_decay)
        if momentum == 0:
            return param.add(g, alpha=-lr), None
        buf = g.clone() if buf is None else buf.mul(momentum).add(g)
        return param.add(g.add(buf, alpha=momentum) if nesterov else buf, alpha=-lr), buf

    assert check("10.sgd_step", with_ops, show=False).passed


def test_sgd_in_place_on_its_own_copies_is_accepted():
    """In-place operations on tensors the function made itself leave the caller's inputs alone: fine."""
    def on_copies(param, grad, buf, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
        p, g = param.clone(), grad.clone().add_(param, alpha=weight_decay)
        if momentum == 0:
            return p.add_(g, alpha=-lr), None
        b = g.clone() if buf is None else buf.clone().mul_(momentum).add_(g)
        p.add_(g.add(b, alpha=momentum) if nesterov else b, alpha=-lr)
        return p, b

    assert check("10.sgd_step", on_copies, show=False).passed


def test_sgd_through_the_private_sgd_implementations_is_refused():
    """torch.optim.sgd's single-tensor, multi-tensor and fused steps, and the fused kernel itself (issue 17)."""
    def private(name):
        def answer(param, grad, buf, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
            import torch.optim.sgd as sgd_module

            step = getattr(sgd_module, name)
            p, bufs = param.clone(), [None if buf is None else buf.clone()]
            step([p], [grad.clone()], bufs, None, None, weight_decay=weight_decay, momentum=momentum, lr=lr,
                 dampening=0.0, nesterov=nesterov, maximize=False, has_sparse_grad=False)
            return p, bufs[0] if momentum else None

        return answer

    def fused(param, grad, buf, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
        p, b = param.clone(), (torch.zeros_like(param) if buf is None else buf.clone())
        torch._fused_sgd_([p], [grad.clone()], [b] if momentum else [], weight_decay=weight_decay,
                          momentum=momentum, lr=lr, dampening=0.0, nesterov=nesterov, maximize=False,
                          is_first_step=buf is None)
        return p, b if momentum else None

    for name in ("_single_tensor_sgd", "_multi_tensor_sgd"):
        assert_rejected("10.sgd_step", private(name), "write the SGD update yourself", f"torch.optim.sgd.{name}")
    assert_rejected("10.sgd_step", fused, "write the SGD update yourself", "_fused_sgd_")


def test_sgd_with_foreach_arithmetic_is_accepted():
    """torch._foreach_* are element-wise arithmetic: the answer still writes the update rule itself."""
    def with_foreach(param, grad, buf, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
        (g,) = torch._foreach_add([grad], [param], alpha=weight_decay)
        if momentum == 0:
            return torch._foreach_add([param], [g], alpha=-lr)[0], None
        b = g.clone() if buf is None else torch._foreach_add(torch._foreach_mul([buf], momentum), [g])[0]
        direction = g + momentum * b if nesterov else b
        return torch._foreach_add([param], [direction], alpha=-lr)[0], b

    assert check("10.sgd_step", with_foreach, show=False).passed


def test_sgd_buffer_that_is_the_gradient_itself_fails():
    """buf = g on the first step, with no weight decay, returns the caller's grad object: not a new tensor."""
    def aliased(param, grad, buf, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
        g = grad + weight_decay * param if weight_decay else grad
        if momentum == 0:
            return param - lr * g, None
        buf = g if buf is None else momentum * buf + g
        return param - lr * (g + momentum * buf if nesterov else buf), buf

    def a_view(param, grad, buf, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
        g = grad + weight_decay * param if weight_decay else grad
        if momentum == 0:
            return param - lr * g, None
        buf = g.view(g.shape) if buf is None else momentum * buf + g
        return param - lr * (g + momentum * buf if nesterov else buf), buf

    assert_rejected("10.sgd_step", aliased, "new_buf", "`grad` itself", "new tensors")
    assert_rejected("10.sgd_step", a_view, "new_buf", "`grad` itself")


def test_sgd_task_states_what_is_refused():
    from helpers.exercises import EXERCISES

    task = EXERCISES["10.sgd_step"].task
    assert "torch.optim.sgd" in task and "_fused_sgd_" in task and "none of them returned" in task


# --------------------------------------------------------------------------
# 10.decay_groups
# --------------------------------------------------------------------------


def test_decay_groups_by_name_fails():
    def by_name(model, weight_decay):
        decay = [p for n, p in model.named_parameters() if p.requires_grad and not n.endswith("bias")]
        no_decay = [p for n, p in model.named_parameters() if p.requires_grad and n.endswith("bias")]
        return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]

    assert_rejected("10.decay_groups", by_name, "BatchNorm", "1-D")


def test_decay_groups_by_name_keywords_fails():
    def by_keywords(model, weight_decay):
        def exempt(name):
            return any(word in name for word in ("bias", "norm", "bn", "ln"))

        trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        return [{"params": [p for n, p in trainable if not exempt(n)], "weight_decay": weight_decay},
                {"params": [p for n, p in trainable if exempt(n)], "weight_decay": 0.0}]

    assert_rejected("10.decay_groups", by_keywords, "1-D")


def test_decay_groups_by_norm_types_fails():
    def by_types(model, weight_decay):
        norm_types = (torch.nn.BatchNorm1d, torch.nn.LayerNorm, torch.nn.RMSNorm, torch.nn.GroupNorm)
        decay, no_decay = [], []
        for module in model.modules():
            for pname, p in module.named_parameters(recurse=False):
                if p.requires_grad and all(p is not q for q in decay + no_decay):
                    (no_decay if isinstance(module, norm_types) or pname == "bias" else decay).append(p)
        return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]

    result = assert_rejected("10.decay_groups", by_types, "1-D")
    assert "d.weight" in result.message, result.message  # PReLU's slopes: neither a bias nor a norm


def test_decay_groups_with_frozen_parameters_fails():
    def with_frozen(model, weight_decay):
        decay = [p for p in model.parameters() if p.ndim >= 2]
        no_decay = [p for p in model.parameters() if p.ndim < 2]
        return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]

    assert_rejected("10.decay_groups", with_frozen, "frozen")


def test_decay_groups_walking_modules_fails():
    def walking(model, weight_decay):
        decay, no_decay = [], []
        for module in model.modules():
            for p in module.parameters(recurse=False):
                if p.requires_grad:
                    (decay if p.ndim >= 2 else no_decay).append(p)
        return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]

    assert_rejected("10.decay_groups", walking, "twice", "tied")


def test_decay_groups_swapped_fails():
    def swapped(model, weight_decay):
        groups = solution("10.decay_groups")(model, weight_decay)
        return [{"params": groups[1]["params"], "weight_decay": weight_decay},
                {"params": groups[0]["params"], "weight_decay": 0.0}]

    assert_rejected("10.decay_groups", swapped, "1-D")


def test_decay_groups_same_decay_everywhere_fails():
    def one_decay(model, weight_decay):
        groups = solution("10.decay_groups")(model, weight_decay)
        return [{**g, "weight_decay": weight_decay} for g in groups]

    assert_rejected("10.decay_groups", one_decay, "'weight_decay': 0.0")


def test_decay_groups_everything_in_both_fails():
    def both(model, weight_decay):
        params = [p for p in model.parameters() if p.requires_grad]
        return [{"params": params, "weight_decay": weight_decay}, {"params": params, "weight_decay": 0.0}]

    assert_rejected("10.decay_groups", both, "both groups")


def test_decay_groups_missing_norm_layers_fails():
    def only_linear(model, weight_decay):
        decay, no_decay = [], []
        for module in model.modules():
            if isinstance(module, torch.nn.Linear | torch.nn.Conv1d | torch.nn.Embedding):
                for p in module.parameters(recurse=False):
                    if p.requires_grad and all(p is not q for q in decay + no_decay):
                        (decay if p.ndim >= 2 else no_decay).append(p)
        return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]

    assert_rejected("10.decay_groups", only_linear, "neither group")


def test_decay_groups_with_generators_fails():
    def generators(model, weight_decay):
        trainable = [p for p in model.parameters() if p.requires_grad]
        return [{"params": (p for p in trainable if p.ndim >= 2), "weight_decay": weight_decay},
                {"params": (p for p in trainable if p.ndim < 2), "weight_decay": 0}]

    assert_rejected("10.decay_groups", generators, "generator", "Pitfall 1")


def test_decay_groups_with_tuples_is_accepted():
    def tuples(model, weight_decay):
        return [{**g, "params": tuple(g["params"])} for g in solution("10.decay_groups")(model, weight_decay)]

    assert check("10.decay_groups", tuples, show=False).passed


def test_hints_do_not_give_the_answer_away():
    from helpers.exercises.ch10 import _SGD_MISTAKES

    _, ema_more = _SGD_MISTAKES["ema"]
    _, nesterov_more = _SGD_MISTAKES["nesterov_ignored"]
    assert "gradient itself" not in ema_more, ema_more
    assert "scaled by momentum" not in nesterov_more, nesterov_more
    import helpers.exercises.ch10 as ch10

    source = open(ch10.__file__, encoding="utf-8").read()
    assert "remove_duplicate=True" not in source
