"""Each `model.*` key is read by the family its schema field names (or by both): a model of one
family is the same model whatever the other family's keys hold, and changing a key the family
reads changes the model. A run that sets the other family's key is refused in one line; a
checkpoint whose config holds one keeps loading and resuming. The packaged configs set only
keys their family reads."""

import copy
import dataclasses
import functools
from pathlib import Path

import pytest
import torch
from helpers import (
    TINY_SIZES,
    assert_refused,
    check_train_args,
    experiment_overrides,
    tiny_config,
    train_in_process,
    untrained_checkpoint,
)
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf, open_dict

from attnseq.config import CONFIG_DIR
from attnseq.config.checks import keys_unread_by, model_key_families, validate
from attnseq.config.choices import ModelFamily
from attnseq.config.conversion import config_from_dict, config_to_dict, resume_conflicts
from attnseq.config.schema import TrainConfig, register_configs
from attnseq.data.segments import SourceSegmenter
from attnseq.errors import UserError
from attnseq.io.checkpoint import load_checkpoint, save_checkpoint
from attnseq.models import Vocabularies, build_model
from attnseq.models.loading import load_trained_model
from attnseq.training.train_step import supervised_attention

VOCAB = 20
PAD, UNK, BOS, EOS = 0, 1, 2, 3
FAMILIES = {entry.key: entry.family for entry in model_key_families()}
RNN, TRANSFORMER = ModelFamily.rnn, ModelFamily.transformer


def only(family: ModelFamily) -> list[str]:
    return [key for key, reader in FAMILIES.items() if reader is family]


def model_config(family: ModelFamily, *overrides: str) -> TrainConfig:
    """A tiny config of `family` as a checkpoint would hold it (no run-start check)."""
    sizes = TINY_SIZES[family.name]
    return config_from_dict({}, [f"model.family={family.name}", *sizes, *overrides])


