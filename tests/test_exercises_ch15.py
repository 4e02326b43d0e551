"""Exercises of chapter 15: realistic wrong answers fail with a hint (the generic checks
of every exercise live in tests/test_exercises.py)."""

from __future__ import annotations

import torch

from helpers.exercises import check, solution
from tests.exercise_support import assert_rejected

# --------------------------------------------------------------------------
# 15.float_limits
# --------------------------------------------------------------------------


def _limits(max_fn, tiny_fn=lambda b, m: 2.0 ** (1 - b), eps_fn=lambda m: 2.0**-m):
    def candidate(e, m):
        bias = 2 ** (e - 1) - 1
        return max_fn(bias, m), tiny_fn(bias, m), eps_fn(m)

    return candidate


def test_float_limits_without_mantissa_fails():
    assert_rejected("15.float_limits", _limits(lambda b, m: 2.0**b), "mantissa")


def test_float_limits_using_the_reserved_exponent_fails():
    assert_rejected("15.float_limits", _limits(lambda b, m: (2 - 2.0**-m) * 2.0 ** (b + 1)), "inf and NaN")


def test_float_limits_smallest_normal_off_by_one_fails():
    assert_rejected("15.float_limits", _limits(lambda b, m: (2 - 2.0**-m) * 2.0**b, tiny_fn=lambda b, m: 2.0**-b), "subnormals")


def test_float_limits_unit_roundoff_instead_of_eps_fails():
    wrong = _limits(lambda b, m: (2 - 2.0**-m) * 2.0**b, eps_fn=lambda m: 2.0 ** -(m + 1))
    assert_rejected("15.float_limits", wrong, "unit roundoff")


def test_float_limits_lookup_table_fails():
    table = {(5, 10): torch.float16, (8, 7): torch.bfloat16, (8, 23): torch.float32, (11, 52): torch.float64,
             (5, 2): torch.float8_e5m2}

    def lookup(e, m):
        info = torch.finfo(table.get((e, m), torch.float32))
        return info.max, info.smallest_normal, info.eps

    assert_rejected("15.float_limits", lookup, "looked the limits up", "torch.finfo", "yourself")


def _formula(e, m):
    bias = 2 ** (e - 1) - 1
    return (2 - 2.0**-m) * 2.0**bias, 2.0 ** (1 - bias), 2.0**-m


def test_float_limits_lookup_with_the_formula_as_fallback_fails():
    """torch.finfo for the named formats, the formula only for the made-up one: still a lookup."""
    table = {(5, 10): torch.float16, (8, 7): torch.bfloat16, (8, 23): torch.float32, (11, 52): torch.float64,
             (5, 2): torch.float8_e5m2}

    def finfo_first(e, m):
        if (e, m) in table:
            info = torch.finfo(table[(e, m)])
            return info.max, info.smallest_normal, info.eps
        return _formula(e, m)

    assert_rejected("15.float_limits", finfo_first, "torch.finfo", "yourself")


def test_float_limits_numpy_finfo_fails_even_when_the_refusal_is_caught():
    import numpy as np

    def numpy_first(e, m):
        try:
            info = np.finfo({(5, 10): np.float16, (8, 23): np.float32, (11, 52): np.float64}[(e, m)])
            return float(info.max), float(info.smallest_normal), float(info.eps)
        except Exception:
            return _formula(e, m)

    assert_rejected("15.float_limits", numpy_first, "numpy.finfo", "yourself")


def test_float_limits_finfo_works_again_after_the_check():
    import numpy as np

    check("15.float_limits", lambda e, m: torch.finfo(torch.float16), show=False)
    assert torch.finfo(torch.float16).eps == 2.0**-10 and float(np.finfo(np.float16).eps) == 2.0**-10


def test_float_limits_tensors_are_accepted():
    def as_tensors(e, m):
        return tuple(torch.tensor(v, dtype=torch.float64) for v in solution("15.float_limits")(e, m))

    assert check("15.float_limits", as_tensors, show=False).passed


# --------------------------------------------------------------------------
# 15.accumulate_gradients
# --------------------------------------------------------------------------


def test_accumulate_without_scaling_fails():
    def unscaled(model, loss_fn, micro_batches):
        model.zero_grad()
        for x, y in micro_batches:
            loss_fn(model(x), y).backward()

    assert_rejected("15.accumulate_gradients", unscaled, "sum")


def test_accumulate_dividing_by_k_fails_for_unequal_sizes():
    def by_k(model, loss_fn, micro_batches):
        model.zero_grad()
        for x, y in micro_batches:
            (loss_fn(model(x), y) / len(micro_batches)).backward()

    assert_rejected("15.accumulate_gradients", by_k, "same size")


def test_accumulate_one_pass_over_the_concatenated_batch_fails():
    def concatenated(model, loss_fn, micro_batches):
        model.zero_grad()
        x = torch.cat([x for x, _ in micro_batches])
        y = torch.cat([y for _, y in micro_batches])
        loss_fn(model(x), y).backward()

    assert_rejected("15.accumulate_gradients", concatenated, "more than the largest micro-batch")


def test_accumulate_extra_forward_passes_fail():
    def twice(model, loss_fn, micro_batches):
        solution("15.accumulate_gradients")(model, loss_fn, micro_batches)
        with torch.no_grad():
            model(micro_batches[0][0])  # an extra forward pass, e.g. to "check" the output

    assert_rejected("15.accumulate_gradients", twice, "one forward pass per micro-batch")


