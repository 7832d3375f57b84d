"""Pointer-generator end to end: a word the target vocabulary lacks is produced and written as the
source has it (hand-set model through `attnseq translate`, and a trained model through train,
eval and metrics.json); p_gen reaches TensorBoard and the heatmaps; config mistakes exit 2; the
summarization experiments compare models of the same size."""

import itertools
import json
import math
import random
from pathlib import Path

import pytest
import torch
from helpers import (
    SOURCE_ONLY,
    WORD_PAIRS,
    attnseq_in_process,
    copy_coverage_run,
    copy_only_checkpoint,
    tiny_config,
    untrained_checkpoint,
)
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from typer.testing import CliRunner

import attnseq
from attnseq.alignment.saved_attention import SavedAttention
from attnseq.attention.additive import AdditiveAttention, CoverageAttention
from attnseq.attention.luong import ConcatAttention, GeneralAttention
from attnseq.cli.app import app
from attnseq.config import CONFIG_DIR
from attnseq.config.choices import AttentionKind
from attnseq.config.conversion import config_to_dict
from attnseq.config.schema import ModelConfig
from attnseq.decoding import DecodingConfig, beam_search, greedy_decode
from attnseq.errors import UserError
from attnseq.evaluation.checkpoint_eval import evaluate_checkpoint
from attnseq.io.checkpoint import load_checkpoint
from attnseq.models import Vocabularies, build_model
from attnseq.models.objective import coverage_term, sequence_loss
from attnseq.models.pointer_generator import (
    GenerationProbability,
    PointerGeneratorRNN,
    PointerGeneratorTransformer,
    coverage_loss,
    extended_log_probs,
    teacher_forced_coverage,
)
from attnseq.models.rnn import RNNSeq2Seq
from attnseq.models.transformer import TransformerSeq2Seq
from attnseq.training.run import run_training

runner = CliRunner()


@pytest.mark.slow
def test_a_source_only_word_is_produced_and_written_as_the_source_has_it(tmp_path: Path) -> None:
    checkpoint = copy_only_checkpoint(tmp_path / "copy.pt")
    translator = attnseq.load(checkpoint, "cpu").translator
    assert translator.tokenizers.tgt.piece_to_id(SOURCE_ONLY) == 1  # <unk> in the target
    # one source word gets all the attention; P(copy it) = 0.88 > P(EOS) = 0.12
    greedy = translator.settings(beam=1, max_output_extra=2)
    assert list(translator.translate([SOURCE_ONLY], greedy)) == [
        f"{SOURCE_ONLY} " * 2 + SOURCE_ONLY
    ]
    # blocking repeated unigrams leaves EOS as the next best: the output is the word once
    blocked = translator.settings(beam=3, no_repeat_ngram=1)
    assert list(translator.translate([SOURCE_ONLY, ""], blocked)) == [SOURCE_ONLY, ""]
    result = runner.invoke(
        app,
        ["translate", str(checkpoint), "--beam", "2", "--no-repeat-ngram", "1"],
        input=f"{SOURCE_ONLY}\n",
    )
    assert result.exit_code == 0, result.output
    assert result.stdout == f"{SOURCE_ONLY}\n"


def test_plain_model_cannot_produce_the_word(tmp_path: Path) -> None:
    checkpoint = untrained_checkpoint(
        tmp_path / "plain.pt", "data.tokenizer=word", pairs=WORD_PAIRS
    )
    translator = attnseq.load(checkpoint, "cpu").translator
    outputs = list(translator.translate([SOURCE_ONLY], translator.settings(beam=2)))
    assert SOURCE_ONLY not in outputs[0]


