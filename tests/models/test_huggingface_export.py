"""`attnseq export --to huggingface` (attnseq/models/huggingface_export.py) writes a folder that
transformers' MarianMTModel, MarianTokenizer and pipeline("translation") read and that computes
what the checkpoint computes: the same teacher-forced log-probabilities, the same greedy and
beam outputs as `attnseq translate`. An imported Marian model goes out and back in unchanged;
a transformer attnseq builds goes out where Marian can express it; the rest is one line, exit
2, nothing written. The models are the random-weight stand-ins (`marian_folders`)."""

import functools
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import adam_updates, assert_exported_unchanged, attnseq_in_process, save_model

pytest.importorskip("transformers", reason="the exported folders are read with transformers")

from marian_stand_ins import SHAPES, SOURCES, TARGETS  # noqa: E402
from pretrained_checks import valid_sources  # noqa: E402

from attnseq.config.conversion import config_from_dict, config_to_dict  # noqa: E402
from attnseq.config.schema import TrainConfig  # noqa: E402
from attnseq.data.tokenizers import CharTokenizer, TokenizerPair  # noqa: E402
from attnseq.io.atomic import STAGING_PREFIX  # noqa: E402
from attnseq.io.checkpoint import save_checkpoint  # noqa: E402
from attnseq.models import huggingface_export  # noqa: E402
from attnseq.models.huggingface_export import EXPORT_FILE, export_huggingface  # noqa: E402
from attnseq.models.loading import load_trained_model, model_for  # noqa: E402
from attnseq.models.pretrained import pretrained_payload  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")

TOLERANCE = 1e-5
VALID = 16  # source sentences of Multi30k's validation split that are translated
# transformers builds of attnseq's own config (Marian tokenizers of a stand-in): a switch that
# no import sets in each (output_bias=false, the tanh GELU, an untied shared embedding)
OWN = {
    "separate": {
        "d_model": 32,
        "heads": 4,
        "enc_layers": 2,
        "dec_layers": 2,
        "ff_dim": 48,
        "activation": "gelu_tanh",
        "output_bias": False,
        "tie_embeddings": False,
        "dropout": 0.2,
        "attention_dropout": 0.1,
    },
    "shared": {
        "d_model": 24,
        "heads": 2,
        "enc_layers": 1,
        "dec_layers": 2,
        "ff_dim": 40,
        "activation": "relu",
        "scale_embeddings": False,
        "tie_embeddings": False,
        "share_src_tgt_embeddings": True,
        "max_positions": 128,
    },
}
OWN_MODEL = {"family": "transformer", "norm": "post", "positions": "sinusoidal_split"}
# the own models decode as generate can: beam 4, |Y|^alpha, its stopping rule, a fixed limit
OWN_DECODING = {
    "beam": 4,
    "length_penalty": 0.6,
    "length_penalty_offset": 0.0,
    "stop_at_current_length": True,
    "eos_at_limit": True,
    "max_output_ratio": 0.0,
    "max_output_extra": 20,
    "no_repeat_ngram": 2,
    "min_length": 2,
}


def train_pairs(count: int) -> list[tuple[str, str]]:
    from conftest import SHARED_DATA

    root = SHARED_DATA / "multi30k"
    de, en = ((root / f"train.{lang}").read_text(encoding="utf-8") for lang in ("de", "en"))
    return list(zip(de.splitlines()[:count], en.splitlines()[:count], strict=True))


def own_checkpoint(path: Path, tokenizers: TokenizerPair, updates: int, **model: Any) -> Path:
    """A transformer of attnseq's own config (post-norm, Marian's positions, `model`'s keys)
    over `tokenizers`, trained for `updates` Adam steps on Multi30k pairs, saved at `path`."""
    settings = {
        **{f"model.{key}": value for key, value in {**OWN_MODEL, **model}.items()},
        **{f"decoding.{key}": value for key, value in OWN_DECODING.items()},
        "data.max_src_len": 100,  # within every position table
        "data.max_tgt_len": 100,
    }
    overrides = [f"{key}={str(value).lower()}" for key, value in settings.items()]
    cfg = config_from_dict(config_to_dict(TrainConfig(name="own")), overrides)
    torch.manual_seed(0)
    module = model_for(cfg, tokenizers)
    if updates:
        encoded = [
            (tokenizers.src.encode(s), tokenizers.tgt.encode(t)) for s, t in train_pairs(800)
        ]
        fit = [pair for pair in encoded if max(len(pair[0]), len(pair[1]) + 1) <= 100]
        adam_updates(module, fit[: 16 * updates])
    return save_model(path, cfg, tokenizers, module)


