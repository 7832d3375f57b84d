"""`trainer.*`: the training loop, validation, checkpoints, budgets and decoding during training."""

from dataclasses import dataclass

from attnseq.config.choices import (
    Device,
    Metric,
    Precision,
)
from attnseq.config.fields import option


@dataclass
class TrainerConfig:
    max_epochs: int = option(20, "stop after this many passes over the training data", ge=1)
    max_steps: int | None = option(
        None, "stop after this many updates (or max_epochs, if sooner)", ge=1
    )
    max_minutes: float | None = option(None, "wall-clock budget for the training loop", gt=0.0)
    device: Device = option(Device.auto, "auto, cpu or cuda")
    threads: int | None = option(None, "torch intra-op threads; None = torch's default", ge=1)
    precision: Precision = option(
        Precision.fp32, "32 | bf16 | fp16 (autocast; fp16 scales the loss)"
    )
    compile: bool = option(False, "torch.compile the model for training (validation stays eager)")
    num_workers: int = option(
        0, "DataLoader processes collating batches; 0 = in the training process", ge=0
    )
    pin_memory: bool = option(True, "on CUDA: page-locked batches, copied without blocking")
    validate_every: int = option(
        250, "steps between validations (and at the end of training)", ge=1
    )
    log_every: int = option(100, "updates between train/* scalars and training log lines", ge=1)
    early_stopping_metric: Metric = option(
        Metric.exact_match, "validation metric for early stopping and best.pt"
    )
    early_stopping_patience: int = option(5, "validations without improvement; 0 disables", ge=0)
    early_stopping_target: float | None = option(
        None, "stop as soon as the metric reaches this value"
    )
    num_heatmaps: int = option(3, "fixed validation examples drawn to TensorBoard", ge=0)
    beam: int = option(1, "beam size for validation and the final test evaluation", ge=1)
    length_penalty: float = option(
        1.0, "GNMT alpha for beam search (0 = raw log-probability)", ge=0.0
    )
    max_output_ratio: float = option(
        1.5, "decode at most ratio * source length + max_output_extra", ge=0.0
    )
    max_output_extra: int = option(
        10, "tokens added to the decoding length limit (see max_output_ratio)", ge=0
    )
    min_output_length: int = option(0, "no EOS before this many output tokens", ge=0)
    no_repeat_ngram: int = option(
        0, "forbid any n-gram of this size twice in an output (0 = off)", ge=0
    )
    coverage_penalty: float = option(
        0.0,
        "beta of the GNMT coverage penalty at beam search (Wu et al. 2016, eq. 14; 0 = off)",
        ge=0.0,
    )
    progress: bool = option(True, "progress bar on a terminal")
    # --- resume points: last.pt is also written at every validation and when training stops
    save_every_steps: int | None = option(None, "write last.pt every N updates; None = off", ge=1)
    save_every_minutes: float | None = option(
        10.0, "write last.pt when this long since the last save", gt=0.0
    )
    keep_last: int = option(
        0,
        "also keep each of the last N saves of last.pt as checkpoints/step_STEP.pt (full"
        " checkpoints, hard links where possible) for `attnseq average`; older ones are deleted."
        " 0 = off: each one holds the optimizer state too, so N of a large model take real disk",
        ge=0,
    )
    overwrite: bool = option(
        False,
        "Replace the run in the run directory: a fresh run there is refused while it holds one"
        " (checkpoints, metrics.json, hyps, tb, eval). With true, those of the old run are deleted"
        " once the new run has its data and model, so none of them mixes with the new run's.",
    )
    max_nonfinite_steps: int = option(
        10,
        "Non-finite losses (or gradients) skip their update; this many in a row stop the run with"
        " exit status 1, leaving the checkpoints at the last good state.",
        ge=1,
    )