@pytest.mark.slow
def test_visualize_alignment_shows_p_gen_and_the_source_text(tmp_path: Path) -> None:
    from attnseq.analysis.alignment_view import AlignmentViewer, draw

    checkpoint = copy_only_checkpoint(tmp_path / "copy.pt")
    viewer = AlignmentViewer(checkpoint)
    attention = viewer.attention(f"alpha {SOURCE_ONLY}", tgt=f"{SOURCE_ONLY} beta")
    assert attention.columns == ["alpha", SOURCE_ONLY]
    assert attention.rows == [SOURCE_ONLY, "beta", "</s>"]
    assert attention.p_gen is not None and attention.p_gen.shape == (3,)
    torch.testing.assert_close(
        torch.from_numpy(attention.p_gen),
        torch.full((3,), float(torch.sigmoid(torch.tensor(-2.0)))),
    )
    figure = draw(attention)
    assert len(figure.axes) == 3  # heatmap, its colour bar, the p_gen strip
    out = tmp_path / "a.png"
    result = runner.invoke(
        app, ["visualize-alignment", str(checkpoint), "--src", SOURCE_ONLY, "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert out.is_file()


# ------------------------------------------------------------------- a trained copy model
def names_dataset(folder: Path, seed: int = 0) -> None:
    """ "please call NAME at NUMBER" -> "call NAME": test names and numbers never occur in
    training, so only copying can produce them."""
    rng = random.Random(seed)

    def word() -> str:
        return "".join(rng.choice("bcdfghklmnprstvz") + rng.choice("aeiou") for _ in range(3))

    names = list({word() for _ in range(400)})
    splits = {"train": names[:300], "valid": names[300:320], "test": names[320:360]}
    for split, chosen in splits.items():
        lines = []
        for name in chosen * (3 if split == "train" else 1):
            polite = rng.choice(["please", "kindly", "now"])
            number = rng.randrange(100, 999) if split == "train" else rng.randrange(1000, 9999)
            lines.append(f"{polite} call {name} at {number}\tcall {name}")
        (folder / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def trained_copy_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, Path]:
    return copy_coverage_run(
        tmp_path_factory,
        "names",
        names_dataset,
        "data.max_tokens=400",
        "optim.coverage_start_step=100",
        "model.dropout=0.0",
        "trainer.max_steps=180",
        "trainer.validate_every=90",
        "trainer.max_epochs=100",
        "trainer.early_stopping_metric=exact_match",
        "trainer.early_stopping_patience=0",
        "trainer.num_heatmaps=1",
    )


@pytest.mark.slow
def test_trained_copy_model_copies_unseen_names(trained_copy_run) -> None:
    run_dir, metrics, data = trained_copy_run
    references = [line.split("\t")[1] for line in (data / "test.tsv").read_text().splitlines()]
    hypotheses = (run_dir / "hyps" / "test.txt").read_text().splitlines()
    assert metrics["test/exact_match"] >= 0.9, hypotheses[:5]
    assert sum(h == r for h, r in zip(hypotheses, references, strict=True)) >= 36
    assert 0.0 <= metrics["test/p_gen_mean"] < 0.9  # the names are copied
    stored = json.loads((run_dir / "metrics.json").read_text())
    for key in ["test/repeated_trigrams", "test/coverage_loss", "test/rouge2", "test/rouge_l"]:
        assert key in stored
    # eval of the checkpoint reproduces the test metrics (extended vocabulary included), and
    # the saved attention names the copied words as the source has them
    out = run_dir / "eval"
    again = evaluate_checkpoint(
        run_dir / "checkpoints" / "best.pt",
        device_name="cpu",
        out_dir=out,
        save_attention=True,
        overrides=[f"data.root={data}"],  # a checkpoint's own data.root needs the user's word
    )
    assert again["test/exact_match"] == pytest.approx(metrics["test/exact_match"])
    assert again["test/p_gen_mean"] == pytest.approx(metrics["test/p_gen_mean"], abs=1e-6)
    with SavedAttention(again.result.folder / "attention.npz") as saved:
        example = saved.example(0)
    name = references[0].split()[1]
    if example.hyp_text == references[0]:
        assert example.hyp_tokens[:2] == ["call", name] and name in example.src_tokens


def test_p_gen_reaches_tensorboard(trained_copy_run) -> None:
    run_dir, _, _ = trained_copy_run
    events = EventAccumulator(str(run_dir / "tb"), size_guidance={"images": 0, "scalars": 0})
    events.Reload()
    assert {"valid/p_gen_mean", "valid/coverage_loss"} <= set(events.Tags()["scalars"])
    values = [event.value for event in events.Scalars("valid/p_gen_mean")]
    # one value per validation (every 90 updates; the run may stop early at exact match 1.0)
    steps = load_checkpoint(run_dir / "checkpoints" / "last.pt")["progress"]["step"]
    assert len(values) == steps // 90 and all(0.0 <= value <= 1.0 for value in values)
    assert "attention/example_0" in events.Tags()["images"]


def test_translate_copies_a_new_name(trained_copy_run) -> None:
    run_dir, _, _ = trained_copy_run
    result = runner.invoke(
        app,
        ["translate", str(run_dir / "checkpoints" / "best.pt"), "--beam", "3"],
        input="please call Xavierine at 12345\n",
    )
    assert result.exit_code == 0, result.output
    assert result.stdout == "call Xavierine\n"


# ------------------------------------------------------------------------ configuration
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.copy=true", "model.attention.score=none"], "model.copy=true needs attention"),
        (["model.coverage=true", "model.attention.score=general"], "additive or concat"),
        (["model.copy=true", "model.attention.window=local_p"], "window=global"),
        (["optim.coverage_lambda=1.0"], "needs model.coverage=true"),
        (["model.family=transformer", "model.copy=true", "model.copy_layer=5"], "copy_layer"),
        (["decoding.coverage_penalty=-1"], "coverage_penalty"),
        (["decoding.no_repeat_ngram=-2"], "no_repeat_ngram"),
    ],
)
def test_invalid_combinations_are_user_errors(overrides: list[str], message: str) -> None:
    with pytest.raises(UserError, match=message):
        tiny_config(*overrides)