@pytest.fixture(scope="module")
def checkpoints(marian_folders: dict, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """What is exported, by name: each stand-in folder, and an own transformer per `OWN`."""
    folder = tmp_path_factory.mktemp("own-transformers")
    found: dict[str, Path] = dict(marian_folders)
    for name, model in OWN.items():
        tokenizers = load_trained_model(marian_folders[name]).tokenizers
        found[f"own-{name}"] = own_checkpoint(folder / f"{name}.pt", tokenizers, 12, **model)
    return found


@pytest.fixture(scope="module")
def exports(checkpoints: dict, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("hf-exports")
    return {name: export_huggingface(path, folder / name) for name, path in checkpoints.items()}


EXPORTED = [*SHAPES, *(f"own-{name}" for name in OWN)]


@functools.cache
def reference(folder: Path) -> tuple[Any, Any]:
    from transformers import MarianMTModel, MarianTokenizer

    model = MarianMTModel.from_pretrained(folder).eval()
    return model, MarianTokenizer.from_pretrained(folder)


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES)
def test_the_reimported_export_is_the_imported_model(
    marian_folders: dict, exports: dict, shape: str
) -> None:
    """Exact round trip: the same tensors, tokenizer files, model and decoding config."""
    files = ("source.spm", "target.spm", "vocab.json")
    assert_exported_unchanged(marian_folders[shape], exports[shape], files)


@pytest.mark.parametrize("name", EXPORTED)
def test_teacher_forced_log_probabilities_match(checkpoints: dict, exports: dict, name: str):
    hf, tokenizer = reference(exports[name])
    ours = load_trained_model(checkpoints[name]).model
    batch = tokenizer(SOURCES, text_target=TARGETS, return_tensors="pt", padding=True)
    labels = batch["labels"]
    real = labels != hf.config.pad_token_id
    start = torch.full((len(SOURCES), 1), ours.bos_id)
    tgt_in = torch.cat([start, labels[:, :-1]], dim=1)  # (B, T)
    with torch.no_grad():
        theirs = hf(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            decoder_input_ids=tgt_in,
        ).logits
        lengths = batch["attention_mask"].sum(dim=1)
        mine = ours(batch["input_ids"], lengths, tgt_in).logits
    index = labels.unsqueeze(-1)
    expected = theirs.log_softmax(-1).gather(-1, index).squeeze(-1)[real]
    got = mine.log_softmax(-1).gather(-1, index).squeeze(-1)[real]
    assert (expected - got).abs().max() < TOLERANCE


def translated(checkpoint: Path, work: Path, *options: str) -> list[str]:
    """`attnseq translate CHECKPOINT` of the validation sources, one line each."""
    (work / "src.de").write_text("\n".join(valid_sources("de", VALID)) + "\n", encoding="utf-8")
    result = attnseq_in_process("translate", str(checkpoint), "-i", "src.de", *options, cwd=work)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


@pytest.mark.parametrize("name", EXPORTED)
@pytest.mark.parametrize("beam", [1, 4])
def test_generate_gives_attnseq_translates_outputs(
    checkpoints: dict, exports: dict, tmp_path: Path, name: str, beam: int
) -> None:
    """generate with the exported generation_config.json's defaults (the beam size alone
    given) translates as `attnseq translate --beam` of the checkpoint does."""
    hf, tokenizer = reference(exports[name])
    batch = tokenizer(valid_sources("de", VALID), return_tensors="pt", padding=True)
    with torch.no_grad():
        out = hf.generate(**batch, num_beams=beam)
    expected = tokenizer.batch_decode(out, skip_special_tokens=True)
    assert translated(checkpoints[name], tmp_path, "--beam", str(beam)) == expected


@pytest.mark.parametrize("name", ["shared", "own-separate"])
def test_pipeline_translates_as_attnseq_does(
    checkpoints: dict, exports: dict, tmp_path: Path, name: str
) -> None:
    import transformers
    from transformers.pipelines import SUPPORTED_TASKS

    if "translation" not in SUPPORTED_TASKS:
        pytest.skip(f"transformers {transformers.__version__} has no translation pipeline")
    translator = transformers.pipeline("translation", model=str(exports[name]))
    outputs = translator(valid_sources("de", VALID), num_beams=1)
    assert [row["translation_text"] for row in outputs] == translated(
        checkpoints[name], tmp_path, "--beam", "1"
    )
    default = [row["translation_text"] for row in translator(valid_sources("de", VALID))]
    assert default == translated(checkpoints[name], tmp_path)  # the checkpoint's beam


def test_the_configs_say_what_attnseqs_say(exports: dict) -> None:
    import json

    config = json.loads((exports["own-shared"] / "config.json").read_text(encoding="utf-8"))
    assert config["model_type"] == "marian" and config["activation_function"] == "relu"
    assert not config["scale_embedding"] and config["max_position_embeddings"] == 128
    # attnseq's shared but untied embedding: transformers' untied embeddings, equal
    assert not config["share_encoder_decoder_embeddings"] and not config["tie_word_embeddings"]
    generation = json.loads((exports["own-separate"] / "generation_config.json").read_text())
    assert generation["num_beams"] == 4 and generation["length_penalty"] == 0.6
    assert generation["max_length"] == 22 and generation["min_length"] == 3
    assert generation["no_repeat_ngram_size"] == 2 and not generation["early_stopping"]
    pad = generation["pad_token_id"]
    assert generation["decoder_start_token_id"] == pad and generation["bad_words_ids"] == [[pad]]


def test_the_decoding_generate_cannot_follow_is_named() -> None:
    """attnseq's own decoding defaults: GNMT's length penalty and a limit that grows with the
    source have no generate setting; the rest maps."""
    from attnseq.config.schema import DecodingConfig

    decoding = DecodingConfig(beam=5)
    tokens = TokenizerPair(CharTokenizer.train(["ab"]), CharTokenizer.train(["ab"]))
    settings, missing = huggingface_export.generation_settings(decoding, tokens, 512)
    assert settings["num_beams"] == 5 and settings["early_stopping"] == "never"
    assert settings["max_length"] == 512 and settings["forced_eos_token_id"] is None
    assert [item.split("=")[0] for item in missing] == [
        "decoding.max_output_ratio",
        "decoding.length_penalty_offset",
    ]


@pytest.mark.slow
def test_a_saved_import_exports(marian_folders: dict, tmp_path: Path) -> None:
    """`Model.save` of an imported model is a checkpoint of its own (neither the folder nor
    the network is needed), and it exports as the folder does."""
    import attnseq

    folder = tmp_path / "model"
    shutil.copytree(marian_folders["separate"], folder)
    saved = attnseq.load(folder, "cpu").save(tmp_path / "saved.pt")
    shutil.rmtree(folder)
    out = export_huggingface(saved, tmp_path / "out")
    again = pretrained_payload(out)
    state = load_trained_model(saved).payload["model"]
    assert all(torch.equal(state[name], tensor) for name, tensor in again["model"].items())


@pytest.mark.slow
def test_head_masks_are_folded_into_the_output_projections(
    marian_folders: dict, tmp_path: Path
) -> None:
    """A pruned model's masks (zeros and a scale) go out in W^O: the export computes what the
    masked model computes."""
    trained = load_trained_model(marian_folders["shared"])
    state = dict(trained.payload["model"])
    state["decoder_layers.1.cross_attn.head_mask"] = torch.tensor([1.0, 0.0, 0.5, 1.0])
    state["encoder.layers.0.self_attn.head_mask"] = torch.tensor([0.0, 1.0, 1.0, 1.0])
    payload = {key: trained.payload[key] for key in ("config", "tokenizers")}
    pruned = tmp_path / "pruned.pt"
    save_checkpoint(pruned, {**payload, "model": state})
    out = export_huggingface(pruned, tmp_path / "out")
    hf, tokenizer = reference(out)
    masked = load_trained_model(pruned).model
    batch = tokenizer(SOURCES, text_target=TARGETS, return_tensors="pt", padding=True)
    tgt_in = torch.cat([torch.full((len(SOURCES), 1), masked.bos_id), batch["labels"][:, :-1]], 1)
    with torch.no_grad():
        theirs = hf(
            **{k: batch[k] for k in ("input_ids", "attention_mask")}, decoder_input_ids=tgt_in
        )
        mine = masked(batch["input_ids"], batch["attention_mask"].sum(1), tgt_in)
    unmasked = load_trained_model(marian_folders["shared"]).model
    with torch.no_grad():
        plain = unmasked(batch["input_ids"], batch["attention_mask"].sum(1), tgt_in).logits
    assert (theirs.logits - mine.logits).abs().max() < TOLERANCE
    assert (plain - mine.logits).abs().max() > 1e-2  # the masks change the model


# ------------------------------------------------------------------------------ refusals
def refused(work: Path, *args: str) -> str:
    """The one `error:` line of an export refused with exit status 2."""
    result = attnseq_in_process("export", *args, cwd=work)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_a_trained_own_transformer_is_refused_in_one_line(
    trained_transformer_checkpoint: Path, tmp_path: Path
) -> None:
    """attnseq's default transformer: pre-norm, interleaved sinusoids, its own tokenizers."""
    line = refused(tmp_path, str(trained_transformer_checkpoint), "--to", "huggingface", "out")
    for part in ("model.norm=pre", "model.positions=sinusoidal", "own char tokenizers"):
        assert part in line
    assert not (tmp_path / "out").exists()
    assert not list(tmp_path.glob(f"{STAGING_PREFIX}*"))


@pytest.mark.slow
def test_every_setting_marian_lacks_is_named(marian_folders: dict, tmp_path: Path) -> None:
    tokenizers = load_trained_model(marian_folders["shared"]).tokenizers
    checkpoint = own_checkpoint(
        tmp_path / "other.pt",
        tokenizers,
        0,
        norm="pre",
        positions="learned",
        conv_kernel=3,
        d_model=16,
        heads=2,
        enc_layers=1,
        dec_layers=1,
        ff_dim=16,
    )
    line = refused(tmp_path, str(checkpoint), "--to", "huggingface", "out")
    for part in ("model.norm=pre", "model.positions=learned", "model.conv_kernel=3"):
        assert part in line
    assert "tokenizers" not in line  # Marian's own tokenizers are expressible
    assert not (tmp_path / "out").exists()


def test_an_rnn_is_refused(rnn_checkpoint: Path, tmp_path: Path) -> None:
    line = refused(tmp_path, str(rnn_checkpoint), "--to", "huggingface", "out")
    assert "model.family=rnn" in line and "tokenizers" in line
    assert not (tmp_path / "out").exists()


def test_quantize_is_for_ctranslate2(marian_folders: dict, tmp_path: Path) -> None:
    folder = str(marian_folders["shared"])
    line = refused(tmp_path, folder, "--to", "huggingface", "out", "--quantize", "int8")
    assert "--quantize" in line and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_the_out_folder_rules_are_the_ctranslate2_exports(
    marian_folders: dict, tmp_path: Path
) -> None:
    """A folder of other files is refused, an earlier export needs --force, which replaces
    the export's files and keeps the others."""
    folder = str(marian_folders["untied"])
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine", encoding="utf-8")
    assert "not an attnseq export" in refused(tmp_path, folder, "--to", "huggingface", "other")
    assert sorted(path.name for path in (tmp_path / "other").iterdir()) == ["notes.txt"]
    result = attnseq_in_process("export", folder, "--to", "huggingface", "out", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "--force" in refused(tmp_path, folder, "--to", "huggingface", "out")
    (tmp_path / "out" / "README.md").write_text("kept", encoding="utf-8")
    args = ("export", folder, "--to", "huggingface", "out", "--force")
    assert attnseq_in_process(*args, cwd=tmp_path).returncode == 0
    assert (tmp_path / "out" / "README.md").read_text(encoding="utf-8") == "kept"
    assert (tmp_path / "out" / EXPORT_FILE).is_file()


@pytest.mark.slow
def test_a_failure_mid_write_leaves_no_folder(
    marian_folders: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = huggingface_export._hugging_face_writers()

    def failing_save(tensors: dict, path: Path, metadata: dict) -> None:
        real[2](tensors, path, metadata=metadata)
        raise RuntimeError("the disk went away")

    monkeypatch.setattr(
        huggingface_export, "_hugging_face_writers", lambda: (real[0], real[1], failing_save)
    )
    with pytest.raises(RuntimeError, match="the disk went away"):
        export_huggingface(marian_folders["shared"], tmp_path / "out")
    assert sorted(path.name for path in tmp_path.iterdir()) == []
    # an earlier export stays as it was
    monkeypatch.undo()
    export_huggingface(marian_folders["separate"], tmp_path / "out")
    before = {path.name: path.read_bytes() for path in (tmp_path / "out").iterdir()}
    monkeypatch.setattr(
        huggingface_export, "_hugging_face_writers", lambda: (real[0], real[1], failing_save)
    )
    with pytest.raises(RuntimeError):
        export_huggingface(marian_folders["shared"], tmp_path / "out", force=True)
    assert {path.name: path.read_bytes() for path in (tmp_path / "out").iterdir()} == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out"]
