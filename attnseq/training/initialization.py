"""A new run started from pretrained weights (`model.init_from`): an attnseq checkpoint or run
directory, a Hugging Face model folder or hf:ORG/NAME. Its model.* keys and tokenizers become
the run's and its weights the model's first ones; the optimizer, the schedule and the step start
fresh, as fairseq's --restore-file with --reset-optimizer and OpenNMT's train_from do
(docs/guides/pretrained.md)."""

import copy
import dataclasses
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from attnseq.config.choices import ModelFamily
from attnseq.config.conversion import config_from_dict, config_to_dict, flat_config
from attnseq.config.schema import ModelConfig, TrainConfig
from attnseq.data.tokenizers import TokenizerPair
from attnseq.errors import UserError
from attnseq.io.checkpoint import load_checkpoint
from attnseq.io.hf_hub import hub_folder, is_hub_id
from attnseq.models.loading import check_structure, load_weights
from attnseq.models.pretrained import FAMILIES, pretrained_payload, read_model_type
from attnseq.models.seq2seq import Seq2Seq

log = logging.getLogger("attnseq")

# model.* keys a fine-tuning run may set apart from the pretrained model's: regularisation and
# the cross-attention guided alignment supervises, none of which changes a weight's shape
FINE_TUNABLE = ("dropout", "attention_dropout", "activation_dropout")
FINE_TUNABLE += ("alignment_layer", "alignment_head")
# model.* keys that add a training loss alone on a transformer (no weights): a run may add them
LOSS_ONLY = ("coverage",)
BEST_CHECKPOINT = Path("checkpoints") / "best.pt"  # inside a run directory


@dataclass(frozen=True)
class PretrainedModel:
    """What a run starts from: where (`model.init_from` as given), the file or folder read,
    its config, tokenizers and weights."""

    source: str
    path: Path | str
    cfg: TrainConfig
    tokenizers: TokenizerPair
    weights: dict[str, torch.Tensor]


def pretrained_location(source: str) -> Path | str:
    """What `model.init_from` names: an hf: id as it is, a run directory's
    checkpoints/best.pt, a Hugging Face model folder, a checkpoint file; UserError for a folder
    that is neither a run directory with best.pt nor a model folder with config.json."""
    if is_hub_id(source):
        return source
    path = Path(source).expanduser()
    if not path.is_dir():
        if not path.exists():
            raise UserError(
                f"model.init_from={source}: no such file or folder (give an attnseq checkpoint, "
                "a run directory, a Hugging Face model folder or hf:ORG/NAME)"
            )
        return path
    if (path / BEST_CHECKPOINT).is_file():
        return path / BEST_CHECKPOINT
    if (path / "config.json").is_file():
        return path
    raise UserError(
        f"model.init_from={source} is a folder with neither {BEST_CHECKPOINT} (a run directory "
        "that has validated) nor config.json (a Hugging Face model)"
    )


def read_pretrained(source: str) -> PretrainedModel:
    """The model at `source` (`model.init_from`), its structure and config checked; UserError
    naming what is wrong with it."""
    path = pretrained_location(source)
    payload: dict[str, Any] = (
        load_checkpoint(path)
        if isinstance(path, Path) and path.is_file()
        else pretrained_payload(path)
    )
    check_structure(Path(path), payload)
    try:
        cfg = config_from_dict(payload["config"])
        tokenizers = TokenizerPair.from_state(payload["tokenizers"])
    except UserError as error:
        raise UserError(f"model.init_from={source}: {error}") from None
    except Exception as error:  # a damaged tokenizer state fails in many ways
        raise UserError(
            f"model.init_from={source}: its tokenizers do not load ({type(error).__name__}: "
            f"{error})"
        ) from None
    return PretrainedModel(source, path, cfg, tokenizers, payload["model"])


def pretrained_vocabularies(source: str) -> tuple[int, int]:
    """(source, target) vocabulary sizes of the tokenizers of the model at `source`
    (`model.init_from`, read before by `read_pretrained`), without reading its weights: a
    model folder's tokenizer files, a checkpoint's tensors memory-mapped."""
    path = pretrained_location(source)
    if isinstance(path, Path) and path.is_file():
        payload = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        tokenizers = TokenizerPair.from_state(payload["tokenizers"])
    else:
        folder = hub_folder(path) if is_hub_id(path) else Path(path)
        tokenizers = FAMILIES[read_model_type(folder)](folder).tokenizers()
    return tokenizers.src.vocab_size, tokenizers.tgt.vocab_size


def initialized_config(cfg: TrainConfig, given: Iterable[str] = ()) -> TrainConfig:
    """`cfg` with the model.* keys of the model at `cfg.model.init_from` (`cfg` itself when it
    names none). `given` are the overrides the run was composed with (key=value, as Hydra
    records them): a model.* key among them must hold the pretrained model's value, but for
    `FINE_TUNABLE`, whose given value is kept.

    Raises:
        UserError: the pretrained model cannot be read, is of another model family than
            `cfg.model.family`, or a given key contradicts it (one line naming the key, the
            value given and the model's).
    """
    if cfg.model.init_from is None:
        return cfg
    return with_architecture(cfg, read_pretrained(cfg.model.init_from).cfg.model, given)


