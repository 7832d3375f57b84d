"""Pointer-generator models (RNN and transformer): copy off is the plain model, the vocabulary
part is the plain model's softmax, incremental decoding equals the teacher-forced pass (coverage
included, also after reordering the beam state), beam search copies source words outside the
vocabulary, and a tiny copy model overfits a batch of out-of-vocabulary targets."""

import itertools

import pytest
import torch
from helpers import tiny_config

from attnseq.config.schema import ModelConfig
from attnseq.decoding import DecodingSettings, beam_search, greedy_decode
from attnseq.models import Vocabularies, build_model
from attnseq.models.loss_terms import coverage_term, sequence_loss
from attnseq.models.pointer_generator import (
    PointerGeneratorRNN,
    PointerGeneratorTransformer,
    coverage_loss,
    teacher_forced_coverage,
)
from attnseq.models.rnn import RNNSeq2Seq
from attnseq.models.transformer import TransformerSeq2Seq

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
    torch.testing.assert_close(output.extras["p_gen"], torch.ones(tgt_in.shape))


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
    assert ("p_gen" in full.extras) == copy
    assert ("coverage_loss" in full.extras) == coverage
    if copy:
        sums = full.logits.exp().sum(-1)
        torch.testing.assert_close(sums, torch.ones_like(sums), atol=1e-5, rtol=0)
    if coverage:  # the model's coverage loss is eq. 12 of its own attention
        attention = full.attention
        if attention.dim() == 5:  # transformer: the copy layer's head average
            attention = attention[:, model.copy_layer].mean(dim=1)
        expected = coverage_loss(attention, teacher_forced_coverage(attention))
        torch.testing.assert_close(full.extras["coverage_loss"], expected, atol=1e-6, rtol=1e-5)


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
    settings = DecodingSettings(beam=3, nbest=2)
    results = beam_search(model, src, lengths, limits, settings, src_ext=src_ext, n_oov=N_OOV)
    greedy = greedy_decode(model, src, lengths, limits, src_ext=src_ext, n_oov=N_OOV)
    for row, (nbest, first) in enumerate(zip(results, greedy, strict=True)):
        allowed = set(src_ext[row, : lengths[row]].tolist())
        for hypothesis in [*nbest, first]:
            assert len(hypothesis.tokens) == 5  # EOS is never a source word: no early end
            assert set(hypothesis.tokens) <= allowed
    assert VOCAB in results[0][0].tokens or VOCAB in greedy[0].tokens


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
            loss_sum = loss_sum + coverage_term(output.extras["coverage_loss"], tgt_out, PAD, 0.1)
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