def test_config_error_exits_2_with_one_message() -> None:
    result = runner.invoke(app, ["train", "model.copy=true", "model.attention.score=none"])
    assert result.exit_code == 2
    assert "model.copy=true needs attention" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("dataset", ["dialogsum", "aeslc"])
def test_pointer_generator_and_attention_baseline_have_the_same_size_and_budget(
    dataset: str,
) -> None:
    """The two experiments differ only in copy, coverage and the coverage loss schedule."""

    def flat(name: str) -> dict[str, object]:
        values = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "experiment" / f"{name}.yaml"))
        out: dict[str, object] = {}

        def walk(prefix: str, node: object) -> None:
            if isinstance(node, dict):
                for key, value in node.items():
                    walk(f"{prefix}{key}.", value)
            else:
                out[prefix.rstrip(".")] = node

        walk("", values)
        return out

    pointer, plain = flat(f"{dataset}_pointer_generator"), flat(f"{dataset}_rnn_attention")
    differing = {key for key in pointer.keys() | plain.keys() if pointer.get(key) != plain.get(key)}
    assert differing == {
        "name",
        "model.copy",
        "model.coverage",
        "optim.coverage_lambda",
        "optim.coverage_start_step",
    }
    assert pointer["model.copy"] and pointer["model.coverage"]
    assert config_to_dict(tiny_config())["model"]["copy"] is False  # off unless asked for


# ------------------------------------------------------------
# Pointer-generator models (RNN and transformer): copy off is the plain model, the vocabulary
# part is the plain model's softmax, incremental decoding equals the teacher-forced pass (coverage
# included, also after reordering the beam state), beam search copies source words outside the
# vocabulary, and a tiny copy model overfits a batch of out-of-vocabulary targets.

PAD, UNK, BOS, EOS = 0, 1, 2, 3
VOCAB = 12
N_OOV = 2
FAMILIES = {
    "bahdanau": ("model.family=rnn", "model.decoder=bahdanau"),
    "luong": ("model.family=rnn", "model.decoder=luong", "model.attention.score=concat"),
    "lstm": ("model.family=rnn", "model.rnn.cell=lstm", "model.rnn.layers=2"),
    "transformer": ("model.family=transformer", "model.dec_layers=2"),
    "transformer_first_layer": (
        "model.family=transformer",
        "model.dec_layers=2",
        "model.copy_layer=0",
    ),
}


