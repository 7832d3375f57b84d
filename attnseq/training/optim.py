"""The optimizer, with weight decay on weight matrices only.

As nanoGPT's `configure_optimizers`: parameters with two or more dimensions (linear and
embedding weights) decay; biases, norm gains and other vectors do not, since shrinking them
towards zero regularises nothing useful and shifts activations (Loshchilov & Hutter 2019,
"Decoupled Weight Decay Regularization", apply decay to weights).
"""

import torch
from torch import nn

from attnseq.config.choices import OptimizerName
from attnseq.config.schema import OptimConfig


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: weight matrices with `weight_decay`, every other parameter without."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in trainable if p.dim() >= 2]
    no_decay = [p for p in trainable if p.dim() < 2]
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def build_optimizer(model: nn.Module, cfg: OptimConfig) -> torch.optim.Optimizer:
    cls = torch.optim.AdamW if cfg.name is OptimizerName.adamw else torch.optim.Adam
    groups = parameter_groups(model, cfg.weight_decay)
    return cls(groups, lr=cfg.lr, betas=tuple(cfg.betas))


def regroup_state(state: dict, model: nn.Module) -> dict:
    """An optimizer state dict saved with all parameters in one group, regrouped as
    `parameter_groups` orders them, so a run saved that way resumes. Other states pass as they
    are."""
    if len(state["param_groups"]) != 1:
        return state
    trainable = [p for p in model.parameters() if p.requires_grad]
    decay = [i for i, p in enumerate(trainable) if p.dim() >= 2]
    order = decay + [i for i, p in enumerate(trainable) if p.dim() < 2]
    new_index = {old: new for new, old in enumerate(order)}
    group = state["param_groups"][0]
    groups = [
        {**group, "params": list(range(len(decay)))},
        {**group, "weight_decay": 0.0, "params": list(range(len(decay), len(order)))},
    ]
    return {
        "state": {new_index[old]: value for old, value in state["state"].items()},
        "param_groups": groups,
    }
