"""`attnseq export --to huggingface` of a model read from M2M100, NLLB or mBART-50
(attnseq/models/multilingual_export.py) writes a folder of its family that transformers reads
and that computes what the checkpoint computes: an unchanged import goes out and back in
unchanged; a checkpoint fine-tuned in other languages (`data.src_lang_code`,
`data.tgt_lang_code`) goes out with them, its teacher-forced log-probabilities and its greedy
and beam outputs (the target's code forced first) transformers' own. What a family cannot
express is one line. The models are the stand-ins of tests/multilingual_stand_ins.py."""

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import adam_updates, assert_exported_unchanged, attnseq_in_process, save_model

pytest.importorskip("transformers", reason="the exported folders are read with transformers")

from multilingual_checks import OTHER_LANGUAGES, SOURCES, TARGETS  # noqa: E402
from multilingual_stand_ins import SHAPES, reference  # noqa: E402
from pretrained_checks import valid_sources  # noqa: E402

from attnseq.config.conversion import config_from_dict, config_to_dict  # noqa: E402
from attnseq.decoding import decode  # noqa: E402
from attnseq.models.huggingface_export import (  # noqa: E402
    EXPORT_FILE,
    export_family,
    export_huggingface,
)
from attnseq.models.loading import load_trained_model, model_for  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")

TOLERANCE = 1e-5
TOKENIZER_FILES = {
    "m2m100": ("vocab.json", "sentencepiece.bpe.model", "tokenizer_config.json"),
    "nllb": ("tokenizer.json", "tokenizer_config.json"),
    "mbart50": ("tokenizer.json", "tokenizer_config.json"),
}


def fine_tuned(folder: Path, languages: tuple[str, str], path: Path) -> Path:
    """The folder read in `languages`, 2 Adam steps on English-German pairs, saved at `path`."""
    src_code, tgt_code = languages
    codes = [f"data.src_lang_code={src_code}", f"data.tgt_lang_code={tgt_code}"]
    trained = load_trained_model(folder, codes)
    src, tgt = trained.tokenizers.src, trained.tokenizers.tgt
    pairs = list(zip(valid_sources("en")[:16], TARGETS * 4, strict=True)) * 2
    torch.manual_seed(0)
    adam_updates(trained.model, [(src.encode(s), tgt.encode(t)) for s, t in pairs], lr=1e-3)
    return save_model(path, trained.cfg, trained.tokenizers, trained.model.eval())


@pytest.fixture(scope="module")
def exports(multilingual_folders: dict, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """{name: (what was exported, the export)}: each stand-in, and each fine-tuned in other
    languages (`other-*`)."""
    folder = tmp_path_factory.mktemp("multilingual-exports")
    found = {}
    for name, shape in SHAPES.items():
        found[name] = (multilingual_folders[name], folder / name)
        other = OTHER_LANGUAGES[shape.tokenizer]
        checkpoint = fine_tuned(multilingual_folders[name], other, folder / f"{name}.pt")
        found[f"other-{name}"] = (checkpoint, folder / f"other-{name}")
    for source, out in found.values():
        export_huggingface(source, out)
    return found


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES)
def test_the_reimported_export_is_the_imported_model(exports: dict, shape: str) -> None:
    """Exact round trip: the same tensors, tokenizer files, model and decoding config."""
    folder, out = exports[shape]
    assert_exported_unchanged(folder, out, TOKENIZER_FILES[SHAPES[shape].tokenizer])
    marker = json.loads((out / EXPORT_FILE).read_text(encoding="utf-8"))
    assert marker["model_type"] == SHAPES[shape].model_type


