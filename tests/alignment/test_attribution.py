"""Attribution methods (attnseq/alignment/attribution.py): every method points at the source
position a hand-built RNN and transformer copy from, integrated gradients' completeness, the
same maps whatever the batch, every model family, and one-line errors for bad input."""

import copy
import sys

import pytest
import torch
from helpers import untrained_checkpoint
from torch import nn

from attnseq.alignment.attribution import (
    ATTRIBUTION_METHODS,
    GRADIENT_METHODS,
    GradientSettings,
    attribute,
    attribute_examples,
    raw_attributions,
    rollout,
)
from attnseq.attention.luong import LocationAttention
from attnseq.errors import UserError
from attnseq.models import Vocabularies
from attnseq.models.loading import load_trained_model
from attnseq.models.rnn import RNNSeq2Seq
from attnseq.models.transformer import TransformerSeq2Seq

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")

VOCAB = Vocabularies(src_size=12, tgt_size=12, pad_id=0, bos_id=2, eos_id=3)
SOURCE = [4, 9, 6, 11, 5, 8]  # S = 6
TARGET = [5, 7, 4]  # T = 3: steps 0..3, the last predicting </s>
SMALL = GradientSettings(ig_steps=16, smoothgrad_samples=4, smoothgrad_noise=0.1, seed=3)
DATES = [
    ("7th of November, 1990", "1990-11-07"),
    ("03 Nov 25", "2025-11-03"),
    ("March 3rd, 1998", "1998-03-03"),
    ("12/01/2001", "2001-01-12"),
    ("June 5, 2001", "2001-06-05"),
    ("the 9th of May 1987", "1987-05-09"),
    ("Jan 30, 2010", "2010-01-30"),
    ("4 July 1976", "1976-07-04"),
]


# ------------------------------------------------------------------ hand-built models
def rnn_reading(position_of: dict[int, int]) -> RNNSeq2Seq:
    """A Luong RNN whose step t reads the source position `position_of[y_{t-1}]` (<s>: 0) and
    nothing else of the source.

    The decoder's GRU forgets its state (update gate shut, no recurrent weights), so h_t =
    tanh(3 e_{y_{t-1}}) of the one-hot target embedding; the location score W_a h_t (Luong eq.
    8) puts 20 on the row of that token's position, so the step's attention is ~1 there
    whatever the source; the context is the word value v_j = W_v [x_j; p_j] (values=
    embeddings), the source word alone. So log p(y_t) depends on source position p(t) only.
    """
    torch.manual_seed(0)
    hidden = emb = 16
    model = RNNSeq2Seq(
        VOCAB,
        attention=LocationAttention(hidden, max_src_len=8),
        style="luong",
        emb_dim=emb,
        enc_hidden=8,
        hidden=hidden,
        input_feeding=False,
        tie_embeddings=False,
        init_hidden="zero",
        values="embeddings",
        dropout=0.0,
    )
    with torch.no_grad():
        model.embedding.weight.copy_(torch.eye(VOCAB.tgt_size, emb))
        rnn = model.rnn
        rnn.weight_hh_l0.zero_()
        rnn.bias_hh_l0.zero_()
        rnn.bias_ih_l0.zero_()
        rnn.bias_ih_l0[hidden : 2 * hidden] = -30.0  # update gate z = 0: h_t = n_t
        rnn.weight_ih_l0.zero_()
        rnn.weight_ih_l0[2 * hidden :] = 3.0 * torch.eye(hidden, emb)  # n_t = tanh(3 e_y)
        location = model.attention.location_proj.weight  # (8, hidden)
        location.zero_()
        for token, position in position_of.items():
            location[position, token] = 20.0
    return model.eval()


