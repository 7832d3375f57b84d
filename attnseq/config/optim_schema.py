"""`optim.*`: the optimizer, the learning-rate schedule and the loss terms."""

from dataclasses import dataclass

from attnseq.config.choices import (
    OptimizerName,
    Scheduler,
)
from attnseq.config.fields import option


@dataclass
class OptimConfig:
    name: OptimizerName = option(OptimizerName.adam, "adam or adamw")
    lr: float = option(1e-3, "peak learning rate", gt=0.0)
    betas: list[float] = option(
        help="Adam's beta1 and beta2, each in [0, 1)",
        default_factory=lambda: [0.9, 0.999],
        ge=0.0,
        lt=1.0,
        length=2,
    )
    accumulate: int = option(
        1,
        "micro-batches per update: gradients of N batches summed and normalised by their"
        " target tokens together, the update of one batch N times as large",
        ge=1,
    )
    ema_decay: float = option(
        0.0,
        "exponential moving average of the weights (decay in [0, 1); 0 = off): validation,"
        " best.pt and the saved model use the average; about 1 / (1 - decay) updates averaged",
        ge=0.0,
        lt=1.0,
    )
    weight_decay: float = option(0.0, "weight decay (decoupled for adamw)", ge=0.0)
    clip_norm: float = option(1.0, "max global gradient norm; 0 disables clipping", ge=0.0)
    scheduler: Scheduler = option(Scheduler.constant, "learning-rate schedule after the warm-up")
    warmup_steps: int = option(0, "updates of linear learning-rate warm-up (0 = none)", ge=0)
    label_smoothing: float = option(0.0, "label smoothing epsilon, in [0, 1)", ge=0.0, lt=1.0)
    plateau_factor: float = option(
        0.5, "scheduler=plateau: lr multiplier when the metric stalls, in (0, 1)", gt=0.0, lt=1.0
    )
    plateau_patience: int = option(2, "validations without improvement before the lr drops", ge=1)
    coverage_lambda: float = option(
        0.0,
        "coverage loss weight lambda (See et al. 2017, eq. 13); needs model.coverage=true",
        ge=0.0,
    )
    coverage_start_step: int = option(
        0,
        "the coverage loss counts from this update on (See et al. add it for the last phase only)",
        ge=0,
    )
    alignment_lambda: float = option(
        0.0,
        "guided alignment loss weight (Garg et al. 2019): cross entropy between the gold links of"
        " data.alignments and model.alignment_layer/alignment_head's attention; 0 = off",
        ge=0.0,
    )
    gumbel_tau_start: float = option(
        1.0, "model.attention.hard=gumbel: Gumbel-softmax temperature at update 0", gt=0.0
    )
    gumbel_tau_end: float = option(
        0.5, "model.attention.hard=gumbel: the temperature after the anneal", gt=0.0
    )
    gumbel_anneal_steps: int = option(
        2000,
        "model.attention.hard=gumbel: updates of the exponential anneal from tau_start to"
        " tau_end (0 = tau_end from the start)",
        ge=0,
    )
    reinforce_lambda: float = option(
        1.0, "model.attention.hard=reinforce: weight lambda_r of the REINFORCE term", ge=0.0
    )
    reinforce_entropy: float = option(
        0.01, "model.attention.hard=reinforce: entropy bonus weight lambda_e", ge=0.0
    )
    reinforce_baseline_decay: float = option(
        0.9,
        "model.attention.hard=reinforce: the moving-average baseline keeps this share of its"
        " value per update (Xu et al. 2015: 0.9)",
        ge=0.0,
        lt=1.0,
    )
