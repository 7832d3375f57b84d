"""Decoding with a CTranslate2 export (attnseq/decoding/ctranslate2_engine.py): the engine
computes the same log-probabilities as attnseq (pre- and post-norm, sinusoidal and learned
positions, joint and separate vocabularies), gives the same greedy and beam outputs, and refuses
what it cannot run. The export itself: tests/models/test_ctranslate2_export.py."""

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from helpers import untrained_checkpoint
from typer.testing import CliRunner

import attnseq
from attnseq.cli.app import app
from attnseq.data.tokenizers import BOS_ID, EOS_ID
from attnseq.errors import UserError
from attnseq.models.ctranslate2_export import EXPORT_FILE, export_ctranslate2
from attnseq.training.run import run_training

runner = CliRunner()
SPM = ["data.name=toy_translation", "data.tokenizer=sentencepiece", "data.spm_vocab_size=80"]
TRANSFORMER = ["model.family=transformer", "model.enc_layers=2", "model.dec_layers=2"]
SOURCES = ["the cat sees the dog", "a small house", "the dog", "red birds sing"]


pytestmark = pytest.mark.usefixtures("cache")  # conftest.py's: a cache of its own


def teacher_forced_log_probs(model, src: list[int], tgt: list[int]) -> list[float]:
    """log P(y_t | y_<t, x) of every target token and EOS, by attnseq's forward pass."""
    with torch.no_grad():
        output = model(
            torch.tensor([src]), torch.tensor([len(src)]), torch.tensor([[BOS_ID, *tgt]])
        )
    log_probs = torch.log_softmax(output.logits[0].float(), dim=-1)  # (T, V)
    return [log_probs[t, token].item() for t, token in enumerate([*tgt, EOS_ID])]


def scored_by_both(engine, ours) -> Iterator[tuple[list[int], list[int], list[float], list[float]]]:
    """For each of SOURCES and the first 7 pieces of its reversal as target: the source and
    target ids, the log-probabilities of the target's pieces by the engine and by attnseq's
    translator `ours` (teacher-forced)."""
    tgt_tokens = list(engine.tgt_ids)  # id order
    for text in SOURCES:
        src = ours.tokenizers.src.encode(text)
        tgt = ours.tokenizers.tgt.encode(text[::-1])[:7]
        scored = engine.engine.score_batch(
            [[engine.src_tokens[i] for i in src]], [[tgt_tokens[i] for i in tgt]]
        )[0]
        yield src, tgt, scored.log_probs, teacher_forced_log_probs(ours.model, src, tgt)


@pytest.mark.slow
@pytest.mark.parametrize(
    "variant",
    [
        ["model.norm=pre", "model.positions=sinusoidal"],
        ["model.norm=post", "model.positions=learned", "model.max_positions=512"],
        ["data.spm_joint=false", "model.tie_embeddings=false", "model.norm=post"],
    ],
)
def test_the_engine_scores_targets_as_attnseq_does(ctranslate2, tmp_path: Path, variant) -> None:
    checkpoint = untrained_checkpoint(tmp_path / "model.pt", *TRANSFORMER, *SPM, *variant)
    folder = export_ctranslate2(checkpoint, tmp_path / "ct2")
    from attnseq.decoding.ctranslate2_engine import CTranslate2Translator

    engine = CTranslate2Translator(folder, "cpu")
    ours = attnseq.load(checkpoint, "cpu").translator
    for _, _, scored, expected in scored_by_both(engine, ours):
        assert scored == pytest.approx(expected, abs=1e-4)


@pytest.mark.slow
def test_greedy_outputs_equal_attnseq_and_attention_comes_back(ctranslate2, tmp_path) -> None:
    checkpoint = untrained_checkpoint(tmp_path / "model.pt", *TRANSFORMER, *SPM)
    folder = export_ctranslate2(checkpoint, tmp_path / "ct2")
    from attnseq.decoding.ctranslate2_engine import CTranslate2Translator

    engine = CTranslate2Translator(folder, "cpu")
    ours = attnseq.load(checkpoint, "cpu").translator
    settings = ours.settings(beam=1)
    expected = list(ours.hypotheses(SOURCES, settings, batch_size=2))
    got = list(engine.hypotheses(SOURCES, settings, batch_size=3, attention=True))
    assert [h[0].tokens for h in got] == [h[0].tokens for h in expected]
    for text, hypotheses in zip(SOURCES, got, strict=True):
        weights = hypotheses[0].attention  # (1, 1, T_out, S)
        assert weights.shape[-1] == len(ours.tokenizers.src.encode(text))
        assert torch.allclose(weights.sum(-1), torch.ones(weights.shape[:-1]), atol=1e-4)


@pytest.mark.slow
def test_the_engine_writes_nbest_lists_and_refuses_sampling(ctranslate2, tmp_path) -> None:
    checkpoint = untrained_checkpoint(tmp_path / "model.pt", *TRANSFORMER, *SPM)
    folder = export_ctranslate2(checkpoint, tmp_path / "ct2")
    from attnseq.decoding.ctranslate2_engine import CTranslate2Translator

    engine = CTranslate2Translator(folder, "cpu")
    outputs = list(engine.translate(["a small house", ""], engine.settings(beam=3, nbest=2)))
    assert [len(output) for output in outputs] == [2, 1]
    assert outputs[1] == ["1 |||  ||| 0.0000"]
    sampling = engine.settings(sample=True, num_samples=2)
    with pytest.raises(UserError, match="does not sample"):
        list(engine.translate(SOURCES, sampling))