@pytest.mark.parametrize("shape", SHAPES)
def test_the_export_keeps_the_languages_chosen(exports: dict, shape: str) -> None:
    checkpoint, out = exports[f"other-{shape}"]
    src, tgt = OTHER_LANGUAGES[SHAPES[shape].tokenizer]
    again = load_trained_model(out)
    assert (again.tokenizers.src.language, again.tokenizers.tgt.language) == (src, tgt)
    assert again.cfg.decoding.forced_first_token == again.tokenizers.tgt.codes[tgt]
    tokenizer = reference(out)[1]  # transformers' tokenizer of the export, its own languages
    ours = load_trained_model(checkpoint).tokenizers
    assert tokenizer(SOURCES)["input_ids"] == ours.src.encode_batch(SOURCES)


def batch_of(out: Path, texts: list[str], targets: list[str] | None = None) -> Any:
    tokenizer = reference(out)[1]
    tokenizer.src_lang = load_trained_model(out).tokenizers.src.language
    tokenizer.tgt_lang = load_trained_model(out).tokenizers.tgt.language
    return tokenizer(texts, text_target=targets, return_tensors="pt", padding=True)


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES)
def test_teacher_forced_log_probabilities_match(exports: dict, shape: str) -> None:
    checkpoint, out = exports[f"other-{shape}"]
    hf, ours = reference(out)[0], load_trained_model(checkpoint).model
    batch = batch_of(out, SOURCES, TARGETS)
    labels = batch["labels"]
    tgt_in = torch.cat([torch.full((len(SOURCES), 1), ours.bos_id), labels[:, :-1]], dim=1)
    with torch.no_grad():
        theirs = hf(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            decoder_input_ids=tgt_in,
        ).logits
        mine = ours(batch["input_ids"], batch["attention_mask"].sum(dim=1), tgt_in).logits
    real = labels != hf.config.pad_token_id
    index = labels.unsqueeze(-1)
    expected = theirs.log_softmax(-1).gather(-1, index).squeeze(-1)[real]
    got = mine.log_softmax(-1).gather(-1, index).squeeze(-1)[real]
    assert (expected - got).abs().max() < TOLERANCE


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("beam", [1, 4])
def test_generate_gives_attnseqs_outputs(exports: dict, shape: str, beam: int) -> None:
    """The checkpoint's decoding at `beam`, as attnseq decodes it, is what generate does with
    the exported generation config: the target's code forced first."""
    checkpoint, out = exports[f"other-{shape}"]
    hf = reference(out)[0]
    batch = batch_of(out, valid_sources("en")[:16])
    with torch.no_grad():
        generated = hf.generate(**batch, num_beams=beam)
    pad, eos = hf.config.pad_token_id, hf.config.eos_token_id
    expected = []
    for row in generated[:, 1:].tolist():
        row = row[: row.index(eos)] if eos in row else row
        expected.append([token for token in row if token != pad])
    trained = load_trained_model(checkpoint)
    settings = dataclasses.replace(trained.cfg.decoding, beam=beam)
    found = decode(trained.model, batch["input_ids"], batch["attention_mask"].sum(dim=1), settings)
    assert [hypotheses[0].tokens for hypotheses in found] == expected
    code = trained.tokenizers.tgt.codes[OTHER_LANGUAGES[SHAPES[shape].tokenizer][1]]
    assert all(tokens[0] == code for tokens in expected)


# ------------------------------------------------------------------ the family and refusals
@pytest.mark.slow
def test_the_family_is_the_tokenizers(multilingual_folders: dict) -> None:
    names = {
        name: export_family(load_trained_model(folder).tokenizers).name
        for name, folder in multilingual_folders.items()
    }
    assert names == {
        "m2m100": "M2M100",
        "nllb": "M2M100",
        "mbart50": "mBART",
        "mbart50-untied": "mBART",
    }