def with_architecture(cfg: TrainConfig, model: ModelConfig, given: Iterable[str]) -> TrainConfig:
    """`cfg` whose model.* are `model`'s (the pretrained one's), `cfg.model.init_from`, the
    `FINE_TUNABLE` keys of `given` and a transformer's model.coverage kept
    (`_combined_copy_keys`); `initialized_config` says what is refused."""
    source = cfg.model.init_from
    combined = _combined_copy_keys(cfg.model, model, source)
    if model.family is not cfg.model.family:
        raise UserError(
            f"model.init_from={source} is a {model.family.value} model, but the config asks for "
            f"model.family={cfg.model.family.value}: choose the model group of its family "
            f"(model={_MODEL_GROUPS[model.family.value]})"
        )
    keys = _given_model_keys(given)
    kept = [key for key in FINE_TUNABLE if _named(key, keys)] + combined
    for key, (ours, theirs) in _differences(cfg.model, model).items():
        if _named(key, keys) and key not in kept:
            raise UserError(
                f"model.{key}={_shown(ours)} contradicts the pretrained model of "
                f"model.init_from={source}, whose model.{key} is {_shown(theirs)}: its "
                "architecture is the run's; drop the override or give its value"
            )
    merged = copy.deepcopy(model)
    merged.init_from = source
    for key in kept:
        setattr(merged, key, getattr(cfg.model, key))
    return dataclasses.replace(cfg, model=merged)


def _combined_copy_keys(ours: ModelConfig, theirs: ModelConfig, source: str | None) -> list[str]:
    """The pointer-generator keys the run asks for beyond the model of `source` that combine
    with it: a transformer's model.coverage, a loss on its cross-attention without weights of
    its own. model.copy (the copy gate p_gen) and an RNN's coverage (w_c in the additive
    score) bring weights that would start untrained beside the pretrained ones: UserError.
    GNMT's coverage penalty (decoding.coverage_penalty) is a decoding rule and combines."""
    asked = [key for key in ("copy", "coverage") if getattr(ours, key) and not getattr(theirs, key)]
    combined = list(LOSS_ONLY) if theirs.family is ModelFamily.transformer else []
    refused = [f"model.{key}=true" for key in asked if key not in combined]
    if refused:
        weights = "the copy gate" if "copy" in asked else "the coverage weights of its scores"
        raise UserError(
            f"{' and '.join(refused)} cannot start from model.init_from={source}: its model has "
            f"no pointer-generator, and {weights} would start untrained (a transformer's "
            "model.coverage, a loss alone, combines); fine-tune without it, or train a "
            "pointer-generator from scratch (config=dialogsum_pointer_generator)"
        )
    return [key for key in asked if key in combined]


def start_from_pretrained(model: Seq2Seq, pretrained: PretrainedModel, cfg: TrainConfig) -> None:
    """Load the pretrained weights into the run's new `model`; UserError when `cfg.model` is
    not the pretrained model's architecture (a config `initialized_config` did not make)."""
    differ = [
        f"model.{key}"
        for key in _differences(cfg.model, pretrained.cfg.model)
        if key.split(".")[0] not in (*FINE_TUNABLE, *LOSS_ONLY)
    ]
    if differ:
        raise UserError(
            f"the run's model.* differ from the model of model.init_from={pretrained.source} "
            f"({', '.join(differ[:3])}); a run's config takes them from it (initialized_config)"
        )
    load_weights(Path(pretrained.path), model, pretrained.weights)
    log.info(
        "initialised from %s (its weights and tokenizers; the optimizer, schedule and step "
        "start fresh)",
        pretrained.source,
    )


def _differences(ours: ModelConfig, theirs: ModelConfig) -> dict[str, tuple[Any, Any]]:
    """{flat key: (ours, theirs)} of the model keys whose values differ, init_from aside."""
    first, second = (flat_config(config_to_dict(_Root(each))["model"]) for each in (ours, theirs))
    return {
        key: (first[key], second.get(key))
        for key in sorted(first)
        if key != "init_from" and first[key] != second.get(key)
    }


# the packaged model group of each family, for the refusals
_MODEL_GROUPS = {"rnn": "rnn_bahdanau", "transformer": "transformer"}


@dataclass
class _Root:
    """A ModelConfig where `config_to_dict` of a TrainConfig reads one: under "model"."""

    model: ModelConfig


def _given_model_keys(given: Iterable[str]) -> list[str]:
    """The model.* keys of Hydra override strings ("model.d_model=512", "+model.x=1",
    "~model.y"), without the "model." prefix; a group choice (model=transformer) is none."""
    keys = []
    for override in given:
        key = str(override).lstrip("+~").split("=", 1)[0].strip()
        if key.startswith("model."):
            keys.append(key.removeprefix("model."))
    return keys


def _named(key: str, given: list[str]) -> bool:
    """Whether a flat model key (attention.kind) is one of `given` or inside one of them."""
    return any(key == name or key.startswith(name + ".") for name in given)


def _shown(value: Any) -> str:
    return "null" if value is None else str(value)
