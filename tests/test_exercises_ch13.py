"""Exercises of chapter 13: realistic wrong answers fail with a hint, right variants pass."""

from __future__ import annotations

from helpers.exercises import check, solution
from tests.exercise_support import assert_rejected

# --------------------------------------------------------------------------
# 13.freeze_all_but_last
# --------------------------------------------------------------------------


def test_freeze_with_attribute_instead_of_method_fails():
    def attribute(model, k):
        model.requires_grad = False  # sets a Python attribute, freezes nothing
        for module in (model.conv_head, model.bn2, model.classifier, *model.blocks[len(model.blocks) - k:]):
            module.requires_grad = True
        return sum(p.numel() for p in model.parameters() if p.requires_grad)

    assert_rejected("13.freeze_all_but_last", attribute, "Python attribute")


def test_freeze_with_negative_slice_fails_for_k_zero():
    def negative_slice(model, k):
        model.requires_grad_(False)
        for module in (model.conv_head, model.bn2, model.classifier, model.blocks[-k:]):
            module.requires_grad_(True)
        return sum(p.numel() for p in model.parameters() if p.requires_grad)

    assert_rejected("13.freeze_all_but_last", negative_slice, "blocks[-0:]")


def test_freeze_forgetting_conv_head_fails():
    def head_only(model, k):
        model.requires_grad_(False)
        for module in (model.classifier, *model.blocks[len(model.blocks) - k:]):
            module.requires_grad_(True)
        return sum(p.numel() for p in model.parameters() if p.requires_grad)

    assert_rejected("13.freeze_all_but_last", head_only, "conv_head")


def test_freeze_first_k_blocks_fails():
    def first_k(model, k):
        model.requires_grad_(False)
        for module in (model.conv_head, model.bn2, model.classifier, *model.blocks[:k]):
            module.requires_grad_(True)
        return sum(p.numel() for p in model.parameters() if p.requires_grad)

    assert_rejected("13.freeze_all_but_last", first_k, "LAST")


def test_freeze_counting_tensors_fails():
    def tensors(model, k):
        solution("13.freeze_all_but_last")(model, k)
        return sum(1 for p in model.parameters() if p.requires_grad)

    assert_rejected("13.freeze_all_but_last", tensors, "tensors")


def test_freeze_counting_all_parameters_fails():
    def everything(model, k):
        solution("13.freeze_all_but_last")(model, k)
        return sum(p.numel() for p in model.parameters())

    assert_rejected("13.freeze_all_but_last", everything, "requires_grad")


def test_freeze_only_unfreezing_fails():
    def no_freeze(model, k):  # assumes every parameter starts frozen
        for module in (model.conv_head, model.bn2, model.classifier, *model.blocks[len(model.blocks) - k:]):
            module.requires_grad_(True)
        return sum(p.numel() for p in model.parameters() if p.requires_grad)

    assert_rejected("13.freeze_all_but_last", no_freeze, "frozen")


def test_freeze_leaving_frozen_batchnorm_in_train_mode_fails():
    def no_eval(model, k):  # requires_grad right, but the frozen BatchNorm layers keep updating their statistics
        model.requires_grad_(False)
        for module in (model.conv_head, model.bn2, model.classifier, *model.blocks[len(model.blocks) - k:]):
            module.requires_grad_(True)
        return sum(p.numel() for p in model.parameters() if p.requires_grad)

    assert_rejected("13.freeze_all_but_last", no_eval, "train() mode", "buffers")


def test_freeze_putting_the_whole_model_in_eval_fails():
    def whole_eval(model, k):
        count = solution("13.freeze_all_but_last")(model, k)
        model.eval()  # also the trainable bn2 and blocks: they would not adapt
        return count

    assert_rejected("13.freeze_all_but_last", whole_eval, "trainable but in eval() mode")


def test_freeze_relying_on_the_incoming_train_mode_fails():
    def eval_only(model, k):  # sets eval() on the frozen part but never train() on the rest
        model.requires_grad_(False)
        split = len(model.blocks) - k
        for module in (model.conv_stem, model.bn1, *model.blocks[:split]):
            module.eval()
        for module in (model.conv_head, model.bn2, model.classifier, *model.blocks[split:]):
            module.requires_grad_(True)
        return sum(p.numel() for p in model.parameters() if p.requires_grad)

    assert_rejected("13.freeze_all_but_last", eval_only, "arrived in eval() mode")