def test_translate_with_a_folder_that_is_no_export_exits_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["translate", "--engine", "ctranslate2", str(tmp_path)])
    assert result.exit_code == 2
    assert EXPORT_FILE in result.output


@pytest.mark.slow
def test_a_trained_model_decodes_the_same_through_the_cli(ctranslate2, tmp_path: Path) -> None:
    """A toy translation transformer trained for ~30 s: `attnseq translate --engine
    ctranslate2` writes what `attnseq translate` writes, greedy and beam 4 (length penalty 0,
    where both searches rank by log P), and the int8 export stays close."""
    from helpers import tiny_config

    cfg = tiny_config(
        *TRANSFORMER,
        *SPM,
        "data.train_size=2000",
        "model.d_model=64",
        "model.ff_dim=128",
        "model.dropout=0.0",
        "trainer.max_steps=400",
        "trainer.validate_every=400",
        "trainer.num_heatmaps=0",
    )
    run_training(cfg, tmp_path / "run")
    checkpoint = tmp_path / "run" / "checkpoints" / "last.pt"
    inputs = tmp_path / "test.txt"
    inputs.write_text("\n".join(SOURCES * 3) + "\n", encoding="utf-8")
    folder, int8 = tmp_path / "ct2", tmp_path / "ct2-int8"
    assert runner.invoke(app, ["export", str(checkpoint), str(folder)]).exit_code == 0
    quantized = runner.invoke(app, ["export", str(checkpoint), str(int8), "--quantize", "int8"])
    assert quantized.exit_code == 0
    assert (int8 / "model.bin").stat().st_size < (folder / "model.bin").stat().st_size
    for beam in ("1", "4"):
        flags = ["-i", str(inputs), "--beam", beam, "--length-penalty", "0", "--device", "cpu"]
        ours = runner.invoke(app, ["translate", str(checkpoint), *flags])
        theirs = runner.invoke(app, ["translate", "--engine", "ctranslate2", str(folder), *flags])
        assert ours.exit_code == theirs.exit_code == 0
        assert theirs.stdout == ours.stdout


@pytest.mark.slow
def test_a_pruned_checkpoint_exports_what_it_computes(ctranslate2, tmp_path: Path) -> None:
    """`attnseq heads --prune` masks heads; the export folds the mask into W^O, so the engine
    scores targets as the pruned model does and `translate --engine ctranslate2` writes what
    `attnseq translate` writes."""
    checkpoint = untrained_checkpoint(tmp_path / "model.pt", *TRANSFORMER, *SPM)
    pruned = tmp_path / "pruned.pt"
    result = runner.invoke(
        app,
        [
            "heads",
            str(checkpoint),
            "--prune",
            "4",
            "--by",
            "random",
            "--max-batches",
            "1",
            "--device",
            "cpu",
            "--report-dir",
            str(tmp_path / "heads"),
            "--out",
            str(pruned),
        ],
    )
    assert result.exit_code == 0, result.output
    folder = tmp_path / "ct2"
    assert runner.invoke(app, ["export", str(pruned), str(folder)]).exit_code == 0
    from attnseq.decoding.ctranslate2_engine import CTranslate2Translator
    from attnseq.models.head_mask import masked_heads

    engine = CTranslate2Translator(folder, "cpu")
    ours = attnseq.load(pruned, "cpu").translator
    assert len(masked_heads(ours.model)) == 4
    unpruned = attnseq.load(checkpoint, "cpu").translator
    for src, tgt, scored, expected in scored_by_both(engine, ours):
        assert scored == pytest.approx(expected, abs=1e-4)
        # the mask matters: the unpruned model scores the same target differently
        assert teacher_forced_log_probs(unpruned.model, src, tgt) != pytest.approx(
            expected, abs=1e-3
        )
    inputs = tmp_path / "test.txt"
    inputs.write_text("\n".join(SOURCES * 2) + "\n", encoding="utf-8")
    flags = ["-i", str(inputs), "--beam", "1", "--device", "cpu"]
    theirs = runner.invoke(app, ["translate", "--engine", "ctranslate2", str(folder), *flags])
    mine = runner.invoke(app, ["translate", str(pruned), *flags])
    assert mine.exit_code == theirs.exit_code == 0, theirs.output
    assert theirs.stdout == mine.stdout and len(mine.stdout.splitlines()) == 2 * len(SOURCES)


class _Engine:
    """CTranslate2's device count, as a machine with `gpus` GPUs would report it."""

    def __init__(self, gpus: int) -> None:
        self.gpus = gpus

    def get_cuda_device_count(self) -> int:
        return self.gpus


def test_the_engine_takes_torchs_device_names_and_checks_its_own_gpus() -> None:
    from attnseq.decoding.ctranslate2_engine import engine_device

    assert engine_device("auto", _Engine(0)) == torch.device("cpu")
    assert engine_device("auto", _Engine(2)) == torch.device("cuda")
    assert engine_device("cuda:1", _Engine(2)) == torch.device("cuda", 1)
    with pytest.raises(UserError, match="cuda:2 but CTranslate2 sees 2 CUDA device"):
        engine_device("cuda:2", _Engine(2))
    with pytest.raises(UserError, match="CTranslate2 runs on cpu or cuda"):
        engine_device("mps", _Engine(2))
    with pytest.raises(UserError, match="'gpu' is not a device"):
        engine_device("gpu", _Engine(2))