def model_config(family: str, *overrides: str) -> ModelConfig:
    return tiny_config(*FAMILIES[family], "model.dropout=0.0", *overrides).model


def make(family: str, *overrides: str, seed: int = 0):
    torch.manual_seed(seed)
    model = build_model(model_config(family, *overrides), Vocabularies(VOCAB, VOCAB, PAD, BOS, EOS))
    return model.eval()


def toy_batch(seed: int = 0, batch: int = 4, length: int = 6):
    """Sources with padding, their extended ids (two OOV words: ids V, V+1) and decoder input."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([length, length - 2, 3, length - 1])[:batch]
    src = torch.randint(4, VOCAB, (batch, length), generator=generator)
    src[torch.arange(length) >= lengths.unsqueeze(1)] = PAD
    src_ext = src.clone()
    src_ext[0, 1], src[0, 1] = VOCAB, UNK  # an OOV word at position 1 of row 0 ...
    src_ext[0, 4], src[0, 4] = VOCAB, UNK  # ... again at position 4 (the same word)
    src_ext[2, 0], src[2, 0] = VOCAB + 1, UNK
    tgt_in = torch.randint(4, VOCAB + N_OOV, (batch, 5), generator=generator)
    tgt_in[:, 0] = BOS
    return src, lengths, src_ext, tgt_in


def step_by_step(model, src, lengths, src_ext, tgt_in, index=None):
    state = model.start_decoding(src, lengths, src_ext=src_ext, n_oov=N_OOV)
    if index is not None:
        state = model.reorder_state(state, index)
        tgt_in = tgt_in[index]
    logits, weights = [], []
    for t in range(tgt_in.size(1)):
        step_logits, step_weights, state = model.decode_step(tgt_in[:, t], state, True)
        logits.append(step_logits)
        weights.append(step_weights)
    return torch.stack(logits, 1), torch.stack(weights, -2)  # (B, [L, H,] T, S)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_copy_off_is_the_plain_model(family: str) -> None:
    plain = make(family)
    off = make(family, "model.copy=false", "model.coverage=false")
    assert type(off) is type(plain) and type(plain) in (RNNSeq2Seq, TransformerSeq2Seq)
    assert off.state_dict().keys() == plain.state_dict().keys()
    src, lengths, _, tgt_in = toy_batch()
    tgt_in = tgt_in.clamp(max=VOCAB - 1)
    torch.testing.assert_close(
        off(src, lengths, tgt_in).logits, plain(src, lengths, tgt_in).logits, rtol=0, atol=0
    )


@pytest.mark.parametrize("family", list(FAMILIES))
def test_generating_only_gives_the_plain_distribution(family: str) -> None:
    """Same seed: the copy model's base weights are the plain model's (its own come after);
    with p_gen forced to 1 its first V log-probabilities are the plain log_softmax."""
    plain = make(family)
    copy = make(family, "model.copy=true")
    assert isinstance(copy, (PointerGeneratorRNN, PointerGeneratorTransformer))
    for name, tensor in plain.state_dict().items():
        torch.testing.assert_close(copy.state_dict()[name], tensor, rtol=0, atol=0)
    with torch.no_grad():
        copy.generation.linear.weight.zero_()
        copy.generation.linear.bias.fill_(60.0)  # p_gen = 1 - 9e-27
    src, lengths, src_ext, tgt_in = toy_batch()
    tgt_plain = tgt_in.masked_fill(tgt_in >= VOCAB, UNK)
    expected = torch.log_softmax(plain(src, lengths, tgt_plain).logits, dim=-1)
    output = copy(src, lengths, tgt_in, src_ext=src_ext, n_oov=N_OOV)
    assert output.logits.shape == (*tgt_in.shape, VOCAB + N_OOV)
    torch.testing.assert_close(output.logits[..., :VOCAB], expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(output.p_gen, torch.ones(tgt_in.shape))


COPY_COMBOS = [
    (family, copy, coverage)
    for family, (copy, coverage) in itertools.product(
        FAMILIES, [(True, False), (False, True), (True, True)]
    )
]


@pytest.mark.parametrize(("family", "copy", "coverage"), COPY_COMBOS)
def test_incremental_decoding_equals_teacher_forcing(family, copy, coverage) -> None:
    model = make(family, f"model.copy={copy}", f"model.coverage={coverage}")
    src, lengths, src_ext, tgt_in = toy_batch()
    full = model(src, lengths, tgt_in, need_weights=True, src_ext=src_ext, n_oov=N_OOV)
    logits, weights = step_by_step(model, src, lengths, src_ext, tgt_in)
    torch.testing.assert_close(logits, full.logits, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(weights, full.attention, atol=1e-6, rtol=1e-5)
    assert (full.p_gen is not None) == copy
    assert (full.coverage_loss is not None) == coverage
    if copy:
        sums = full.logits.exp().sum(-1)
        torch.testing.assert_close(sums, torch.ones_like(sums), atol=1e-5, rtol=0)
    if coverage:  # the model's coverage loss is eq. 12 of its own attention
        attention = full.attention
        if attention.dim() == 5:  # transformer: the copy layer's head average
            attention = attention[:, model.copy_layer].mean(dim=1)
        expected = coverage_loss(attention, teacher_forced_coverage(attention))
        torch.testing.assert_close(full.coverage_loss, expected, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("family", ["bahdanau", "luong", "transformer"])
def test_decode_step_in_training_mode_drops_out_where_forward_does(family: str) -> None:
    """Dropout 1 zeroes every dropout site whatever its mask: the step-by-step pass in training
    mode equals forward only if both drop out at the same sites (check_loss_curve's reference)."""
    model = make(family, "model.copy=true", "model.coverage=true").train()
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 1.0  # the config stops at p < 1
    src, lengths, src_ext, tgt_in = toy_batch()
    full = model(src, lengths, tgt_in, src_ext=src_ext, n_oov=N_OOV)
    logits, _ = step_by_step(model, src, lengths, src_ext, tgt_in)
    torch.testing.assert_close(logits, full.logits, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("family", ["bahdanau", "lstm", "transformer"])
def test_reordered_state_carries_coverage_and_extended_source(family: str) -> None:
    model = make(family, "model.copy=true", "model.coverage=true")
    src, lengths, src_ext, tgt_in = toy_batch()
    index = torch.tensor([2, 0, 0, 3])
    logits, _ = step_by_step(model, src, lengths, src_ext, tgt_in, index)
    expected = model(src[index], lengths[index], tgt_in[index], src_ext=src_ext[index], n_oov=N_OOV)
    torch.testing.assert_close(logits, expected.logits, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("family", ["bahdanau", "luong", "transformer"])
def test_beam_search_copies_source_words(family: str) -> None:
    """p_gen ~ 0: every output token is a source word, OOV ones as extended ids."""
    model = make(family, "model.copy=true")
    with torch.no_grad():
        model.generation.linear.weight.zero_()
        model.generation.linear.bias.fill_(-40.0)
    src, lengths, src_ext, _ = toy_batch()
    limits = torch.full((src.size(0),), 5)
    settings = DecodingConfig(beam=3, nbest=2)
    results = beam_search(model, src, lengths, limits, settings, src_ext=src_ext, n_oov=N_OOV)
    greedy = greedy_decode(model, src, lengths, limits, src_ext=src_ext, n_oov=N_OOV)
    for row, (nbest, first) in enumerate(zip(results, greedy, strict=True)):
        allowed = set(src_ext[row, : lengths[row]].tolist())
        for hypothesis in [*nbest, first]:
            assert len(hypothesis.tokens) == 5  # EOS is never a source word: no early end
            assert set(hypothesis.tokens) <= allowed
    assert VOCAB in results[0][0].tokens or VOCAB in greedy[0].tokens


@pytest.mark.slow
@pytest.mark.parametrize(("family", "coverage"), [("bahdanau", True), ("transformer", False)])
def test_tiny_copy_model_overfits_out_of_vocabulary_targets(family: str, coverage: bool) -> None:
    """Targets are the source words at odd positions, half of them outside the vocabulary:
    only copying can produce those."""
    torch.manual_seed(0)
    model = make(family, "model.copy=true", f"model.coverage={coverage}").train()
    src, lengths, src_ext, _ = toy_batch(batch=4)
    targets = []
    for row in range(src.size(0)):
        words = src_ext[row, : lengths[row]].tolist()
        targets.append(words[1::2] + [EOS])
    width = max(map(len, targets))
    tgt_out = torch.tensor([t + [PAD] * (width - len(t)) for t in targets])
    tgt_in = torch.cat([torch.full((src.size(0), 1), BOS), tgt_out[:, :-1]], dim=1)
    tgt_in = tgt_in.masked_fill(tgt_in == EOS, PAD).masked_fill(tgt_in >= VOCAB, UNK)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    for _ in range(150):
        output = model(src, lengths, tgt_in, src_ext=src_ext, n_oov=N_OOV)
        loss_sum, n_tokens = sequence_loss(output.logits, tgt_out, PAD)
        if coverage:
            loss_sum = loss_sum + coverage_term(output.coverage_loss, tgt_out, PAD, 0.1)
        optimizer.zero_grad()
        (loss_sum / n_tokens).backward()
        optimizer.step()
    model.eval()
    output = model(src, lengths, tgt_in, src_ext=src_ext, n_oov=N_OOV)
    assert sequence_loss(output.logits, tgt_out, PAD)[0].item() / n_tokens < 0.05
    limits = torch.full((src.size(0),), width)
    decoded = greedy_decode(model, src, lengths, limits, src_ext=src_ext, n_oov=N_OOV)
    assert [h.tokens for h in decoded] == [t[:-1] for t in targets]
    assert any(token >= VOCAB for t in targets for token in t)


# ------------------------------------------------------------
# The pointer-generator's final distribution and the coverage loss (See et al. 2017, eqs. 9-12),
# checked against hand numbers and direct computation; the coverage-aware additive score.


def test_final_distribution_on_hand_numbers() -> None:
    # V = 5, source "7 2 5 2" in the extended vocabulary (5 = the first OOV), n_oov = 2
    logits = torch.tensor([[0.0, 1.0, 2.0, 0.5, -1.0]])  # (B=1, V)
    attention = torch.tensor([[0.1, 0.2, 0.3, 0.4]])  # (1, S)
    src_ext = torch.tensor([[6, 2, 5, 2]])
    z = torch.tensor([0.4])  # p_gen = sigmoid(0.4)
    p_gen = 1 / (1 + math.exp(-0.4))
    vocab = torch.softmax(logits, dim=-1)[0].tolist()
    expected = [p_gen * p for p in vocab] + [0.0, 0.0]
    expected[2] += (1 - p_gen) * (0.2 + 0.4)  # id 2 is at positions 1 and 3
    expected[5] += (1 - p_gen) * 0.3
    expected[6] += (1 - p_gen) * 0.1
    probs = extended_log_probs(logits, attention, src_ext, 2, z).exp()[0]
    torch.testing.assert_close(probs, torch.tensor(expected), atol=1e-6, rtol=1e-5)
    assert probs.sum().item() == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("z", [-60.0, -3.0, 0.0, 3.0, 60.0])
def test_final_distribution_sums_to_one_and_stays_finite(z: float) -> None:
    generator = torch.Generator().manual_seed(0)
    batch, steps, src_len, vocab, n_oov = 3, 4, 6, 11, 3
    logits = torch.randn(batch, steps, vocab, generator=generator) * 5
    attention = torch.softmax(torch.randn(batch, steps, src_len, generator=generator), dim=-1)
    attention[1, :, 4:] = 0.0  # padding of row 1
    attention[1] /= attention[1].sum(-1, keepdim=True)
    src_ext = torch.randint(4, vocab + n_oov, (batch, src_len), generator=generator)
    log_probs = extended_log_probs(logits, attention, src_ext, n_oov, torch.full((batch, steps), z))
    assert log_probs.shape == (batch, steps, vocab + n_oov)
    sums = log_probs.exp().sum(-1)
    torch.testing.assert_close(sums, torch.ones_like(sums), atol=1e-5, rtol=0)
    # every source word keeps a finite log-probability, even when p_gen or 1 - p_gen underflow
    present = log_probs.gather(-1, src_ext.unsqueeze(1).expand(-1, steps, -1))
    assert torch.isfinite(present).all()
    # an extended id is produced by copying alone: log P = log(1 - p_gen) + log(its attention)
    b, t = 0, 1
    for k in range(n_oov):
        mass = float(attention[b, t][src_ext[b] == vocab + k].sum())
        if mass > 0:
            expected = -math.log1p(math.exp(z)) + math.log(mass)  # logsigmoid(-z) + log mass
            assert log_probs[b, t, vocab + k].item() == pytest.approx(expected, abs=1e-4)


def test_gradient_is_finite_where_probabilities_vanish() -> None:
    logits = torch.tensor([[[0.0, 50.0, -50.0, 0.0]]], requires_grad=True)  # (1, 1, V=4)
    attention = torch.tensor([[[1.0, 0.0]]])
    src_ext = torch.tensor([[4, 1]])  # position 0: OOV id 4; position 1 (weight 0): id 1
    z = torch.tensor([[-80.0]], requires_grad=True)  # p_gen ~ 1e-35
    log_probs = extended_log_probs(logits, attention, src_ext, 2, z)
    # id 5 belongs to no source word: probability 0, clamped to the smallest normal float
    assert log_probs[0, 0, 5].item() == pytest.approx(math.log(torch.finfo(torch.float32).tiny))
    (-log_probs[0, 0, 4] - log_probs[0, 0, 2] - log_probs[0, 0, 5]).backward()
    assert torch.isfinite(logits.grad).all() and torch.isfinite(z.grad).all()


def test_generation_probability_is_one_linear_map_of_c_s_x() -> None:
    torch.manual_seed(0)
    module = GenerationProbability(3, 2, 4)
    c, s, x = torch.randn(5, 3), torch.randn(5, 2), torch.randn(5, 4)
    weight, bias = module.linear.weight[0], module.linear.bias[0]
    w_c, w_s, w_x = weight[:3], weight[3:5], weight[5:]
    expected = c @ w_c + s @ w_s + x @ w_x + bias  # w_c^T c + w_s^T s + w_x^T x + b (eq. 8)
    torch.testing.assert_close(module(c, s, x), expected)


def test_coverage_loss_worked_example() -> None:
    # three steps over three source words
    attention = torch.tensor([[[0.5, 0.3, 0.2], [0.6, 0.3, 0.1], [0.1, 0.2, 0.7]]])  # (1, 3, 3)
    coverage = teacher_forced_coverage(attention)
    # c^0 = 0, c^1 = a^0, c^2 = a^0 + a^1
    expected_coverage = torch.tensor([[[0.0, 0.0, 0.0], [0.5, 0.3, 0.2], [1.1, 0.6, 0.3]]])
    torch.testing.assert_close(coverage, expected_coverage)
    # step 0: 0; step 1: min(.6,.5)+min(.3,.3)+min(.1,.2) = .9; step 2: .1+.2+.3 = .6
    losses = coverage_loss(attention, coverage)
    torch.testing.assert_close(losses, torch.tensor([[0.0, 0.9, 0.6]]))
    # lambda * sum over real target positions: position 2 is padding here
    targets = torch.tensor([[7, 8, 0]])
    assert coverage_term(losses, targets, 0, 2.0).item() == pytest.approx(2.0 * 0.9)


@pytest.mark.parametrize("score", [AdditiveAttention, ConcatAttention])
def test_coverage_attention_adds_w_c_c_inside_the_tanh(score) -> None:
    torch.manual_seed(0)
    content = score(5, 6, 7)
    attention = CoverageAttention(content)
    query, keys = torch.randn(2, 3, 5), torch.randn(2, 4, 6)
    mask = torch.tensor([[True] * 4, [True, True, True, False]])
    # no coverage: exactly the content score's attention
    plain_context, plain_weights = content(query, keys, keys, mask)
    context, weights = attention(query, keys, keys, mask)
    torch.testing.assert_close(weights, plain_weights)
    torch.testing.assert_close(context, plain_context)
    # with coverage: e = v^T tanh(W_q s + W_k h + w_c c), computed directly
    coverage = torch.rand(2, 3, 4)
    w_c = attention.coverage_proj.weight[:, 0]  # (A,)
    hidden = (
        content.query_proj(query).unsqueeze(2)
        + content.key_proj(keys).unsqueeze(1)
        + coverage.unsqueeze(-1) * w_c
    )
    energies = content.energy(torch.tanh(hidden)).squeeze(-1)
    energies = energies.masked_fill(~mask.unsqueeze(1), float("-inf"))
    _, weights = attention(query, keys, keys, mask, coverage=coverage)
    torch.testing.assert_close(weights, torch.softmax(energies, dim=-1))
    assert torch.all(weights[1, :, 3] == 0)


def test_coverage_attention_needs_a_tanh_score() -> None:
    with pytest.raises(TypeError, match="additive or concat"):
        CoverageAttention(GeneralAttention(4, 4))  # type: ignore[arg-type]


# ------------------------------------------------------------
# The pointer-generator transformer (model.copy=true) with every self-attention kind: train two
# steps through the composition root, decode the test split with `attnseq eval`, and draw a forced
# alignment with `attnseq visualize-alignment --tgt`. Kinds that return no attention weights
# (linear, performer) must not break the figures; kinds that cannot be causal must be refused for
# decoder self-attention with exit status 2.

CAUSAL = ["full", "local", "strided", "linear", "performer", "bigbird"]
ENCODER_ONLY = ["longformer", "linformer"]


def test_matrix_covers_every_kind() -> None:
    assert sorted(CAUSAL + ENCODER_ONLY) == sorted(kind.value for kind in AttentionKind)


def matrix_overrides(kind: str, decoder_self: bool) -> list[str]:
    return [
        "model.family=transformer",
        "model.copy=true",
        f"model.attention.kind={kind}",
        f"model.attention.decoder_self={str(decoder_self).lower()}",
        "model.dropout=0.0",
        "data.train_size=60",
        "data.valid_size=6",
        "data.test_size=6",
        "trainer.max_steps=2",
        "trainer.validate_every=2",
        "trainer.num_heatmaps=1",
        "trainer.threads=1",
        "optim.warmup_steps=1",
    ]


CASES = [
    pytest.param(
        kind, False, marks=() if kind in ("full", "local", "longformer") else pytest.mark.slow
    )
    for kind in CAUSAL + ENCODER_ONLY
] + [
    pytest.param(kind, True, marks=() if kind in ("full", "linear") else pytest.mark.slow)
    for kind in CAUSAL
]


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "decoder_self"), CASES)
def test_copy_transformer_trains_decodes_and_draws(
    kind: str, decoder_self: bool, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    metrics = run_training(tiny_config(*matrix_overrides(kind, decoder_self)), run_dir)
    assert "test/loss" in metrics
    checkpoint = run_dir / "checkpoints" / "best.pt"
    assert checkpoint.is_file()

    result = runner.invoke(
        app, ["eval", str(checkpoint), "--out", str(tmp_path / "eval"), "--beam", "1"]
    )
    assert result.exit_code == 0, result.output
    assert list((tmp_path / "eval").rglob("metrics.json"))

    out = tmp_path / "alignment.png"
    result = runner.invoke(
        app,
        [
            "visualize-alignment",
            str(checkpoint),
            "--src",
            "a b c d",
            "--tgt",
            "d c b a",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert out.is_file() and out.stat().st_size > 0


@pytest.mark.slow
@pytest.mark.parametrize("kind", ENCODER_ONLY)
def test_non_causal_kind_in_decoder_self_attention_exits_2(kind: str, tmp_path: Path) -> None:
    result = attnseq_in_process(
        "train",
        *matrix_overrides(kind, True),
        "trainer.device=cpu",
        f"hydra.run.dir={tmp_path / 'run'}",
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error:")
    assert f"model.attention.kind={kind} cannot be causal" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()
