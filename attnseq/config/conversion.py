"""A config as a plain dict and back (checkpoints store it that way), its keys flattened, the keys
a resumed run must keep from its checkpoint, and where keys of older configs are now."""

import dataclasses
from enum import Enum
from typing import Any

from attnseq.config.schema import TrainConfig
from attnseq.errors import UserError

# ------------------------------------------------------------------------------------ resume
# A resumed run takes its settings from the command line, but these keys decide the model, its
# vocabulary, the training data and its order, and the meaning of the optimizer, scheduler and
# best-metric state stored in the checkpoint: a different value would silently train something
# else than the checkpoint's run, so they must match.
RESUME_MUST_MATCH = ("seed", "data.", "model.", "optim.", "trainer.early_stopping_metric")


def flat_config(tree: dict[str, Any]) -> dict[str, Any]:
    """{"a.b": value} for every leaf of a nested config dict (an empty dict is a leaf too)."""
    values: dict[str, Any] = {}

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, dict) and node:
            for key, value in node.items():
                walk(f"{prefix}{key}.", value)
        else:
            values[prefix.rstrip(".")] = node

    walk("", tree)
    return values


# ...except where a different value changes nothing about what is trained: where the data
# files live, and the batch size of validation decoding.
RESUME_MAY_DIFFER = ("data.root", "data.eval_max_tokens")


def resume_conflicts(saved: TrainConfig, current: TrainConfig) -> list[str]:
    """Keys that must match between a checkpoint's config and a resumed run's, and do not:
    one "key: checkpoint VALUE, now VALUE" line each."""

    from attnseq.config.checks import keys_unread_by

    before, now = flat_config(config_to_dict(saved)), flat_config(config_to_dict(current))
    # a key the model's family does not read changes nothing (a checkpoint saved before such
    # keys were refused at the start of a run may hold one)
    unread = (
        keys_unread_by(saved.model.family) if saved.model.family is current.model.family else ()
    )
    conflicts = []
    for key in sorted(set(before) | set(now)):
        if (
            key.startswith(RESUME_MUST_MATCH)
            and not key.startswith(RESUME_MAY_DIFFER)
            and key not in unread
            and before.get(key) != now.get(key)
        ):
            conflicts.append(f"{key}: checkpoint {before.get(key)!r}, now {now.get(key)!r}")
    return conflicts


# ------------------------------------------------------------------------ older checkpoints
# Checkpoints written before `decoding.*` hold the search settings among the trainer's keys,
# min_length as min_output_length: trainer.KEY -> decoding.NAME. Reading one moves them.
_FROM_TRAINER = {
    "beam": "beam",
    "length_penalty": "length_penalty",
    "max_output_ratio": "max_output_ratio",
    "max_output_extra": "max_output_extra",
    "min_output_length": "min_length",
    "no_repeat_ngram": "no_repeat_ngram",
    "coverage_penalty": "coverage_penalty",
}
# old key -> the key it is now, e.g. the trainer's beam -> "decoding.beam"
MOVED_KEYS = {f"trainer.{old}": f"decoding.{new}" for old, new in _FROM_TRAINER.items()}


def upgraded(values: dict) -> dict:
    """A checkpoint's config dict with every key of `MOVED_KEYS` moved to its new place (a
    copy; `values` stays as it is). A config that already has the new key keeps its value."""
    trainer = values.get("trainer")
    if not isinstance(trainer, dict) or not set(trainer) & set(_FROM_TRAINER):
        return values
    trainer = dict(trainer)
    decoding = dict(values.get("decoding") or {})
    for old, new in _FROM_TRAINER.items():
        if old in trainer:
            decoding.setdefault(new, trainer.pop(old))
    return {**values, "trainer": trainer, "decoding": decoding}


# --------------------------------------------------------------------------- (de)serialising
def config_to_dict(cfg: TrainConfig) -> dict:
    """Plain dict (enums as their names, tuples as lists) for checkpoints and metrics.json.

    The same dict as OmegaConf's `to_container(structured(cfg), enum_to_str=True)` for a
    config OmegaConf built, by a walk over the dataclasses that takes a hundredth of the time:
    a run converts its config at every checkpoint and for every tracker.
    """
    return _plain(cfg)


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return {item.name: _plain(getattr(value, item.name)) for item in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return value.name
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


def config_from_dict(values: dict, overrides: list[str] | None = None) -> TrainConfig:
    """Rebuild a TrainConfig from `config_to_dict` output (of today's schema or, `upgraded`,
    of an older one), checked against the schema.

    `overrides` are dotlist strings ("data.valid_size=100") applied on top, as `attnseq eval`
    accepts them. Unknown keys or bad values raise UserError.
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    # imported here: checks.py imports the schema from this module
    from attnseq.config.checks import validate

    try:
        merged = OmegaConf.merge(OmegaConf.structured(TrainConfig), upgraded(values))
        if overrides:
            merged = OmegaConf.merge(merged, _dotlist(overrides))
        cfg = OmegaConf.to_object(merged)
    except OmegaConfBaseException as error:
        raise UserError(f"invalid configuration: {describe_omegaconf_error(error)}") from None
    assert isinstance(cfg, TrainConfig)
    # not a run that starts: keys of the other model family are let through (its model
    # never read them; checkpoints saved before they were refused keep loading)
    validate(cfg, run_start=False)
    return cfg


def _dotlist(overrides: list[str]) -> Any:
    """The config of `overrides` ("key=value", each value read as YAML); UserError naming the
    override whose value YAML cannot read (PyYAML refuses control characters and the lone
    surrogates that stand for command-line bytes that are not UTF-8)."""
    import yaml
    from omegaconf import OmegaConf

    for override in overrides:
        try:
            OmegaConf.from_dotlist([override])
        except yaml.YAMLError as error:
            reason = str(error).splitlines()[0]
            raise UserError(f"invalid configuration: override {override!r}: {reason}") from None
    return OmegaConf.from_dotlist(overrides)


def describe_omegaconf_error(error: Exception) -> str:
    """One readable line for an OmegaConf validation error, naming the key."""
    key = getattr(error, "full_key", None)
    message = str(error).split("\n")[0]
    if key in MOVED_KEYS:
        message += f"; it is {MOVED_KEYS[key]} now"
    return f"{key}: {message}" if key else message