def transformer_reading_next() -> TransformerSeq2Seq:
    """A one-layer transformer whose step t attends to source position t + 1 and reads no
    other source position.

    Tokens live in dimensions 0..15 of d_model = 32, learned positions 10 × one-hot in 16..23
    (large enough that SmoothGrad's noise on the token embedding's other dimensions does not
    blur them). The encoder does not mix positions (its sublayers' output projections are
    zero; its self-attention is uniform), so memory m_j = LayerNorm(x_j). Cross-attention keys
    read the position dimensions of m_j, queries map decoder position t to key position t + 1
    with weight 5: a score gap of ~20 makes the weight of t + 1 ~1. The decoder's
    self-attention output is zero, so step t reads its own input and source position t + 1.
    """
    torch.manual_seed(0)
    model = TransformerSeq2Seq(
        VOCAB,
        d_model=32,
        heads=1,
        enc_layers=1,
        dec_layers=1,
        ff_dim=16,
        dropout=0.0,
        positions="learned",
        max_positions=8,
        tie_embeddings=False,
    )
    with torch.no_grad():
        for embedding in (model.src_embed, model.tgt_embed):
            embedding.weight[:, 16:] = 0.0
            embedding.weight[VOCAB.pad_id] = 0.0
        for table in (model.src_positions.table.weight, model.tgt_positions.table.weight):
            table.zero_()
            table[:, 16:24] = 10.0 * torch.eye(8)
        encoder = model.encoder.layers[0]
        for projection in (encoder.self_attn.q_proj, encoder.self_attn.k_proj):
            nn.init.zeros_(projection.weight)
            nn.init.zeros_(projection.bias)
        for layer in (encoder.self_attn.out_proj, encoder.ff.outer):
            nn.init.zeros_(layer.weight)
            nn.init.zeros_(layer.bias)
        decoder = model.decoder_layers[0]
        nn.init.zeros_(decoder.self_attn.out_proj.weight)
        nn.init.zeros_(decoder.self_attn.out_proj.bias)
        cross = decoder.cross_attn
        for projection in (cross.q_proj, cross.k_proj):
            nn.init.zeros_(projection.weight)
            nn.init.zeros_(projection.bias)
        cross.k_proj.weight[16:24, 16:24] = torch.eye(8)
        for t in range(7):
            cross.q_proj.weight[16 + t + 1, 16 + t] = 5.0
    return model.eval()


def maps_of(model, method: str, examples, batch_size: int = 16):
    return attribute_examples(
        model, examples, method, batch_size=batch_size, settings=SMALL, device="cpu"
    )


# ------------------------------------------------------------------ the known attribution
RNN_POSITIONS = {VOCAB.bos_id: 0, **{v: (v - 3) % 6 for v in range(4, 12)}}


@pytest.mark.parametrize("method", [m for m in ATTRIBUTION_METHODS if m != "rollout"])
def test_every_method_points_at_the_position_the_rnn_copies(method: str) -> None:
    model = rnn_reading(RNN_POSITIONS)
    inputs = [VOCAB.bos_id, *TARGET]  # step t reads input t
    expected = [RNN_POSITIONS[token] for token in inputs]  # [0, 2, 4, 1]
    if method == "shift-att":  # row t: the step whose input is y_t; the </s> row repeats step T
        expected = [*expected[1:], expected[-1]]
    ((source, prefix, _),) = maps_of(model, method, [(SOURCE, TARGET)])
    assert source.shape == (len(TARGET) + 1, len(SOURCE))
    torch.testing.assert_close(source.sum(dim=1), torch.ones(len(TARGET) + 1))
    assert source.argmax(dim=1).tolist() == expected
    assert bool((source >= 0).all())
    if method in GRADIENT_METHODS:
        assert source.gather(1, torch.tensor(expected)[:, None]).min() > 0.5  # a majority
        assert prefix is not None and bool((prefix.triu(1) == 0).all())
        torch.testing.assert_close(prefix.sum(dim=1), torch.ones(len(TARGET) + 1))


