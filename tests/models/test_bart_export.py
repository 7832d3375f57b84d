"""`attnseq export --to huggingface` of a model read from BART (attnseq/models/bart_export.py)
writes a BART folder that transformers' BartForConditionalGeneration and BartTokenizer read and
that computes what the checkpoint computes: the same teacher-forced log-probabilities, the same
greedy and beam outputs as attnseq's decoding, with the generation config the checkpoint's
decoding gives. An unchanged import goes out and back in unchanged; what BART cannot express
is one line. The models are the stand-ins of tests/bart_stand_ins.py, each also fine-tuned a
few Adam steps (`fine-tuned-*`)."""

import dataclasses
import functools
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import adam_updates, assert_exported_unchanged, attnseq_in_process, save_model

pytest.importorskip("transformers", reason="the exported folders are read with transformers")

from bart_stand_ins import SHAPES, reference  # noqa: E402

from attnseq.config.conversion import config_from_dict, config_to_dict  # noqa: E402
from attnseq.data.tokenizers import CharTokenizer, TokenizerPair  # noqa: E402
from attnseq.decoding import decode  # noqa: E402
from attnseq.models import bart_export, huggingface_export  # noqa: E402
from attnseq.models.huggingface_export import EXPORT_FILE, export_huggingface  # noqa: E402
from attnseq.models.loading import load_trained_model, model_for  # noqa: E402
from attnseq.models.pretrained import pretrained_payload  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")

TOLERANCE = 1e-5
SOURCES = [
    "A man rides his bike across a bridge.",
    "Zwei Hunde spielen im Schnee.",
    "Children.",
]
TARGETS = ["Ein Mann fährt über eine Brücke.", "Two dogs play.", "Kinder spielen am Strand."]
UPDATES = 4  # Adam steps of 16 Multi30k pairs (English -> German) each


@functools.cache
def multi30k(split: str, language: str, count: int) -> list[str]:
    from conftest import SHARED_DATA

    path = SHARED_DATA / "multi30k" / f"{split}.{language}"
    return path.read_text(encoding="utf-8").splitlines()[:count]


def fine_tuned(folder: Path, path: Path) -> Path:
    """The BART folder read by attnseq, `UPDATES` Adam steps on Multi30k, saved at `path`."""
    trained = load_trained_model(folder)
    src, tgt = trained.tokenizers.src, trained.tokenizers.tgt
    pairs = zip(multi30k("train", "en", 200), multi30k("train", "de", 200), strict=True)
    encoded = [(src.encode(en), tgt.encode(de)) for en, de in pairs]
    limit = trained.cfg.model.max_positions - 1
    fit = [pair for pair in encoded if max(len(pair[0]), len(pair[1])) <= limit]
    torch.manual_seed(0)
    adam_updates(trained.model, fit[: 16 * UPDATES], lr=1e-3)
    return save_model(path, trained.cfg, trained.tokenizers, trained.model.eval())


