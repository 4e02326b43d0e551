"""Exercises of chapter 13 (transfer learning): checkers and reference solutions."""

from __future__ import annotations

import torch
from torch import nn

from . import Hint, exercise


class _TinyEfficientNet(nn.Module):
    """A small stand-in with timm EfficientNet's layout (``conv_stem``, ``bn1``, ``blocks``,
    ``conv_head``, ``bn2``, ``classifier``), so the checks are fast and no count can be hard-coded."""

    def __init__(self, widths: tuple[int, ...] = (4, 6, 8, 10), num_classes: int = 3) -> None:
        super().__init__()
        self.conv_stem = nn.Conv2d(3, widths[0], 3, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        blocks = []
        for w_in, w_out in zip(widths[:-1], widths[1:]):
            blocks.append(nn.Sequential(nn.Conv2d(w_in, w_out, 3, bias=False), nn.BatchNorm2d(w_out)))
        self.blocks = nn.Sequential(*blocks)
        self.conv_head = nn.Conv2d(widths[-1], 16, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.global_pool = nn.AdaptiveAvgPool2d(1)  # no parameters, like timm's SelectAdaptivePool2d
        self.classifier = nn.Linear(16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.bn1(self.conv_stem(x)))
        return self.classifier(self.global_pool(self.bn2(self.conv_head(x))).flatten(1))


def _efficientnets() -> list[tuple[str, nn.Module]]:
    from helpers.models import efficientnet_lite0

    return [
        ("a small model with EfficientNet's layout (3 blocks)", _TinyEfficientNet()),
        ("EfficientNet-Lite0 with a 10-class head", efficientnet_lite0(pretrained=False, num_classes=10)),
    ]


def _numel(params) -> int:
    return sum(p.numel() for p in params)


# --------------------------------------------------------------------------
# 13.freeze_all_but_last
# --------------------------------------------------------------------------


def _freeze_all_but_last(model: nn.Module, k: int) -> int:
    """Freeze ``model`` except its last ``k`` blocks and everything after the blocks.

    Freezing means both ``requires_grad_(False)`` on the parameters and ``eval()``
    on the frozen part, so that its BatchNorm layers normalise with their stored
    running statistics and stop updating them. The trainable part is put in
    ``train()`` mode.

    Args:
        model: a timm EfficientNet (or any module with ``conv_stem``, ``bn1``,
            ``blocks``, ``conv_head``, ``bn2`` and ``classifier``).
        k: how many of the last entries of ``model.blocks`` stay trainable (0 to ``len(model.blocks)``).

    Returns:
        The number of trainable scalar parameters (elements, not tensors), as an int.
        The model is changed in place (``requires_grad`` of every parameter, and the
        ``training`` flag of its submodules). Note that ``model.train()``, which
        ``helpers.training.fit`` calls every epoch, puts the frozen part back in
        train mode: re-apply ``eval()`` to it after each ``model.train()``.
    """
    model.requires_grad_(False)
    split = len(model.blocks) - k
    for module in (model.conv_stem, model.bn1, *model.blocks[:split]):
        module.eval()
    trainable = [model.conv_head, model.bn2, model.classifier, *model.blocks[split:]]
    for module in trainable:
        module.requires_grad_(True)
        module.train()
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


@exercise(
    "13.freeze_all_but_last",
    "freeze every parameter of model except those of the last k entries of model.blocks and of conv_head, "
    "bn2 and classifier, put the frozen part (its BatchNorm layers) in eval() mode and leave the trainable part "
    "in train() mode; return the number of trainable scalar parameters.",
    reference=_freeze_all_but_last,
    hint="Freezing is two separate switches (section 'Freezing a backbone'): requires_grad off for the "
         "parameters, and eval() on the frozen modules so that their BatchNorm keeps its stored "
         "statistics. Freeze the whole model first, then switch the tail (the last k blocks, conv_head, "
         "bn2, classifier) back to trainable and explicitly into train() mode, whatever mode the model "
         "arrived in; make sure k = 0 selects no block, and count elements, not tensors, as a Python int.",
)
def _test_freeze_all_but_last(candidate) -> None:
    mode_error = None  # the BatchNorm modes are judged after the parameters and counts of every case
    for label, template in _efficientnets():
        n_blocks = len(template.blocks)
        for k in sorted({0, 1, 2, n_blocks}):
            model = _clone(template)
            model.requires_grad_(True)
            started_in_eval = k == 1  # one case starts from an eval() model: the answer must call train() itself
            model.train(not started_in_eval)
            if k == 2:  # start from a partly frozen model: the function must set every flag itself
                model.conv_head.requires_grad_(False)
            result = candidate(model, k)
            tail = [model.conv_head, model.bn2, model.classifier, *model.blocks[n_blocks - k :]]
            want_ids = {id(p) for m in tail for p in m.parameters()}
            want = _numel(p for p in model.parameters() if id(p) in want_ids)
            flags = {name: p.requires_grad for name, p in model.named_parameters()}
            if all(flags.values()) and getattr(model, "requires_grad", True) is False:
                raise Hint(
                    "every parameter is still trainable: `model.requires_grad = False` only sets a new Python "
                    "attribute on the module object, it freezes nothing.",
                    "nn.Module has an in-place method (its name ends in an underscore, like other in-place "
                    "operations) that sets the flag on every parameter of the module and its children.",
                )
            wrongly_trainable = [n for n, p in model.named_parameters() if p.requires_grad and id(p) not in want_ids]
            wrongly_frozen = [n for n, p in model.named_parameters() if not p.requires_grad and id(p) in want_ids]
            if wrongly_trainable:
                first = wrongly_trainable[0]
                if first.startswith("blocks."):
                    raise Hint(
                        f"{label}, k={k}: {first} is trainable but only the LAST {k} of the {n_blocks} blocks "
                        f"should be (careful: blocks[-0:] is all of them, not none).",
                        "Compute the index of the first trainable block from len(model.blocks) and k, so that "
                        "k = 0 gives an empty slice.",
                    )
                raise AssertionError(f"{label}, k={k}: {first} should be frozen (requires_grad False)")
            if wrongly_frozen:
                first = wrongly_frozen[0]
                if any(first.startswith(m) for m in ("conv_head", "bn2")):
                    raise AssertionError(
                        f"{label}, k={k}: {first} is frozen; conv_head and bn2 come after the blocks and "
                        "must stay trainable with the classifier"
                    )
                raise AssertionError(f"{label}, k={k}: {first} should be trainable")
            if isinstance(result, torch.Tensor) and result.numel() == 1:
                result = result.item()
            if not isinstance(result, int) or isinstance(result, bool):
                raise AssertionError(f"return the count as an int; for k={k} you returned {result!r}")
            tensors = sum(1 for p in model.parameters() if p.requires_grad)
            if result == tensors and tensors != want:
                raise Hint(
                    f"{label}, k={k}: you returned {result}, the number of trainable tensors, not of their "
                    "scalar elements.",
                    "Tensor.numel() gives the number of elements of one tensor; add it up over the trainable ones.",
                )
            if result == _numel(model.parameters()) and want != result:
                raise AssertionError(
                    f"{label}, k={k}: you returned {result}, all parameters; count only those with requires_grad"
                )
            if result != want:
                raise AssertionError(f"{label}, k={k}: expected {want} trainable parameters, you returned {result}")
            tail_modules = {id(m) for t in tail for m in t.modules()}
            for name, module in model.named_modules():
                if not isinstance(module, nn.modules.batchnorm._BatchNorm):
                    continue
                if mode_error is not None:
                    break
                if id(module) in tail_modules and not module.training and started_in_eval:
                    mode_error = Hint(
                        f"{label}, k={k}: the model arrived in eval() mode and {name}, which is trainable, is still "
                        "in eval() mode afterwards: do not rely on the mode the model comes in.",
                        "Put the trainable part (the last k blocks, conv_head, bn2, classifier) in train() mode "
                        "explicitly, as well as the frozen part in eval() mode.",
                    )
                elif id(module) in tail_modules and not module.training:
                    mode_error = Hint(
                        f"{label}, k={k}: {name} is trainable but in eval() mode, so it would not adapt its "
                        "statistics while training: only the frozen part goes to eval(), the rest stays in train().",
                        "Call eval() on the frozen submodules (stem, bn1, the early blocks), not on the whole model.",
                    )
                if id(module) not in tail_modules and module.training:
                    mode_error = Hint(
                        f"{label}, k={k}: {name} is frozen but still in train() mode: its running mean and variance "
                        "are buffers, which requires_grad does not protect, so every forward pass would move them.",
                        "Freezing is requires_grad off AND eval() for the frozen part: Module.eval() sets the mode of "
                        "a module and all its children.",
                    )
    if mode_error is not None:
        raise mode_error


def _clone(module: nn.Module) -> nn.Module:
    import copy

    return copy.deepcopy(module)


# --------------------------------------------------------------------------
# 13.layerwise_param_groups
# --------------------------------------------------------------------------


def _layerwise_param_groups(model: nn.Module, base_lr: float, decay: float) -> list[dict]:
    """Parameter groups with learning rates that decay geometrically with depth from the top.

    Depth 0 is ``classifier``, 1 is ``conv_head`` + ``bn2``, ``2 + i`` is
    ``blocks[-1 - i]``, and the deepest (``len(blocks) + 2``) is
    ``conv_stem`` + ``bn1``.

    Args:
        model: a timm EfficientNet (or any module with that layout).
        base_lr: learning rate of the classifier.
        decay: factor per depth step (e.g. 0.7).

    Returns:
        A list of dicts ``{"params": [tensors], "lr": base_lr * decay ** depth}``,
        from depth 0 down, each parameter in exactly one group; pass it to any
        ``torch.optim`` optimizer.
    """
    levels = [[model.classifier], [model.conv_head, model.bn2]]
    levels += [[block] for block in reversed(model.blocks)]
    levels.append([model.conv_stem, model.bn1])
    return [
        {"params": [p for m in modules for p in m.parameters()], "lr": base_lr * decay**depth}
        for depth, modules in enumerate(levels)
    ]


def _depth_of(model: nn.Module) -> dict[int, int]:
    """id(parameter) -> its depth under the exercise's numbering."""
    depth = {id(p): 0 for p in model.classifier.parameters()}
    depth.update({id(p): 1 for m in (model.conv_head, model.bn2) for p in m.parameters()})
    n = len(model.blocks)
    for i, block in enumerate(model.blocks):
        depth.update({id(p): 2 + (n - 1 - i) for p in block.parameters()})
    depth.update({id(p): n + 2 for m in (model.conv_stem, model.bn1) for p in m.parameters()})
    return depth


@exercise(
    "13.layerwise_param_groups",
    "return a list of parameter groups (dicts with 'params', a list of tensors, and 'lr'), one per depth: classifier 0, "
    "conv_head + bn2 1, blocks[-1] 2, ..., conv_stem + bn1 deepest; lr = base_lr * decay ** depth; "
    "every parameter in exactly one group.",
    reference=_layerwise_param_groups,
    hint="Write the depths down as lists of modules from the top: the classifier, then conv_head with bn2, "
         "then the blocks in reverse order, and conv_stem with bn1 last. Then build one dict per depth "
         "holding all the parameters of its modules, with a rate that shrinks geometrically with the "
         "depth's index, like the hand-made groups of 'Three ways to use the weights'.",
)
def _test_layerwise_param_groups(candidate) -> None:
    for label, model in _efficientnets():
        for base_lr, decay in ((3e-3, 0.7), (1e-2, 0.5)):
            names = {id(p): n for n, p in model.named_parameters()}
            depth = _depth_of(model)
            groups = candidate(model, base_lr, decay)
            try:
                groups = list(groups)
                lrs = {}
                seen: dict[int, int] = {}
                group_params: list[set[int]] = []
                group_lrs: list[float] = []
                for i, group in enumerate(groups):
                    if not isinstance(group["params"], (list, tuple)):
                        raise Hint(
                            f"{label}: group {i}'s 'params' is a {type(group['params']).__name__}, not a list: a "
                            "generator or iterator can be read only once, so whoever reads the group second (an "
                            "optimizer's add_param_group, a check, a second optimizer) finds it empty (chapter 10's "
                            "Pitfall 1)",
                            "materialise each group's parameters into a real list before returning them, as chapter "
                            "10's Pitfall 1 does for the second optimizer",
                        )
                    params = list(group["params"])
                    group_lr = group["lr"]
                    group_params.append({id(p) for p in params})
                    group_lrs.append(group_lr)
                    for p in params:
                        seen[id(p)] = seen.get(id(p), 0) + 1
                        lrs[id(p)] = group_lr
            except (TypeError, KeyError) as exc:
                raise AssertionError(
                    f"return a list of dicts, each with a 'params' list and an 'lr' float ({type(exc).__name__}: {exc})"
                ) from exc
            twice = [names.get(i, "?") for i, c in seen.items() if c > 1]
            if twice:
                raise AssertionError(
                    f"{label}: {twice[0]} is in more than one group; every parameter must be in exactly one "
                    "(optimizers refuse duplicates)"
                )
            missing = [n for i, n in names.items() if i not in seen]
            if missing:
                raise AssertionError(f"{label}: {missing[0]} is in no group ({len(missing)} parameters missing)")
            for p_id, want_depth in depth.items():
                want = base_lr * decay**want_depth
                got = lrs[p_id]
                if abs(got - want) <= 1e-12 + 1e-9 * want:
                    continue
                name = names[p_id]
                deepest = len(model.blocks) + 2
                if abs(got - base_lr * decay ** (deepest - want_depth)) <= 1e-9 * want + 1e-12:
                    raise AssertionError(
                        f"{label}: {name} got lr {got:.3g}, as if depth were counted from the stem. Depth 0 is "
                        f"the classifier (largest lr); earlier layers get smaller rates"
                    )
                if abs(got - base_lr * decay * want_depth) <= 1e-9 * want + 1e-12:
                    raise AssertionError(
                        f"{label}: {name} got lr {got:.3g} = base_lr * decay * depth; the decay is geometric: "
                        f"base_lr * decay ** depth"
                    )
                raise AssertionError(f"{label}: {name} (depth {want_depth}) should have lr {want:.3g}, got {got:.3g}")
            n_depths = len(model.blocks) + 3
            if len(groups) != n_depths:
                raise Hint(
                    f"{label}: {len(groups)} groups, but the model has {n_depths} depths (classifier, conv_head + bn2, "
                    f"{len(model.blocks)} blocks, conv_stem + bn1): one group per depth, not per tensor or module.",
                    "Collect all the parameters of one depth (for example with Module.parameters() of each module "
                    "at that depth) into a single group.",
                )
            for d, group in enumerate(group_params):
                want_lr = base_lr * decay**d
                if abs(group_lrs[d] - want_lr) > 1e-12 + 1e-9 * want_lr:
                    raise Hint(
                        f"{label}: group {d} has lr {group_lrs[d]:.3g}, but group {d} should be depth {d} "
                        f"(lr {want_lr:.3g}): list the groups in order from the classifier (depth 0) down to the stem.",
                        "Build the list of depths from the top of the network downwards (model.blocks in reverse).",
                    )
                wrong = [names.get(i, "?") for i in group - {i for i, dd in depth.items() if dd == d}]
                if wrong:
                    raise AssertionError(f"{label}: group {d} holds {wrong[0]}, which is not at depth {d}")
        try:
            torch.optim.AdamW(candidate(model, 1e-3, 0.8))
        except Exception as exc:  # any refusal by the optimizer is the learner's to see
            raise AssertionError(f"torch.optim.AdamW refused your groups: {type(exc).__name__}: {exc}") from exc