@pytest.mark.parametrize("method", ATTRIBUTION_METHODS)
def test_every_method_points_at_the_position_the_transformer_copies(method: str) -> None:
    model = transformer_reading_next()
    steps = len(TARGET) + 1
    expected = [t + 1 for t in range(steps)]
    if method == "shift-att":
        expected = [*expected[1:], expected[-1]]
    ((source, prefix, _),) = maps_of(model, method, [(SOURCE, TARGET)])
    assert source.argmax(dim=1).tolist() == expected
    torch.testing.assert_close(source.sum(dim=1), torch.ones(steps))
    if method in GRADIENT_METHODS:
        # the decoder's self-attention adds nothing: step t owes its prefix share to input t
        assert prefix is not None and prefix.argmax(dim=1).tolist() == list(range(steps))


def test_rollout_multiplies_the_residual_halves_through_the_layers() -> None:
    first = torch.tensor([[0.0, 1.0], [1.0, 0.0]])  # each position reads the other
    second = torch.tensor([[1.0, 0.0], [1.0, 0.0]])  # both read position 0
    weights = torch.stack([first[None], second[None]])  # (L=2, H=1, 2, 2)
    mixed_1 = 0.5 * first + 0.5 * torch.eye(2)
    mixed_2 = 0.5 * second + 0.5 * torch.eye(2)
    torch.testing.assert_close(rollout(weights), mixed_2 @ mixed_1)
    torch.testing.assert_close(rollout(weights).sum(dim=1), torch.ones(2))


# ------------------------------------------------------------------ completeness, batching
# `untrained_checkpoints` (tests/conftest.py): an untrained tiny model of each family, the
# transformer with two decoder layers.


def zero_embedding_scores(model, examples) -> list[torch.Tensor]:
    """log p(y_t) of every step with every input token embedding zero: an ordinary forward
    pass with hooks that zero what the embedding modules return (the output projection, which
    may share the target embedding's matrix, keeps its weights)."""
    from attnseq.alignment.attribution import embedding_modules
    from attnseq.data.batching import collate

    handles = [
        module.register_forward_hook(lambda _m, _i, output: torch.zeros_like(output))
        for module in set(embedding_modules(model))
    ]
    scores = []
    try:
        for example in examples:
            batch = collate(
                [example], [0], pad_id=model.pad_id, bos_id=model.bos_id, eos_id=model.eos_id
            )
            with torch.no_grad():
                logits = model(batch.src, batch.src_lengths, batch.tgt_in).logits
            log_probs = logits.log_softmax(dim=-1)[0]
            scores.append(log_probs.gather(1, batch.tgt_out[0][:, None]).squeeze(1))
    finally:
        for handle in handles:
            handle.remove()
    return scores


@pytest.mark.slow
@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_integrated_gradients_sum_to_the_difference_from_the_baseline(
    untrained_checkpoints, family
):
    trained = load_trained_model(untrained_checkpoints[family])
    src, tgt = trained.tokenizers.src, trained.tokenizers.tgt
    examples = [(src.encode(s), tgt.encode(t)) for s, t in DATES[:3]]
    settings = GradientSettings(ig_steps=64)
    raws = raw_attributions(trained.model, examples, "integrated-gradients", settings=settings)
    baselines = zero_embedding_scores(trained.model, examples)
    for raw, baseline, (src_ids, tgt_ids) in zip(raws, baselines, examples, strict=True):
        assert raw.source.shape == (len(tgt_ids) + 1, len(src_ids))
        assert raw.baseline_scores is not None
        torch.testing.assert_close(raw.baseline_scores, baseline, atol=1e-4, rtol=1e-4)
        total = raw.source.sum(dim=1) + raw.target_prefix.sum(dim=1)  # (T + 1,)
        difference = raw.scores - baseline
        assert difference.abs().max() > 0.05  # something to attribute
        torch.testing.assert_close(total, difference, atol=0.02, rtol=0.02)