def test_accumulate_zeroing_inside_the_loop_fails():
    def zero_each_time(model, loss_fn, micro_batches):
        total = sum(len(y) for _, y in micro_batches)
        for x, y in micro_batches:
            model.zero_grad()
            (loss_fn(model(x), y) * len(y) / total).backward()

    assert_rejected("15.accumulate_gradients", zero_each_time, "only the last")


def test_accumulate_without_clearing_old_gradients_fails():
    def no_zero(model, loss_fn, micro_batches):
        total = sum(len(y) for _, y in micro_batches)
        for x, y in micro_batches:
            (loss_fn(model(x), y) * len(y) / total).backward()

    assert_rejected("15.accumulate_gradients", no_zero, "zero_grad")


def test_accumulate_with_an_optimizer_step_fails():
    def with_step(model, loss_fn, micro_batches):
        solution("15.accumulate_gradients")(model, loss_fn, micro_batches)
        torch.optim.SGD(model.parameters(), lr=0.1).step()

    assert_rejected("15.accumulate_gradients", with_step, "optimizer step")


# --------------------------------------------------------------------------
# 15.clip_grad_norm
# --------------------------------------------------------------------------


def _global_norm(grads):
    return torch.sqrt(sum(g.pow(2).sum() for g in grads))


def test_clip_returning_norm_after_clipping_fails():
    def after(parameters, max_norm):
        grads = [p.grad for p in parameters if p.grad is not None]
        total = _global_norm(grads)
        for g in grads:
            g.mul_(min(1.0, max_norm / (total.item() + 1e-6)))
        return _global_norm(grads)

    assert_rejected("15.clip_grad_norm", after, "before clipping")


def test_clip_sum_of_norms_fails():
    def summed(parameters, max_norm):
        grads = [p.grad for p in parameters if p.grad is not None]
        total = sum(g.norm() for g in grads)
        for g in grads:
            g.mul_(min(1.0, max_norm / (total.item() + 1e-6)))
        return total

    assert_rejected("15.clip_grad_norm", summed, "squares")


def test_clip_reading_the_generator_twice_fails():
    def twice(parameters, max_norm):
        total = _global_norm([p.grad for p in parameters if p.grad is not None])
        for p in parameters:  # empty the second time for a generator
            if p.grad is not None:
                p.grad.mul_(min(1.0, max_norm / (total.item() + 1e-6)))
        return total

    assert_rejected("15.clip_grad_norm", twice, "generator")


def test_clip_scaling_up_small_gradients_fails():
    def always(parameters, max_norm):
        grads = [p.grad for p in parameters if p.grad is not None]
        total = _global_norm(grads)
        for g in grads:
            g.mul_(max_norm / (total + 1e-6))
        return total

    assert_rejected("15.clip_grad_norm", always, "only ever scales down")


def test_clip_per_parameter_fails():
    def per_parameter(parameters, max_norm):
        grads = [p.grad for p in parameters if p.grad is not None]
        total = _global_norm(grads)
        for g in grads:
            g.mul_(min(1.0, max_norm / (g.norm().item() + 1e-6)))
        return total

    assert_rejected("15.clip_grad_norm", per_parameter, "each parameter")


def test_clip_replacing_grad_tensors_fails():
    def replaces(parameters, max_norm):
        params = [p for p in parameters if p.grad is not None]
        total = _global_norm([p.grad for p in params])
        for p in params:
            p.grad = p.grad * min(1.0, max_norm / (total.item() + 1e-6))  # right values, but a new tensor
        return total

    assert_rejected("15.clip_grad_norm", replaces, "in place")


def test_float_limits_messages_do_not_give_the_formula():
    wrong = [_limits(lambda b, m: 2.0**b), _limits(lambda b, m: (2 - 2.0**-m) * 2.0 ** (b + 1)),
             _limits(lambda b, m: (2 - 2.0**-m) * 2.0**b, tiny_fn=lambda b, m: 2.0**-b),
             _limits(lambda b, m: (2 - 2.0**-m) * 2.0**b, eps_fn=lambda m: 2.0 ** -(m + 1))]
    for candidate in wrong:
        text = str(check("15.float_limits", candidate, show=False))
        for formula in ("2 - 2**-m", "1 - bias", "2**-m", "2**(e-1) - 1"):
            assert formula not in text, f"the message gives away {formula!r}: {text}"


def test_clip_giving_none_grads_a_gradient_fails():
    def fills_none(parameters, max_norm):
        params = list(parameters)
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        grads = [p.grad for p in params]
        total = _global_norm(grads)
        for g in grads:
            g.mul_(min(1.0, max_norm / (total.item() + 1e-6)))
        return total

    assert_rejected("15.clip_grad_norm", fills_none, "None")


def test_clip_calling_clip_grad_norm_is_rejected():
    def torch_version(parameters, max_norm):
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm)

    assert_rejected("15.clip_grad_norm", torch_version, "clip_grad_norm_")


def test_clip_passing_clip_grad_norm_itself_is_rejected():
    assert_rejected("15.clip_grad_norm", torch.nn.utils.clip_grad_norm_, "clip_grad_norm_")


def test_clip_with_get_total_norm_and_clip_grads_with_norm_is_rejected():
    def two_halves(parameters, max_norm):
        params = list(parameters)
        grads = [p.grad for p in params if p.grad is not None]
        total = torch.nn.utils.get_total_norm(grads)
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
        return total

    assert_rejected("15.clip_grad_norm", two_halves, "get_total_norm")


def test_clip_with_clip_grads_with_norm_only_is_rejected():
    def half(parameters, max_norm):
        params = list(parameters)
        total = _global_norm([p.grad for p in params if p.grad is not None])
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
        return total

    assert_rejected("15.clip_grad_norm", half, "clip_grads_with_norm_")