@pytest.mark.slow
@pytest.mark.parametrize(
    ("shape", "overrides", "named"),
    [
        (
            "m2m100",
            ["model.norm=post", "model.positions=learned", "model.output_bias=true"],
            ["model.norm=post", "model.positions=learned", "model.output_bias=true"],
        ),
        ("nllb", ["model.embed_norm=true"], ["model.embed_norm=true"]),
        (
            "mbart50",
            ["model.embed_norm=false", "model.position_offset=0", "model.conv_kernel=3"],
            ["model.embed_norm=false", "model.position_offset=0", "model.conv_kernel=3"],
        ),
    ],
)
def test_every_setting_the_family_lacks_is_named(
    multilingual_folders: dict, tmp_path: Path, shape: str, overrides: list, named: list
) -> None:
    """An attnseq transformer over the family's tokenizers that the family cannot express:
    one line, exit 2, each setting named, nothing written."""
    trained = load_trained_model(multilingual_folders[shape])
    cfg = config_from_dict(config_to_dict(trained.cfg), overrides)
    torch.manual_seed(0)
    model = model_for(cfg, trained.tokenizers)
    checkpoint = save_model(tmp_path / "own.pt", cfg, trained.tokenizers, model)
    result = attnseq_in_process(
        "export", str(checkpoint), "--to", "huggingface", "out", cwd=tmp_path
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    family = export_family(trained.tokenizers).name
    assert len(lines) == 1 and lines[0].startswith(f"error: cannot export to Hugging Face {family}")
    assert all(part in lines[0] for part in named), lines[0]
    assert not (tmp_path / "out").exists()


def converter_ready(folder: Path, copy: Path) -> Path:
    """A copy of a stand-in whose <pad> embedding is zero: CTranslate2 drops that row."""
    import shutil

    from transformers import AutoModelForSeq2SeqLM

    shutil.copytree(folder, copy, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    model = AutoModelForSeq2SeqLM.from_pretrained(folder)
    pad = model.config.pad_token_id
    with torch.no_grad():
        model.model.encoder.embed_tokens.weight[pad] = 0
        model.model.decoder.embed_tokens.weight[pad] = 0
    model.save_pretrained(copy)
    return copy


@pytest.mark.slow
@pytest.mark.parametrize("beam", [1, 4])
def test_the_ctranslate2_export_is_the_converters(
    multilingual_folders: dict, tmp_path: Path, beam: int
) -> None:
    """NLLB exported for CTranslate2 (attnseq/models/ctranslate2_export.py) decodes as
    CTranslate2's own converter of the folder does, the target's code as the prefix: the same
    tokens and scores. (With transformers 5 the converter miscounts M2M100Tokenizer's ids and
    finds no BOS in MBart50Tokenizer, so it reads neither of those stand-ins.)"""
    ctranslate2 = pytest.importorskip("ctranslate2", reason="ctranslate2 not installed")
    from attnseq.models.ctranslate2_export import export_ctranslate2

    folder = converter_ready(multilingual_folders["nllb"], tmp_path / "hf")
    ours = export_ctranslate2(folder, tmp_path / "attnseq")
    theirs = tmp_path / "converter"
    ctranslate2.converters.TransformersConverter(str(folder)).convert(str(theirs))
    tokenizers = load_trained_model(folder).tokenizers
    sources = [
        tokenizers.src.ids_to_pieces(ids)
        for ids in tokenizers.src.encode_batch(valid_sources("en")[:16])
    ]
    code = tokenizers.tgt.ids_to_pieces([tokenizers.tgt.language_id()])
    found = []
    for export in (ours, theirs):
        translator = ctranslate2.Translator(str(export), intra_threads=1)
        results = translator.translate_batch(
            sources,
            beam_size=beam,
            target_prefix=[code] * len(sources),
            no_repeat_ngram_size=2,
            max_decoding_length=30,
            return_scores=True,
        )
        found.append([(result.hypotheses[0], result.scores[0]) for result in results])
    mine, converted = found
    assert [tokens for tokens, _ in mine] == [tokens for tokens, _ in converted]
    assert max(abs(a - b) for (_, a), (_, b) in zip(mine, converted, strict=True)) < 1e-4
    assert len({tuple(tokens) for tokens, _ in mine}) > 1  # the sources decode differently
