"""Batched beam search: equivalences (beam 1 = greedy, batch 1 = batch 32), exact search on a
hand-set model, length penalty, n-best, constraints, Hugging Face's forced EOS and stopping rule,
attention along the back-pointers, and beam 5 against greedy on a trained reverse model."""

import itertools
import math

import pytest
import torch
from helpers import (
    BOS,
    EOS,
    FAMILIES,
    PAD,
    TRAINED_REVERSE,
    UNK,
    VOCAB,
    TableModel,
    built_once,
    lp_by_hand,
    make_model,
    random_batch,
    table_model,
    tiny_config,
    train_quietly,
)
from torch import Tensor

from attnseq.data.sources import load_splits
from attnseq.decoding import (
    DecodingConfig,
    Hypothesis,
    beam_search,
    decode,
    greedy_decode,
    max_output_lengths,
)
from attnseq.decoding.settings import check
from attnseq.errors import UserError
from attnseq.io.checkpoint import load_checkpoint
from attnseq.models import Vocabularies, build_model
from attnseq.models.seq2seq import DecoderState, Seq2Seq


def one_source(batch: int = 1) -> tuple[Tensor, Tensor]:
    return torch.full((batch, 3), 4), torch.full((batch,), 3)


def teacher_forced_attention(model: Seq2Seq, src: Tensor, length: int, hyp: Hypothesis) -> Tensor:
    """Cross-attention of a forward pass over BOS + the hypothesis's scored positions."""
    steps = hyp.attention.shape[-2]  # scored positions: tokens (+ EOS)
    tgt_in = torch.tensor([[BOS, *hyp.tokens][:steps]])  # (1, T)
    out = model(src[:length].unsqueeze(0), torch.tensor([length]), tgt_in, need_weights=True)
    return out.attention[0, ..., :length]  # (T, S) or (L, H, T, S)