def test_the_scores_explained_are_the_models_log_probabilities(untrained_checkpoints) -> None:
    """The forward pass with the embeddings handed in (hooks) computes what the model does."""
    from attnseq.data.batching import collate

    trained = load_trained_model(untrained_checkpoints["rnn"])
    model = trained.model
    example = (
        trained.tokenizers.src.encode(DATES[0][0]),
        trained.tokenizers.tgt.encode(DATES[0][1]),
    )
    (raw,) = raw_attributions(model, [example], "gradient-x-input")
    batch = collate([example], [0], pad_id=model.pad_id, bos_id=model.bos_id, eos_id=model.eos_id)
    with torch.no_grad():
        log_probs = model(batch.src, batch.src_lengths, batch.tgt_in).logits.log_softmax(-1)[0]
    torch.testing.assert_close(raw.scores, log_probs.gather(1, batch.tgt_out[0][:, None])[:, 0])


@pytest.mark.slow
@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_a_batch_of_eight_gives_the_maps_of_one_at_a_time(untrained_checkpoints, family) -> None:
    trained = load_trained_model(untrained_checkpoints[family])
    methods = [m for m in ATTRIBUTION_METHODS if family == "transformer" or m != "rollout"]
    for method in methods:
        options = {"ig_steps": 8, "smoothgrad_samples": 3, "seed": 5}
        alone = attribute(trained, DATES, method, batch_size=1, **options)
        together = attribute(trained, DATES, method, batch_size=8, **options)
        for one, eight in zip(alone, together, strict=True):
            assert one.source_pieces == eight.source_pieces
            torch.testing.assert_close(one.source, eight.source, atol=1e-4, rtol=1e-3)
            if one.target_prefix is not None:
                torch.testing.assert_close(
                    one.target_prefix, eight.target_prefix, atol=1e-4, rtol=1e-3
                )


# ------------------------------------------------------------------ every family
@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides",
    [
        ("model.decoder=luong", "model.input_feeding=true", "model.attention.score=general"),
        ("model.attention.hard=gumbel",),
        ("model.copy=true",),
        ("model.family=transformer", "model.copy=true"),
        ("model.attention.score=none",),
        ("model.attention.score=concat", "model.attention.window=local_p"),
        ("model.family=transformer", "model.attention.hard=gumbel"),
    ],
    ids=[
        "luong-input-feeding",
        "hard",
        "pointer-rnn",
        "pointer-transformer",
        "no-attention",
        "concat-local-p",
        "hard-transformer",
    ],
)
def test_gradient_methods_explain_every_family(tmp_path, overrides) -> None:
    trained = load_trained_model(untrained_checkpoint(tmp_path / "m.pt", *overrides))
    for method in ("gradient-x-input", "integrated-gradients"):
        (result,) = attribute(trained, DATES[:1], method, ig_steps=4)
        steps = len(result.target_pieces) + 1
        assert result.source.shape == (steps, len(result.source_pieces))
        torch.testing.assert_close(result.source.sum(dim=1), torch.ones(steps))
        assert result.source_share is not None and bool((result.source_share > 0).all())


def test_a_source_embedding_shared_with_the_target() -> None:
    """One embedding module for both sides: its two calls are told apart by their ids."""
    torch.manual_seed(0)
    model = TransformerSeq2Seq(
        VOCAB,
        d_model=16,
        heads=2,
        enc_layers=1,
        dec_layers=1,
        ff_dim=16,
        dropout=0.0,
        share_src_tgt_embeddings=True,
    ).eval()
    assert model.src_embed is model.tgt_embed
    ((source, prefix, _),) = maps_of(model, "gradient-x-input", [(SOURCE, TARGET)])
    separate = copy.deepcopy(model)
    separate.src_embed = copy.deepcopy(model.tgt_embed)  # the same numbers, two modules
    ((alone, alone_prefix, _),) = maps_of(separate, "gradient-x-input", [(SOURCE, TARGET)])
    torch.testing.assert_close(source, alone)
    torch.testing.assert_close(prefix, alone_prefix)


