"""Typed configuration: the schema of every key `attnseq train` accepts.

These dataclasses are registered in Hydra's ConfigStore (`register_configs`) as the schema under
train.yaml, so Hydra composes YAML files *into* them: struct mode rejects unknown keys,
values are type-checked, and choices are Enums (choices.py: OmegaConf validates an Enum field by
member name and lists the valid names when one is wrong). Cross-field rules that a type cannot
express live in checks.py (`validate`), which runs before any work starts.

Every field is declared with `option`: its default, its help text (`metadata["help"]`, the text
a configuration reference shows) and the bounds of its value (`metadata["ge"]` etc.), which
checks.py enforces for every field generically.

Library code receives these dataclasses (via `OmegaConf.to_object`), never a DictConfig.

The groups live one per module: data_schema.py (`data.*`), model_schema.py (`model.*`),
optim_schema.py (`optim.*`), trainer_schema.py (`trainer.*`); fields.py declares `option`.
"""

from dataclasses import dataclass

from attnseq.config.data_schema import DataConfig
from attnseq.config.fields import option
from attnseq.config.model_schema import AttentionConfig, ModelConfig, RNNConfig
from attnseq.config.optim_schema import OptimConfig
from attnseq.config.trainer_schema import TrainerConfig

__all__ = [
    "AttentionConfig",
    "DataConfig",
    "ModelConfig",
    "OptimConfig",
    "RNNConfig",
    "TrainConfig",
    "TrainerConfig",
    "option",
    "register_configs",
]


@dataclass
class TrainConfig:
    """The root of `attnseq train` (train.yaml)."""

    seed: int = option(
        1, "seed of every random choice (data, initialisation, dropout)", ge=0, le=2**32 - 1
    )
    data: DataConfig = option(help="what to train on", default_factory=DataConfig)
    model: ModelConfig = option(help="the model", default_factory=ModelConfig)
    optim: OptimConfig = option(help="optimizer and schedule", default_factory=OptimConfig)
    trainer: TrainerConfig = option(
        help="training loop, validation and decoding", default_factory=TrainerConfig
    )
    name: str = option("default", "a label for the run, shown in logs and metrics.json")
    optimized_metric: str | None = option(
        None,
        "metrics.json key the task function returns to a sweeper (e.g. Optuna); None = the test "
        "value of trainer.early_stopping_metric",
    )
    resume: str | None = option(
        None,
        'Continue a run: "auto" = the run directory\'s checkpoints/last.pt (a fresh run when there'
        " is none), or the path of a checkpoint. seed, data.*, model.* and optim.* must match the"
        " checkpoint's (see `resume_conflicts`); trainer.* may change (e.g. a larger max_steps).",
    )
    # set by `config=PATH` (hydra_entry.py), not by the user: it shows in the run's config
    config_file: str | None = option(
        None, "the experiment file that config=PATH loaded (absolute path); None = none"
    )


def register_configs() -> None:
    """Register the schema so train.yaml can name it in its defaults list."""
    from hydra.core.config_store import ConfigStore  # only the CLI path needs Hydra

    ConfigStore.instance().store(name="train_schema", node=TrainConfig)