def source_and_target() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two sources of 12 and 9 words with sentence ends among them, and 10 target inputs."""
    generator = torch.Generator().manual_seed(3)
    src = torch.randint(8, VOCAB, (2, 12), generator=generator)
    src[:, [2, 6, 9]] = torch.tensor([4, 5, 6])  # sentence ends: four segments
    src[1, 9:] = PAD
    tgt_in = torch.randint(4, VOCAB, (2, 10), generator=generator)
    tgt_in[:, 0] = BOS
    return src, torch.tensor([12, 9]), tgt_in


def fingerprint(cfg: TrainConfig, train: bool = False) -> dict[str, object]:
    """What a model of `cfg` is: its weights (names, shapes, values from one seed) and one
    teacher-forced pass (logits, attention, extras), built as loading.py builds it and given
    the guided-alignment head that train_step.py would give it."""
    torch.manual_seed(0)
    attention = cfg.model.attention
    cut = None
    if attention.hierarchy.name != "none":  # words 4..7 end a sentence
        surfaces = [""] * 4 + [f"W{i}{'.' if i < 8 else ''} " for i in range(4, VOCAB)]
        cut = SourceSegmenter(surfaces, attention.max_segments)
    vocab = Vocabularies(VOCAB, VOCAB, PAD, BOS, EOS, UNK)
    model = build_model(cfg.model, vocab, cut).train(train)
    src, lengths, tgt_in = source_and_target()
    inputs: dict[str, object] = {}
    if cfg.model.copy:
        inputs = {"src_ext": src, "n_oov": 0}
    elif not cfg.model.coverage:  # copy and coverage models take no guided alignment
        aligned = copy.deepcopy(cfg)
        aligned.optim.alignment_lambda = 1.0
        inputs = {"alignment": supervised_attention(aligned)}
    torch.manual_seed(1)  # dropout and Gumbel noise
    output = model(src, lengths, tgt_in, need_weights=True, **inputs)
    return {
        "weights": {name: value.clone() for name, value in model.state_dict().items()},
        "output": fields_of(output),
    }


def fields_of(value: object) -> object:
    """A dataclass as a dict of the fields it holds (not None), nested dataclasses too."""
    if dataclasses.is_dataclass(value):
        fields = ((field.name, getattr(value, field.name)) for field in dataclasses.fields(value))
        return {name: fields_of(item) for name, item in fields if item is not None}
    return value


def same(a: dict[str, object], b: dict[str, object]) -> bool:
    if a.keys() != b.keys():
        return False
    for name, value in a.items():
        other = b[name]
        if isinstance(value, dict):
            if not same(value, other):  # type: ignore[arg-type]
                return False
        elif isinstance(value, torch.Tensor):
            if value.shape != other.shape or not torch.equal(value, other):  # type: ignore[union-attr]
                return False
        elif value != other:
            return False
    return True


def changed_value(key: str) -> str:
    """A value other than the schema's default, of the key's type."""
    default = next(entry.default for entry in model_key_families() if entry.key == key)
    if isinstance(default, bool):
        return str(not default).lower()
    if hasattr(default, "name") and hasattr(type(default), "__members__"):
        return next(name for name in type(default).__members__ if name != default.name)
    if default is None:
        none_defaults = {
            "model.alignment_head": "0",
            "model.activation_dropout": "0.3",
            "model.share_src_tgt_embeddings": "true",
        }
        return none_defaults.get(key, "8")
    if isinstance(default, float):
        return "0.3"
    return {"model.conv_kernel": "3", "model.copy_layer": "0", "model.alignment_layer": "0"}.get(
        key, str(default + 1)
    )


# ------------------------------------------------------------ a family ignores the other's keys
# The model classes a family builds: plain, pointer-generator, hard attention (the default run
# takes the plain one, `-m slow` each).
CONTEXTS = {"plain": [], "copy": ["model.copy=true", "model.coverage=true"]}
CONTEXTS["hard"] = ["model.attention.hard=gumbel"]


@pytest.mark.parametrize(
    "context",
    [pytest.param(name, marks=() if name == "plain" else pytest.mark.slow) for name in CONTEXTS],
)
@pytest.mark.parametrize(
    ("family", "key"),
    [(RNN, key) for key in only(TRANSFORMER)] + [(TRANSFORMER, key) for key in only(RNN)],
)
def test_a_family_ignores_the_other_familys_keys(
    family: ModelFamily, key: str, context: str
) -> None:
    base, evaluated, trained = plain_model(family, context)
    other = model_config(family, *CONTEXTS[context], f"{key}={changed_value(key)}")
    assert config_to_dict(other) != config_to_dict(base)
    assert same(evaluated, fingerprint(other)), f"{family.name} reads {key}"
    assert same(trained, fingerprint(other, train=True)), f"{family.name} reads {key}"


@functools.cache
def plain_model(family: ModelFamily, context: str) -> tuple[TrainConfig, dict, dict]:
    """The config of `family` in `context` and its fingerprints in eval and training mode."""
    cfg = model_config(family, *CONTEXTS[context])
    return cfg, fingerprint(cfg), fingerprint(cfg, train=True)


# ------------------------------------------------------------ a family reads its own keys
# For each key a family reads: the context in which it matters and the value it gets there.
RNN_READS = {
    "model.decoder": ([], "luong"),
    "model.emb_dim": ([], "8"),
    "model.hidden": ([], "16"),
    "model.enc_hidden": ([], "8"),
    "model.input_feeding": (["model.decoder=luong", "model.attention.score=general"], "false"),
    "model.rnn.cell": ([], "lstm"),
    "model.rnn.layers": ([], "2"),
    "model.rnn.bidirectional": ([], "false"),
    "model.rnn.init_hidden": ([], "zero"),
    "model.attention.score": ([], "dot"),
    "model.attention.window": (["model.attention.score=general"], "local_p"),
    "model.attention.D": (["model.attention.window=local_m"], "1"),
    "model.attention.attn_dim": ([], "8"),
    "model.attention.hierarchy": ([], "sentence"),
    "model.attention.max_segments": (["model.attention.hierarchy=sentence"], "2"),
    "model.attention.hard": ([], "gumbel"),
    "model.attention.hard_k": (["model.attention.hard=gumbel"], "2"),
    "model.attention.values": ([], "embeddings"),
    "model.max_positions": (["model.attention.score=location"], "300"),
    "model.dropout": ([], "0.3"),
    "model.tie_embeddings": ([], "false"),
    "model.share_src_tgt_embeddings": ([], "true"),
    "model.copy": ([], "true"),
    "model.coverage": ([], "true"),
}
TRANSFORMER_READS = {
    "model.d_model": ([], "16"),
    "model.heads": ([], "4"),
    "model.enc_layers": ([], "2"),
    "model.dec_layers": ([], "2"),
    "model.ff_dim": ([], "16"),
    "model.norm": ([], "post"),
    "model.positions": ([], "learned"),
    "model.activation": ([], "gelu"),
    "model.activation_dropout": ([], "0.3"),
    "model.scale_embeddings": ([], "false"),
    "model.output_bias": ([], "true"),
    "model.attention_dropout": ([], "0.3"),
    "model.max_positions": (["model.positions=learned"], "512"),
    "model.position_offset": (["model.positions=learned"], "2"),
    "model.embed_norm": ([], "true"),
    "model.conv_kernel": ([], "3"),
    "model.attention.kind": ([], "local"),
    "model.attention.D": (["model.attention.kind=local"], "1"),
    "model.attention.scaled": ([], "false"),
    "model.attention.decoder_self": (["model.attention.kind=local"], "true"),
    "model.attention.stride": (["model.attention.kind=strided"], "2"),
    "model.attention.pattern": (["model.attention.kind=strided"], "fixed"),
    "model.attention.summary": (
        ["model.attention.kind=strided", "model.attention.pattern=fixed"],
        "2",
    ),
    "model.attention.global_tokens": (["model.attention.kind=longformer"], "3"),
    "model.attention.proj_dim": (["model.attention.kind=linformer"], "8"),
    "model.attention.features": (["model.attention.kind=performer"], "16"),
    "model.attention.block_size": (["model.attention.kind=bigbird"], "2"),
    "model.attention.window_blocks": (
        ["model.attention.kind=bigbird", "model.attention.block_size=2"],
        "0",
    ),
    "model.attention.global_blocks": (
        ["model.attention.kind=bigbird", "model.attention.block_size=2"],
        "0",
    ),
    "model.attention.random_blocks": (
        ["model.attention.kind=bigbird", "model.attention.block_size=2"],
        "0",
    ),
    "model.attention.pattern_seed": (
        ["model.attention.kind=bigbird", "model.attention.block_size=2"],
        "5",
    ),
    "model.attention.memory_slots": ([], "2"),
    "model.attention.memory_in_cross": (["model.attention.memory_slots=2"], "true"),
    "model.attention.hard": ([], "gumbel"),
    "model.attention.hard_k": (["model.attention.hard=gumbel"], "2"),
    "model.dropout": ([], "0.3"),
    "model.tie_embeddings": ([], "false"),
    "model.share_src_tgt_embeddings": ([], "true"),
    "model.copy": ([], "true"),
    "model.coverage": ([], "true"),
    "model.copy_layer": (["model.copy=true", "model.dec_layers=2"], "0"),
    "model.alignment_layer": (["model.dec_layers=2"], "0"),
    "model.alignment_head": ([], "1"),
}
READS = {RNN: RNN_READS, TRANSFORMER: TRANSFORMER_READS}


@pytest.mark.parametrize("family", [RNN, TRANSFORMER])
def test_the_read_cases_cover_every_key_the_family_reads(family: ModelFamily) -> None:
    reads = {key for key, reader in FAMILIES.items() if reader in (None, family)}
    # model.init_from is the training's: where the first weights come from, not the model's
    assert set(READS[family]) == reads - {"model.family", "model.init_from"}


@pytest.mark.parametrize(
    ("family", "key"), [(family, key) for family, cases in READS.items() for key in cases]
)
def test_a_family_reads_its_own_keys(family: ModelFamily, key: str) -> None:
    context, value = READS[family][key]
    base = model_config(family, *context)
    changed = model_config(family, *context, f"{key}={value}")
    # dropout changes only what a model in training mode computes
    differs = any(
        not same(fingerprint(base, mode), fingerprint(changed, mode)) for mode in (False, True)
    )
    assert differs, f"{family.name} ignores {key}"


# ------------------------------------------------------------ the check when a run starts
def test_a_key_of_the_other_family_is_refused_in_one_line(tmp_path: Path) -> None:
    code, output = train_in_process(tmp_path, "model=transformer", "model.hidden=512")
    assert_refused(tmp_path, code, output, "model.hidden=512 is an RNN setting")
    assert "model.family=transformer does not read it" in output
    assert "model.d_model" in output and "model=rnn_bahdanau" in output


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["model=transformer", "model.decoder=luong"], "model.decoder=luong is an RNN setting"),
        (["model=transformer", "model.rnn.cell=lstm"], "model.rnn.cell=lstm is an RNN setting"),
        (
            ["model=transformer", "model.attention.hierarchy=sentence"],
            "model.attention.hierarchy=sentence is an RNN setting",
        ),
        (["model.d_model=64"], "model.d_model=64 is a transformer setting; model.family=rnn"),
        (
            ["model=rnn_luong", "model.attention.kind=local"],
            "model.attention.kind=local is a transformer setting",
        ),
        (["model.attention.memory_in_cross=true"], "memory_in_cross=true is a transformer"),
        (["model.alignment_head=0"], "model.alignment_head=0 is a transformer setting"),
    ],
)
def test_the_check_names_the_key_and_the_family(overrides: list[str], expected: str) -> None:
    with pytest.raises(UserError) as error:
        check_train_args(overrides)
    assert expected in str(error.value) and "\n" not in str(error.value)


@pytest.mark.slow
def test_a_key_set_to_its_default_is_not_refused() -> None:
    cfg = check_train_args(["model=transformer", "model.hidden=128", "model.decoder=bahdanau"])
    assert cfg.model.family is TRANSFORMER
    check_train_args(["model.attention.kind=full", "model.d_model=256"])


@pytest.mark.slow
def test_keys_of_both_families_pass_with_either() -> None:
    for model in ("rnn_bahdanau", "transformer"):
        check_train_args([f"model={model}", "model.dropout=0.2", "model.max_positions=64"])


@pytest.mark.slow
def test_a_sweep_over_families_is_refused_for_the_family_that_ignores_a_key() -> None:
    with pytest.raises(UserError, match="model.hidden=64 is an RNN setting; model.family=trans"):
        check_train_args(["-m", "model=rnn_bahdanau,transformer", "model.hidden=64"])
    check_train_args(["-m", "model=rnn_bahdanau,rnn_luong", "model.hidden=64"])


@pytest.mark.slow
def test_a_refused_sweep_exits_2_before_any_job(tmp_path: Path) -> None:
    code, output = train_in_process(
        tmp_path,
        "-m",
        "model=rnn_bahdanau,transformer",
        "model.hidden=64",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )
    assert_refused(tmp_path, code, output, "model.family=transformer does not read it")
    assert not (tmp_path / "sweep").exists()


# ------------------------------------------------------------ checkpoints
def test_an_old_checkpoint_with_keys_of_the_other_family_loads(tmp_path: Path) -> None:
    path = untrained_checkpoint(tmp_path / "model.pt", "model.family=transformer")
    payload = load_checkpoint(path)
    payload["config"]["model"].update(hidden=512, decoder="luong", emb_dim=300)
    payload["config"]["model"]["rnn"]["layers"] = 3
    save_checkpoint(path, payload)  # as saved before such keys were refused

    trained = load_trained_model(path)
    assert trained.cfg.model.hidden == 512 and trained.cfg.model.family is TRANSFORMER
    with pytest.raises(UserError, match="model.hidden=512 is an RNN setting"):
        validate(trained.cfg)  # a new run of this config would be refused
    src = torch.tensor([[5, 6, 7]])
    output = trained.model(src, torch.tensor([3]), torch.tensor([[BOS, 5]]))
    assert torch.isfinite(output.logits).all()


def test_resuming_ignores_keys_the_family_does_not_read() -> None:
    saved = model_config(TRANSFORMER, "model.hidden=512", "model.rnn.layers=3")
    current = model_config(TRANSFORMER)
    assert resume_conflicts(saved, current) == []
    wider = model_config(TRANSFORMER, "model.d_model=64")
    assert resume_conflicts(saved, wider) == ["model.d_model: checkpoint 32, now 64"]
    rnn = model_config(RNN, "model.hidden=512")
    assert "model.hidden: checkpoint 512, now 32" in resume_conflicts(rnn, model_config(RNN))


def test_the_checks_of_a_checkpoint_skip_the_family_rule() -> None:
    cfg = model_config(RNN, "model.attention.kind=local", "model.conv_kernel=4")
    validate(cfg, run_start=False)
    with pytest.raises(UserError, match="kind=local is a transformer setting"):
        validate(cfg)


def test_tiny_config_sets_only_its_familys_keys() -> None:
    for family in (RNN, TRANSFORMER):
        cfg = tiny_config(f"model.family={family.name}")
        defaults = {entry.key: entry.default for entry in model_key_families()}
        flat = {key: value for key, value in _flat(cfg).items() if key in defaults}
        unread = keys_unread_by(family)
        assert all(flat[key] == defaults[key] for key in unread), family


def _flat(cfg: TrainConfig) -> dict[str, object]:
    values: dict[str, object] = {}

    def walk(prefix: str, node: object) -> None:
        for spec in dataclasses.fields(node):  # type: ignore[arg-type]
            value = getattr(node, spec.name)
            if dataclasses.is_dataclass(value):
                walk(f"{prefix}{spec.name}.", value)
            else:
                values[f"{prefix}{spec.name}"] = value

    walk("", cfg)
    return values


# ------------------------------------------------------------------------ the packaged configs
def _packaged(group: str) -> list[str]:
    return sorted(path.stem for path in (CONFIG_DIR / group).glob("*.yaml"))


@pytest.mark.parametrize(
    "overrides",
    [experiment_overrides(name) for name in _packaged("experiment")]
    + [[f"hparams_search={name}"] for name in _packaged("hparams_search")]
    + [[f"model={name}"] for name in _packaged("model")],
    ids=lambda overrides: overrides[0],
)
def test_packaged_configs_set_only_keys_their_family_reads(overrides: list[str]) -> None:
    register_configs()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        composed = compose("train", overrides=overrides, return_hydra_config=True)
    params = OmegaConf.select(composed, "hydra.sweeper.params") or {}
    with open_dict(composed):
        del composed["hydra"]
    cfg = OmegaConf.to_object(composed)
    assert isinstance(cfg, TrainConfig)
    validate(cfg)
    # the keys a sweeper samples are read by the swept family too
    unread = keys_unread_by(cfg.model.family)
    assert not [key for key in params if key in unread], params