# ------------------------------------------------------------------ bad input
@pytest.mark.slow
def test_bad_input_is_one_user_error(untrained_checkpoints, tmp_path) -> None:
    rnn = load_trained_model(untrained_checkpoints["rnn"])
    transformer = load_trained_model(untrained_checkpoints["transformer"])
    pair = [DATES[0]]
    cases = [
        (rnn, pair, "integrated-gradient", {}, "Did you mean 'integrated-gradients'?"),
        (rnn, pair, "rollout", {}, "rollout needs a transformer"),
        (rnn, [(DATES[0][0], "  ")], "attention", {}, "the target of pair 1 is empty"),
        (rnn, [("", "1990")], "smoothgrad", {}, "the source of pair 1 is empty"),
        (transformer, pair, "smoothgrad", {"layer": 1}, "layer choose an attention map"),
        (transformer, pair, "attention", {"layer": 3}, "layer must be in 1..2"),
        (transformer, pair, "integrated-gradients", {"ig_steps": 0}, "ig_steps must be"),
        (transformer, [], "attention", {}, "no sentence pairs"),
    ]
    hierarchical = load_trained_model(
        untrained_checkpoint(tmp_path / "h.pt", "model.attention.hierarchy=sentence")
    )
    cases.append((hierarchical, pair, "smoothgrad", {}, "cannot follow the source positions"))
    performer = load_trained_model(
        untrained_checkpoint(
            tmp_path / "p.pt", "model.family=transformer", "model.attention.kind=performer"
        )
    )
    cases.append((performer, pair, "rollout", {}, "self-attention kind returns none"))
    for trained, pairs, method, options, message in cases:
        with pytest.raises(UserError, match=message):
            attribute(trained, pairs, method, **options)
    learned = untrained_checkpoint(
        tmp_path / "learned.pt",
        "model.family=transformer",
        "model.positions=learned",
        "model.max_positions=64",
        "data.max_src_len=20",
        "data.max_tgt_len=20",
    )
    with pytest.raises(UserError, match="the target of pair 1 has 70 tokens; this model"):
        attribute(load_trained_model(learned), [("1990", "1" * 70)], "gradient-x-input")


def test_saliency_is_smoothgrad(untrained_checkpoints) -> None:
    trained = load_trained_model(untrained_checkpoints["rnn"])
    (alias,) = attribute(trained, DATES[:1], "saliency", smoothgrad_samples=2)
    (named,) = attribute(trained, DATES[:1], "smoothgrad", smoothgrad_samples=2)
    assert alias.method == "smoothgrad"
    torch.testing.assert_close(alias.source, named.source)


def test_without_captum_the_gradient_methods_name_the_extra(
    untrained_checkpoints, monkeypatch
) -> None:
    trained = load_trained_model(untrained_checkpoints["rnn"])
    monkeypatch.setitem(sys.modules, "captum", None)  # `import captum...` raises ImportError
    monkeypatch.setitem(sys.modules, "captum.attr", None)
    with pytest.raises(UserError, match=r"need captum: pip install 'attnseq\[explain\]'"):
        attribute(trained, DATES[:1], "gradient-x-input")
    (attention,) = attribute(trained, DATES[:1], "attention")  # attention needs no captum
    assert attention.target_prefix is None


def test_batches_hold_at_most_the_pairs_and_the_steps_asked_for() -> None:
    from attnseq.alignment.attribution import length_sorted_batches

    examples = [([4] * n, [5] * n) for n in (3, 9, 1, 5, 2, 7)]  # n + 1 steps each
    batches = list(length_sorted_batches(transformer_reading_next(), examples, 3, "cpu", None, 10))
    chunks = [chunk for chunk, _ in batches]
    assert sorted(i for chunk in chunks for i in chunk) == list(range(6))
    for chunk in chunks:
        steps = sum(len(examples[i][1]) + 1 for i in chunk)
        assert len(chunk) <= 3 and (steps <= 10 or len(chunk) == 1)
    assert chunks == [[2, 4, 0], [3], [5], [1]]  # 2 + 3 + 4 steps; 6; 8; 10