# ----------------------------------------------------------------------------- equivalences
@pytest.mark.parametrize("family", FAMILIES)
def test_beam_one_equals_greedy(family: str) -> None:
    model = make_model(family)
    src, lengths = random_batch(12)
    limits = max_output_lengths(lengths, 1.5, 2)
    greedy = greedy_decode(model, src, lengths, limits, need_weights=True)
    beam = beam_search(
        model, src, lengths, limits, DecodingConfig(beam=1, length_penalty=0.0), need_weights=True
    )
    for g, (b,) in zip(greedy, beam, strict=True):
        assert b.tokens == g.tokens
        assert b.score == pytest.approx(g.score, abs=1e-5)
        assert g.attention is not None and b.attention is not None
        torch.testing.assert_close(b.attention, g.attention, atol=1e-6, rtol=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_batch_of_one_equals_batch_of_32(family: str) -> None:
    model = make_model(family, seed=3)
    src, lengths = random_batch(32, seed=4)
    limits = max_output_lengths(lengths, 1.0, 3)
    settings = DecodingConfig(beam=4, nbest=3)
    batched = beam_search(model, src, lengths, limits, settings)
    for row in range(32):
        n = int(lengths[row])
        alone = beam_search(
            model,
            src[row : row + 1, :n],
            lengths[row : row + 1],
            limits[row : row + 1],
            settings,
        )[0]
        assert [h.tokens for h in alone] == [h.tokens for h in batched[row]]
        for a, b in zip(alone, batched[row], strict=True):
            assert a.score == pytest.approx(b.score, abs=1e-4)


def test_decode_with_beam_one_is_greedy_not_beam_search() -> None:
    """EOS first is the argmax (greedy: empty output), but with alpha = 2 a single beam
    searches on to a longer output with a better normalised score: `decode` must give
    greedy's, normalised by hand."""
    model = table_model(
        [{EOS: -0.7, 4: -0.8}, {4: -0.3, EOS: -3}, {4: -0.3, EOS: -3}, {EOS: -0.3, 4: -3}]
    )
    src, lengths = one_source()
    settings = DecodingConfig(beam=1, length_penalty=2.0, max_output_ratio=0, max_output_extra=6)
    ((decoded,),) = decode(model, src, lengths, settings)
    eos_first = torch.log_softmax(model.table[0, BOS], dim=-1)[EOS].item()
    assert decoded.tokens == []
    assert decoded.score == pytest.approx(eos_first, abs=1e-6)
    assert decoded.normalized_score == pytest.approx(eos_first / lp_by_hand(1, 2.0), abs=1e-6)
    ((searched,),) = beam_search(model, src, lengths, torch.tensor([6]), settings)
    assert searched.tokens == [4, 4, 4]


def test_decode_returns_nbest_lists() -> None:
    model = make_model("transformer")
    src, lengths = random_batch(5)
    nbest = decode(model, src, lengths, DecodingConfig(beam=3, nbest=2))
    assert [len(n) for n in nbest] == [2] * 5
    with pytest.raises(ValueError, match="nbest"):  # checked where settings are made
        check(DecodingConfig(beam=2, nbest=3))


# ------------------------------------------------------------------------------ search quality
def test_large_beam_is_exact_search() -> None:
    """With K >= the number of possible outputs, beam search is exhaustive: its n-best list is
    the brute-force ranking (raw and length-normalised)."""
    generator = torch.Generator().manual_seed(7)
    table = torch.randn(4, 6, 6, generator=generator) * 2  # (T, V, V) prefix-dependent
    model = TableModel(table)
    src, lengths = one_source()
    max_len = 3
    log_probs = torch.log_softmax(table, dim=-1)
    log_probs[:, :, [PAD, BOS]] = -math.inf  # decoding never emits them
    outputs = []  # (tokens, raw score, scored positions)
    for n in range(max_len + 1):
        for tokens in itertools.product([UNK, 4, 5], repeat=n):
            prev = [BOS, *tokens]
            raw = sum(float(log_probs[t, prev[t], tokens[t]]) for t in range(n))
            if n < max_len:  # ends with EOS
                outputs.append((list(tokens), raw + float(log_probs[n, prev[n], EOS]), n + 1))
            else:  # cut at the limit
                outputs.append((list(tokens), raw, n))
    for alpha in (0.0, 1.0):
        ranked = sorted(outputs, key=lambda o: -o[1] / lp_by_hand(o[2], alpha))
        (found,) = beam_search(
            model,
            src,
            lengths,
            torch.tensor([max_len]),
            DecodingConfig(beam=40, nbest=5, length_penalty=alpha),
        )
        assert [h.tokens for h in found] == [o[0] for o in ranked[:5]]
        assert [h.score for h in found] == pytest.approx([o[1] for o in ranked[:5]], abs=1e-5)


def test_length_penalty_favours_longer_outputs() -> None:
    # EOS now (log p = -0.7) or three more tokens that end with EOS (-0.3 each): raw score
    # prefers the short output, lp = ((5 + |Y|) / 6)^alpha the long one as alpha grows
    model = table_model(
        [{EOS: -0.7, 4: -0.8}, {4: -0.3, EOS: -3}, {4: -0.3, EOS: -3}, {EOS: -0.3, 4: -3}]
    )
    src, lengths = one_source()
    found_lengths = []
    for alpha in (0.0, 0.5, 1.0, 2.0):
        settings = DecodingConfig(beam=3, length_penalty=alpha)
        results = beam_search(model, src, lengths, torch.tensor([6]), settings)
        found_lengths.append(len(results[0][0].tokens))
    assert found_lengths == sorted(found_lengths)  # never shorter with a larger alpha
    assert found_lengths[0] == 0 and found_lengths[-1] == 3


@pytest.mark.parametrize("family", FAMILIES)
def test_nbest_sorted_and_distinct(family: str) -> None:
    model = make_model(family, seed=5)
    src, lengths = random_batch(6, seed=6)
    limits = max_output_lengths(lengths, 1.0, 2)
    results = beam_search(model, src, lengths, limits, DecodingConfig(beam=6, nbest=4))
    for nbest in results:
        assert len(nbest) == 4
        assert len({tuple(h.tokens) for h in nbest}) == 4
        scores = [h.normalized_score for h in nbest]
        assert scores == sorted(scores, reverse=True)
    for nbest, limit in zip(results, limits.tolist(), strict=True):
        for h in nbest:  # normalised = raw / lp(scored positions: tokens + EOS unless cut)
            scored = len(h.tokens) + 1 if len(h.tokens) < limit else limit
            assert h.normalized_score == pytest.approx(h.score / lp_by_hand(scored, 1.0), rel=1e-5)


def test_no_repeat_ngram_blocks_repeats() -> None:
    # the stub wants "4 4 4 4 ..." then EOS; a repeated bigram is forbidden with n = 2
    model = table_model([{4: -0.1, 5: -2.5, UNK: -3.0, EOS: -4.0}] * 8)
    src, lengths = one_source()
    limit = torch.tensor([8])
    (plain,) = beam_search(model, src, lengths, limit, DecodingConfig(beam=3))
    assert plain[0].tokens == [4] * 8
    for n in (1, 2, 3):
        settings = DecodingConfig(beam=3, no_repeat_ngram=n)
        (blocked,) = beam_search(model, src, lengths, limit, settings)
        tokens = blocked[0].tokens
        grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
        assert len(grams) == len(set(grams)), (n, tokens)
        assert len(tokens) > 0


@pytest.mark.parametrize("family", FAMILIES)
def test_no_repeat_ngram_on_real_models(family: str) -> None:
    model = make_model(family, seed=2)
    src, lengths = random_batch(8, seed=2)
    settings = DecodingConfig(beam=3, nbest=3, no_repeat_ngram=2, max_output_extra=6)
    for nbest in decode(model, src, lengths, settings):
        for h in nbest:
            bigrams = list(itertools.pairwise(h.tokens))
            assert len(bigrams) == len(set(bigrams))


@pytest.mark.parametrize("beam", [1, 3])
def test_min_length_prevents_early_eos(beam: int) -> None:
    model = table_model([{EOS: -0.01, 4: -5.0, 5: -6.0}] * 8)  # EOS at once, by far
    src, lengths = one_source()
    settings = DecodingConfig(beam=beam, max_output_ratio=0.0, max_output_extra=8)
    assert decode(model, src, lengths, settings)[0][0].tokens == []
    settings.min_length = 4
    best = decode(model, src, lengths, settings)[0][0]
    assert best.tokens == [4, 4, 4, 4]  # EOS at the first position it is allowed


@pytest.mark.parametrize(
    "search",
    [{"beam": 1}, {"beam": 3}, {"sample": True, "top_k": 1}],
    ids=["greedy", "beam", "sampling"],
)
def test_eos_at_limit_ends_every_search_with_eos_at_probability_one(search: dict) -> None:
    model = table_model([{4: -0.1, 5: -2.5, EOS: -20.0}] * 5)  # never EOS: each runs to 3
    src, lengths = one_source()
    limits = {"max_output_ratio": 0.0, "max_output_extra": 3}
    (plain,) = decode(model, src, lengths, DecodingConfig(**search, **limits))
    forced_settings = DecodingConfig(**search, **limits, eos_at_limit=True)
    (forced,) = decode(model, src, lengths, forced_settings)
    assert forced[0].tokens == plain[0].tokens == [4, 4, 4]
    assert forced[0].score == pytest.approx(plain[0].score, abs=1e-6)  # EOS at log p = 0
    assert plain[0].normalized_score == pytest.approx(plain[0].score / lp_by_hand(3, 1.0))
    assert forced[0].normalized_score == pytest.approx(forced[0].score / lp_by_hand(4, 1.0))


@pytest.mark.parametrize(
    "search",
    [{"beam": 1}, {"beam": 3}, {"sample": True, "top_k": 1}],
    ids=["greedy", "beam", "sampling"],
)
def test_forced_first_token_starts_every_search_at_probability_one(search: dict) -> None:
    # the model's first choice is 4; forced, 5 comes first, scored log p = 0
    model = table_model([{4: -0.1, 5: -2.5, EOS: -20.0}] + [{4: -0.5, EOS: -1.0}] * 5)
    src, lengths = one_source()
    limits = {"max_output_ratio": 0.0, "max_output_extra": 3}
    (plain,) = decode(model, src, lengths, DecodingConfig(**search, **limits))
    (forced,) = decode(
        model, src, lengths, DecodingConfig(**search, **limits, forced_first_token=5)
    )
    assert plain[0].tokens[0] == 4 and forced[0].tokens[0] == 5
    assert forced[0].tokens[1:] == plain[0].tokens[1:]
    first = torch.tensor([-30.0, -30.0, -30.0, -20.0, -0.1, -2.5]).log_softmax(-1)[4]
    assert forced[0].score == pytest.approx(plain[0].score - float(first), abs=1e-5)
    with pytest.raises(UserError, match="forced first token 99 is none of the model's"):
        decode(model, src, lengths, DecodingConfig(**search, forced_first_token=99))


def test_stop_at_current_length_stops_where_generate_does() -> None:
    # lp = |Y| (offset 0). After step 1, "" (-0.92 / 1) and "4" (-1.74 / 2) have finished; the
    # live "4 4" scores -2.25 / 2 at its current length, below both, so generate's rule stops,
    # while "4 4 EOS" would reach -2.27 / 3, better than either: exact search finds it
    p = math.log
    model = table_model(
        [{EOS: p(0.4), 4: p(0.35), 5: p(0.25)}, {EOS: p(0.5), 4: p(0.3), 5: p(0.2)}]
        + [{EOS: p(0.98), 4: p(0.01), 5: p(0.01)}] * 6
    )
    src, lengths = one_source()
    settings = DecodingConfig(
        beam=2, nbest=2, length_penalty_offset=0.0, max_output_ratio=0.0, max_output_extra=6
    )
    (exact,) = decode(model, src, lengths, settings)
    assert [h.tokens for h in exact] == [[4, 4], [5, 4]]
    settings.stop_at_current_length = True
    (generate_like,) = decode(model, src, lengths, settings)
    assert [h.tokens for h in generate_like] == [[4], []]
    assert generate_like[0].normalized_score == pytest.approx(generate_like[0].score / 2)


# --------------------------------------------------------------------------------- attention
@pytest.mark.parametrize("family", FAMILIES)
def test_beam_attention_equals_teacher_forced_attention(family: str) -> None:
    model = make_model(family, seed=8)
    src, lengths = random_batch(6, seed=9)
    limits = max_output_lengths(lengths, 1.0, 2)
    settings = DecodingConfig(beam=4, nbest=3)
    results = beam_search(model, src, lengths, limits, settings, need_weights=True)
    for row, nbest in enumerate(results):
        n = int(lengths[row])
        for h in nbest:
            assert h.attention is not None
            expected = teacher_forced_attention(model, src[row], n, h)
            assert h.attention.shape == expected.shape
            assert h.attention.shape[-1] == n  # real source positions only
            torch.testing.assert_close(h.attention, expected, atol=1e-5, rtol=1e-4)


# ------------------------------------------------------------------------ trained reverse model
@pytest.fixture(scope="module")
def reverse_model(tmp_path_factory: pytest.TempPathFactory):
    """A tiny GRU + Bahdanau model trained ~7 s on data=reverse (about half exact match)."""
    from attnseq.data.tokenizers import TokenizerPair
    from attnseq.models.loading import model_for

    cfg = tiny_config(*TRAINED_REVERSE, "trainer.max_steps=150", "trainer.validate_every=1000")

    run_dir = built_once(
        tmp_path_factory, "reverse-model", lambda folder: train_quietly(cfg, folder)
    )
    payload = load_checkpoint(run_dir / "checkpoints" / "best.pt")
    tokenizers = TokenizerPair.from_state(payload["tokenizers"])
    model = model_for(cfg, tokenizers)
    model.load_state_dict(payload["model"])
    return model.eval(), tokenizers, load_splits(cfg.data, cfg.seed)["test"]


@pytest.mark.slow
def test_beam_beats_greedy_on_trained_reverse_model(reverse_model) -> None:
    model, tokenizers, pairs = reverse_model
    sources = [tokenizers.src.encode(src) for src, _ in pairs]
    width = max(len(ids) for ids in sources)
    src = torch.tensor([ids + [PAD] * (width - len(ids)) for ids in sources])
    lengths = torch.tensor([len(ids) for ids in sources])

    def exact_match(settings: DecodingConfig) -> tuple[float, list[float]]:
        best = [n[0] for n in decode(model, src, lengths, settings)]
        texts = [tokenizers.tgt.decode(h.tokens) for h in best]
        hits = sum(text == tgt for text, (_, tgt) in zip(texts, pairs, strict=True))
        return hits / len(pairs), [h.score for h in best]

    greedy_em, greedy_scores = exact_match(DecodingConfig(beam=1))
    beam_em, _ = exact_match(DecodingConfig(beam=5))
    _, raw_beam_scores = exact_match(DecodingConfig(beam=5, length_penalty=0.0))
    assert 0.1 < greedy_em < 1.0  # trained, but not so well that search cannot matter
    assert beam_em >= greedy_em
    # raw model score: beam 5 finds at least greedy's (not a theorem; module docstring)
    better = [b >= g - 1e-4 for b, g in zip(raw_beam_scores, greedy_scores, strict=True)]
    assert all(better)
    assert sum(raw_beam_scores) > sum(greedy_scores)


# ------------------------------------------------------------------------ coverage penalty
def test_gnmt_coverage_penalty_on_hand_numbers() -> None:
    from attnseq.decoding.beam_search import gnmt_coverage_penalty

    coverage = torch.tensor([[0.5, 1.7, 0.25, 0.0]])  # the last position is padding
    mask = torch.tensor([[True, True, True, False]])
    # beta * (log 0.5 + log min(1.7, 1) + log 0.25)
    expected = 0.4 * (math.log(0.5) + 0.0 + math.log(0.25))
    assert gnmt_coverage_penalty(coverage, mask, 0.4).item() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("family", ["bahdanau", "transformer"])
def test_coverage_penalty_ranks_by_the_hypothesis_own_attention(family: str) -> None:
    """normalized_score = raw / lp + beta sum_i log min(sum_j p_ij, 1) with the attention that
    produced the hypothesis, gathered along its beam: the state bookkeeping is right."""
    from attnseq.decoding.beam_search import source_attention

    model = make_model(family)
    src, lengths = random_batch(4)
    limits = max_output_lengths(lengths, 1.0, 3)
    beta, alpha = 0.7, 0.6
    settings = DecodingConfig(beam=3, nbest=3, length_penalty=alpha, coverage_penalty=beta)
    results = beam_search(model, src, lengths, limits, settings, need_weights=True)
    for row, nbest in enumerate(results):
        norms = [h.normalized_score for h in nbest]
        assert norms == sorted(norms, reverse=True)
        for hypothesis in nbest:
            weights = hypothesis.attention  # (T_out, S) or (L, H, T_out, S), real source only
            if weights.dim() == 4:
                weights = weights.movedim(-2, 0)  # (T_out, L, H, S)
            coverage = source_attention(weights).sum(dim=0)  # (S_real,)
            penalty = beta * torch.log(coverage.clamp(max=1.0)).sum().item()
            lp = ((5.0 + weights.size(0)) / 6.0) ** alpha
            assert hypothesis.normalized_score == pytest.approx(
                hypothesis.score / lp + penalty, abs=1e-4
            ), row


COPY_FAMILIES = {
    **FAMILIES,
    "bahdanau_copy": (*FAMILIES["bahdanau"], "model.copy=true"),
    "transformer_copy": (*FAMILIES["transformer"], "model.copy=true"),
}


@pytest.mark.parametrize("family", COPY_FAMILIES)
def test_beam_attention_follows_each_hypothesis_through_reordering(family: str) -> None:
    """With beam 5, beams fork and die at every step (rows are re-selected by
    `reorder_state`); every one of the 5 returned hypotheses of each sentence must still carry
    the attention of its own tokens: the attention of teacher forcing that hypothesis (the same
    model and source), for copy models too, whose outputs may be copied source words."""
    torch.manual_seed(3)
    cfg = tiny_config(*COPY_FAMILIES[family], "model.dropout=0.0")
    model = build_model(cfg.model, Vocabularies(VOCAB, VOCAB, PAD, BOS, EOS)).eval()
    src, lengths = random_batch(4, seed=5)
    copy_inputs = {}
    if cfg.model.copy:  # two source words outside the vocabulary: extended ids V and V + 1
        src_ext = src.clone()
        src_ext[:, 1], src_ext[:, 2] = VOCAB, VOCAB + 1
        src_ext[torch.arange(src.size(1)) >= lengths.unsqueeze(1)] = PAD
        copy_inputs = {"src_ext": src_ext, "n_oov": 2}
    reorders: list[Tensor] = []
    reorder_state = model.reorder_state

    def recording_reorder(state: DecoderState, index: Tensor) -> DecoderState:
        reorders.append(index.clone())
        return reorder_state(state, index)

    model.reorder_state = recording_reorder  # type: ignore[method-assign]
    limits = max_output_lengths(lengths, 1.0, 3)
    settings = DecodingConfig(beam=5, nbest=5)
    results = beam_search(model, src, lengths, limits, settings, need_weights=True, **copy_inputs)
    # a beam forked (two rows share a parent) after the first expansion: real reordering
    assert any(index.unique().numel() < index.numel() for index in reorders[1:])
    for row, nbest in enumerate(results):
        n = int(lengths[row])
        assert len(nbest) == 5
        for hypothesis in nbest:
            steps = hypothesis.attention.shape[-2]
            tgt_in = torch.tensor([[BOS, *hypothesis.tokens][:steps]])  # (1, T)
            row_inputs = {}
            if copy_inputs:
                row_inputs = {"src_ext": copy_inputs["src_ext"][row : row + 1, :n], "n_oov": 2}
            out = model(src[row : row + 1, :n], lengths[row : row + 1], tgt_in, True, **row_inputs)
            forced = out.attention[0]  # (T, S) or (L, H, T, S)
            torch.testing.assert_close(hypothesis.attention, forced, atol=1e-5, rtol=1e-4)
    # hypotheses that part ways attend differently afterwards (an RNN decoder from the second
    # row on: its attention reads the state before the latest token): a mix-up of beams could
    # not go unseen
    assert any(
        not torch.allclose(a.attention[..., p + 1 : end, :], b.attention[..., p + 1 : end, :])
        for nbest in results
        for a, b in itertools.combinations(nbest, 2)
        if (p := first_difference(a.tokens, b.tokens)) + 2
        < (end := min(a.attention.shape[-2], b.attention.shape[-2]))
    )


def first_difference(a: list[int], b: list[int]) -> int:
    """The first position where two token lists differ (the shorter length if one is a prefix)."""
    pairs = zip(a, b, strict=False)  # up to the shorter one
    return next((i for i, (x, y) in enumerate(pairs) if x != y), min(len(a), len(b)))