@pytest.fixture(scope="module")
def checkpoints(bart_folders: dict, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """What is exported, by name: each stand-in folder and its fine-tuned checkpoint."""
    folder = tmp_path_factory.mktemp("bart-fine-tuned")
    found: dict[str, Path] = dict(bart_folders)
    for name in SHAPES:
        found[f"fine-tuned-{name}"] = fine_tuned(bart_folders[name], folder / f"{name}.pt")
    return found


@pytest.fixture(scope="module")
def exports(checkpoints: dict, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("bart-exports")
    return {name: export_huggingface(path, folder / name) for name, path in checkpoints.items()}


EXPORTED = [*SHAPES, *(f"fine-tuned-{name}" for name in SHAPES)]


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES)
def test_the_reimported_export_is_the_imported_model(
    bart_folders: dict, exports: dict, shape: str
) -> None:
    """Exact round trip: the same tensors, tokenizer files, model and decoding config."""
    assert_exported_unchanged(bart_folders[shape], exports[shape], ("vocab.json", "merges.txt"))
    marker = json.loads((exports[shape] / EXPORT_FILE).read_text(encoding="utf-8"))
    assert marker["model_type"] == "bart"
    assert not (exports[shape] / "source.spm").exists()  # no Marian file


@pytest.mark.slow
def test_fine_tuning_changed_the_models(checkpoints: dict) -> None:
    for name in SHAPES:
        before = load_trained_model(checkpoints[name]).payload["model"]
        after = load_trained_model(checkpoints[f"fine-tuned-{name}"]).payload["model"]
        moved = [key for key in before if not torch.equal(before[key], after[key])]
        assert len(moved) > len(before) // 2, name


def logits_both(checkpoint: Path, export: Path) -> tuple[torch.Tensor, torch.Tensor, Any]:
    """Teacher-forced logits (B, T, V) of transformers' model of `export` and of attnseq's of
    `checkpoint` on one batch, and the labels (B, T)."""
    hf, tokenizer = reference(export)
    ours = load_trained_model(checkpoint).model
    batch = tokenizer(SOURCES, text_target=TARGETS, return_tensors="pt", padding=True)
    labels = batch["labels"]
    start = torch.full((len(SOURCES), 1), ours.bos_id)
    tgt_in = torch.cat([start, labels[:, :-1]], dim=1)  # (B, T): </s> <s> target
    with torch.no_grad():
        theirs = hf(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            decoder_input_ids=tgt_in,
        ).logits
        lengths = batch["attention_mask"].sum(dim=1)
        mine = ours(batch["input_ids"], lengths, tgt_in).logits
    return theirs, mine, labels


@pytest.mark.parametrize("name", EXPORTED)
def test_teacher_forced_log_probabilities_match(checkpoints: dict, exports: dict, name: str):
    theirs, mine, labels = logits_both(checkpoints[name], exports[name])
    real = labels != reference(exports[name])[0].config.pad_token_id
    index = labels.unsqueeze(-1)
    expected = theirs.log_softmax(-1).gather(-1, index).squeeze(-1)[real]
    got = mine.log_softmax(-1).gather(-1, index).squeeze(-1)[real]
    assert (expected - got).abs().max() < TOLERANCE


def generated(export: Path, beam: int) -> tuple[list[list[int]], Any]:
    """generate's outputs with the export's generation_config.json (the beam size alone
    given), without the start token, EOS and padding; and the batch."""
    hf, tokenizer = reference(export)
    batch = tokenizer(multi30k("val", "en", 16), return_tensors="pt", padding=True)
    pad, eos = hf.config.pad_token_id, hf.config.eos_token_id
    with torch.no_grad():
        out = hf.generate(**batch, num_beams=beam)
    outputs = []
    for row in out[:, 1:].tolist():
        row = row[: row.index(eos)] if eos in row else row
        outputs.append([token for token in row if token != pad])
    return outputs, batch


@pytest.mark.parametrize("name", EXPORTED)
@pytest.mark.parametrize("beam", [1, 4])
def test_generate_gives_attnseqs_outputs(
    checkpoints: dict, exports: dict, name: str, beam: int
) -> None:
    """The checkpoint's own decoding (its limit, forced <s> and </s>) at `beam`, as attnseq
    decodes it, is what generate does with the exported generation config."""
    expected, batch = generated(exports[name], beam)
    trained = load_trained_model(checkpoints[name])
    settings = dataclasses.replace(trained.cfg.decoding, beam=beam)
    lengths = batch["attention_mask"].sum(dim=1)
    found = decode(trained.model, batch["input_ids"], lengths, settings)
    assert [hypotheses[0].tokens for hypotheses in found] == expected
    assert all(tokens[0] == 0 for tokens in expected)  # <s> forced first


@pytest.mark.slow
def test_translate_writes_generates_text(checkpoints: dict, exports: dict, tmp_path: Path):
    hf, tokenizer = reference(exports["fine-tuned-tied"])
    sources = multi30k("val", "en", 16)
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    with torch.no_grad():
        expected = tokenizer.batch_decode(hf.generate(**batch), skip_special_tokens=True)
    (tmp_path / "src.en").write_text("\n".join(sources) + "\n", encoding="utf-8")
    checkpoint = str(checkpoints["fine-tuned-tied"])
    result = attnseq_in_process("translate", checkpoint, "-i", "src.en", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    # split on newlines alone: random weights write control characters too
    assert result.stdout.split("\n")[:-1] == expected


# ------------------------------------------------------------------ the family and refusals
@pytest.mark.slow
def test_the_family_is_the_tokenizers(bart_folders: dict, marian_folders: dict) -> None:
    """BART's tokenizers export as BART, Marian's and attnseq's own as Marian."""
    family = huggingface_export.export_family
    assert family(load_trained_model(bart_folders["tied"]).tokenizers).name == "BART"
    assert family(load_trained_model(marian_folders["shared"]).tokenizers).name == "Marian"
    chars = CharTokenizer.train(["ab"])
    assert family(TokenizerPair(chars, chars)).name == "Marian"


def own_bart_config(bart_folder: Path, *overrides: str) -> tuple[Any, TokenizerPair]:
    """The imported BART stand-in's config with `overrides`, and its tokenizers."""
    trained = load_trained_model(bart_folder)
    return config_from_dict(config_to_dict(trained.cfg), list(overrides)), trained.tokenizers


@pytest.mark.slow
def test_every_setting_bart_lacks_is_named(bart_folders: dict, tmp_path: Path) -> None:
    """An attnseq transformer over BART's tokenizers that BART cannot express: one line,
    exit 2, each setting named, nothing written."""
    cfg, tokenizers = own_bart_config(
        bart_folders["untied"],
        "model.norm=pre",
        "model.positions=sinusoidal",
        "model.position_offset=0",
        "model.embed_norm=false",
        "model.tie_embeddings=true",
        "model.conv_kernel=3",
    )
    torch.manual_seed(0)
    checkpoint = save_model(tmp_path / "own.pt", cfg, tokenizers, model_for(cfg, tokenizers))
    args = ("export", str(checkpoint), "--to", "huggingface", "out")
    result = attnseq_in_process(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot export to Hugging Face BART")
    for part in (
        "model.norm=pre",
        "model.positions=sinusoidal",
        "model.embed_norm=false",
        "model.tie_embeddings=true",
        "model.conv_kernel=3",
    ):
        assert part in lines[0], part
    assert "tokenizers" not in lines[0] and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_learned_positions_need_barts_offset(bart_folders: dict) -> None:
    cfg, tokenizers = own_bart_config(bart_folders["tied"], "model.position_offset=0")
    assert [problem.split(" ")[0] for problem in bart_export.bart_problems(cfg, tokenizers)] == [
        "model.position_offset=0"
    ]
    assert bart_export.bart_problems(*own_bart_config(bart_folders["tied"])) == []


@pytest.mark.slow
def test_a_bart_export_replaces_a_marian_one(
    bart_folders: dict, marian_folders: dict, tmp_path: Path
) -> None:
    """With force, the files of an earlier Marian export that BART lacks go too."""
    out = tmp_path / "out"
    export_huggingface(marian_folders["shared"], out)
    (out / "README.md").write_text("kept", encoding="utf-8")
    export_huggingface(bart_folders["tied"], out, force=True)
    names = sorted(path.name for path in out.iterdir())
    assert names == sorted(
        [
            "README.md",
            EXPORT_FILE,
            "config.json",
            "generation_config.json",
            "merges.txt",
            "model.safetensors",
            "vocab.json",
        ]
    )
    assert pretrained_payload(out)["pretrained"]["model_type"] == "bart"