# ------------------------------------------------------------------ the prefix passes
def full_length_reference(model, examples, method: str, settings: GradientSettings):
    """The straightforward method: every (pair, step) row runs the whole teacher-forced pass
    over all T + 1 decoder inputs, SmoothGrad's copies one at a time; (source, prefix,
    scores) of each example."""
    from captum.attr import InputXGradient, IntegratedGradients

    from attnseq.alignment.attribution import _noise, _noise_sigmas, _Rows, _step_scores
    from attnseq.data.batching import collate

    batch = collate(
        list(examples),
        indices=list(range(len(examples))),
        pad_id=model.pad_id,
        bos_id=model.bos_id,
        eos_id=model.eos_id,
    )
    sizes = [(len(s), len(t) + 1) for s, t in examples]
    with torch.enable_grad():
        rows = _Rows.of(model, batch, sizes, list(range(len(examples))))
        scores = _step_scores(model, 0)
        inputs, arguments = (rows.src_x, rows.tgt_x), rows.arguments()
        if method == "gradient-x-input":
            src_a, tgt_a = InputXGradient(scores).attribute(
                inputs, additional_forward_args=arguments
            )
            src_raw, tgt_raw = src_a.sum(-1), tgt_a.sum(-1)
        elif method == "integrated-gradients":
            zeros = (torch.zeros_like(rows.src_x), torch.zeros_like(rows.tgt_x))
            src_a, tgt_a = IntegratedGradients(scores).attribute(
                inputs,
                baselines=zeros,
                additional_forward_args=arguments,
                n_steps=settings.ig_steps,
            )
            src_raw, tgt_raw = src_a.sum(-1), tgt_a.sum(-1)
        else:
            src_noise, tgt_noise = _noise(rows, settings, _noise_sigmas(model, settings))
            src_raw, tgt_raw = 0, 0
            for k in range(settings.smoothgrad_samples):
                noisy = (
                    (rows.src_x + src_noise[k]).detach().requires_grad_(),
                    (rows.tgt_x + tgt_noise[k]).detach().requires_grad_(),
                )
                src_a, tgt_a = InputXGradient(scores).attribute(
                    noisy, additional_forward_args=arguments
                )
                src_raw = src_raw + src_a.sum(-1).abs()
                tgt_raw = tgt_raw + tgt_a.sum(-1).abs()
            src_raw = src_raw / settings.smoothgrad_samples
            tgt_raw = tgt_raw / settings.smoothgrad_samples
        with torch.no_grad():
            at_input = scores(*inputs, *arguments)
    results, start = [], 0
    for S, steps in sizes:
        part = slice(start, start + steps)
        source, prefix = src_raw[part, :S].detach(), tgt_raw[part, :steps].detach().tril()
        results.append((source, prefix, at_input[part]))
        start += steps
    return results


@pytest.mark.slow
@pytest.mark.parametrize("family", ["rnn", "transformer"])
@pytest.mark.parametrize("method", GRADIENT_METHODS)
def test_the_prefix_passes_give_the_full_length_scores(
    untrained_checkpoints, family, method
) -> None:
    """Each step's rows run on the decoder inputs it reads (a transformer's steps in groups,
    so a 50-piece target takes several passes): the scores of the whole pass per row, within
    float tolerance."""
    trained = load_trained_model(untrained_checkpoints[family])
    tokenizers = trained.tokenizers
    pairs = [("7th of November, 1990", "1990-11-07" * 5), DATES[1], ("June 5, 2001", "2001")]
    examples = [(tokenizers.src.encode(s), tokenizers.tgt.encode(t)) for s, t in pairs]
    assert len(examples[0][1]) + 1 > 3 * 16  # several groups of steps
    settings = GradientSettings(ig_steps=6, smoothgrad_samples=3, seed=2)
    model = trained.model.eval()
    raws = raw_attributions(model, examples, method, batch_size=3, settings=settings)
    reference = full_length_reference(model, examples, method, settings)
    for raw, (source, prefix, scores) in zip(raws, reference, strict=True):
        assert raw.source.abs().max() > 1e-3  # something attributed
        torch.testing.assert_close(raw.source, source, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(raw.target_prefix, prefix, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(raw.scores, scores, atol=1e-5, rtol=1e-4)