def test_freeze_by_parameter_names_is_accepted():
    def by_name(model, k):
        keep = ("conv_head.", "bn2.", "classifier.") + tuple(f"blocks.{i}." for i in range(len(model.blocks) - k, len(model.blocks)))
        count = 0
        for name, p in model.named_parameters():
            p.requires_grad = name.startswith(keep)
            count += p.numel() if p.requires_grad else 0
        for name, module in model.named_modules():  # parents before children: eval() where nothing trains, else train()
            if name:
                module.train(any(p.requires_grad for p in module.parameters()))
        return count

    assert check("13.freeze_all_but_last", by_name, show=False).passed


# --------------------------------------------------------------------------
# 13.layerwise_param_groups
# --------------------------------------------------------------------------


def _levels(model):
    return [[model.classifier], [model.conv_head, model.bn2], *[[b] for b in reversed(model.blocks)], [model.conv_stem, model.bn1]]


def test_layerwise_decay_inverted_fails():
    def inverted(model, base_lr, decay):
        levels = _levels(model)[::-1]  # depth counted from the stem
        return [{"params": [p for m in ms for p in m.parameters()], "lr": base_lr * decay**d} for d, ms in enumerate(levels)]

    assert_rejected("13.layerwise_param_groups", inverted, "from the stem")


def test_layerwise_linear_decay_fails():
    def linear(model, base_lr, decay):
        levels = _levels(model)
        return [{"params": [p for m in ms for p in m.parameters()], "lr": base_lr * decay * d if d else base_lr}
                for d, ms in enumerate(levels)]

    assert_rejected("13.layerwise_param_groups", linear, "geometric")


def test_layerwise_params_as_generators_fail():
    """Generators can be read only once: refused as in 10.decay_groups (chapter 10's Pitfall 1)."""
    def generators(model, base_lr, decay):
        return [{"params": (p for m in ms for p in m.parameters()), "lr": base_lr * decay**d}
                for d, ms in enumerate(_levels(model))]

    assert_rejected("13.layerwise_param_groups", generators, "generator", "not a list", "read only once", "Pitfall 1")


def test_layerwise_params_as_tuples_are_accepted():
    def tuples(model, base_lr, decay):
        return [{"params": tuple(p for m in ms for p in m.parameters()), "lr": base_lr * decay**d}
                for d, ms in enumerate(_levels(model))]

    assert check("13.layerwise_param_groups", tuples, show=False).passed


def test_layerwise_forgetting_the_stem_fails():
    def no_stem(model, base_lr, decay):
        levels = _levels(model)[:-1]
        return [{"params": [p for m in ms for p in m.parameters()], "lr": base_lr * decay**d} for d, ms in enumerate(levels)]

    assert_rejected("13.layerwise_param_groups", no_stem, "conv_stem")


def test_layerwise_duplicate_parameters_fails():
    def with_all(model, base_lr, decay):
        groups = solution("13.layerwise_param_groups")(model, base_lr, decay)
        return [{"params": list(model.parameters()), "lr": base_lr * decay**len(groups)}, *groups]

    assert_rejected("13.layerwise_param_groups", with_all, "more than one group")


def test_layerwise_conv_head_with_classifier_fails():
    def head_together(model, base_lr, decay):
        levels = [[model.classifier, model.conv_head, model.bn2], *[[b] for b in reversed(model.blocks)], [model.conv_stem, model.bn1]]
        return [{"params": [p for m in ms for p in m.parameters()], "lr": base_lr * decay**d} for d, ms in enumerate(levels)]

    assert_rejected("13.layerwise_param_groups", head_together, "conv_head")


def test_layerwise_tuple_of_groups_is_accepted():
    def as_tuple(model, base_lr, decay):
        return tuple({"params": [p for m in ms for p in m.parameters()], "lr": base_lr * decay**d}
                     for d, ms in enumerate(_levels(model)))

    # a tuple of groups is fine; each group's "params" must be a list (or tuple), not a one-shot generator
    assert check("13.layerwise_param_groups", as_tuple, show=False).passed


def test_layerwise_one_group_per_tensor_fails():
    def per_tensor(model, base_lr, decay):  # right lr for every tensor, but ~200 groups instead of one per depth
        groups = solution("13.layerwise_param_groups")(model, base_lr, decay)
        return [{"params": [p], "lr": g["lr"]} for g in groups for p in g["params"]]

    assert_rejected("13.layerwise_param_groups", per_tensor, "one group per depth")


def test_layerwise_right_groups_in_reversed_order_fails():
    def reversed_order(model, base_lr, decay):  # each group right, the list from the stem up
        return solution("13.layerwise_param_groups")(model, base_lr, decay)[::-1]

    assert_rejected("13.layerwise_param_groups", reversed_order, "in order")
