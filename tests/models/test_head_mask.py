"""The head mask xi (Michel et al. 2019): all ones is the plain model bit for bit; masking a head
removes exactly its contribution (hand computation, and the same as zeroing its columns of W^O)
on every path: fused, explicit, efficient kinds, cached decoding steps, greedy and beam search;
old state dicts load with every head kept; which heads pruning picks."""

import math

import pytest
import torch
from helpers import tiny_config
from torch import Tensor

from attnseq.attention.multihead import MultiHeadAttention
from attnseq.decoding import DecodingConfig, beam_search, greedy_decode, max_output_lengths
from attnseq.errors import UserError
from attnseq.models import Vocabularies, build_model
from attnseq.models.head_mask import (
    attention_sites,
    compact_heads,
    get_head_masks,
    masked_heads,
    prune_count,
    prune_masks,
    pruned_heads_summary,
    set_head_masks,
)
from attnseq.models.seq2seq import TeacherForcing

PAD, BOS, EOS, VOCAB = 0, 2, 3, 14


def make_transformer(*overrides: str, seed: int = 0):
    torch.manual_seed(seed)
    cfg = tiny_config(
        "model.family=transformer",
        "model.dropout=0.0",
        "model.enc_layers=2",
        "model.dec_layers=2",
        "model.heads=4",
        *overrides,
    )
    return build_model(cfg.model, Vocabularies(VOCAB, VOCAB, PAD, BOS, EOS)).eval()


def batch(seed: int = 1) -> tuple[Tensor, Tensor, Tensor]:
    """src (3, 6) right-padded, lengths (3,), tgt_in (3, 5) starting with BOS."""
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(4, VOCAB, (3, 6), generator=generator)
    lengths = torch.tensor([6, 4, 2])
    src[torch.arange(6).unsqueeze(0) >= lengths.unsqueeze(1)] = PAD
    tgt_in = torch.randint(4, VOCAB, (3, 5), generator=generator)
    tgt_in[:, 0] = BOS
    return src, lengths, tgt_in


def outputs(model, src, lengths, tgt_in) -> list[Tensor]:
    """Logits of the fused and the explicit path, and the explicit path's cross-attention."""
    fused = model(src, lengths, tgt_in).logits
    explicit = model(src, lengths, tgt_in, need_weights=True)
    return [fused, explicit.logits, explicit.attention]


def test_all_ones_is_the_plain_model_exactly(monkeypatch):
    model = make_transformer()
    src, lengths, tgt_in = batch()
    limits = max_output_lengths(lengths, 1.0, 2)
    with torch.no_grad():
        masked = outputs(model, src, lengths, tgt_in)
        masked_beam = beam_search(model, src, lengths, limits, DecodingConfig(beam=3, nbest=3))
        monkeypatch.setattr(MultiHeadAttention, "_mask_heads", lambda self, context: context)
        plain = outputs(model, src, lengths, tgt_in)
        plain_beam = beam_search(model, src, lengths, limits, DecodingConfig(beam=3, nbest=3))
    for got, expected in zip(masked, plain, strict=True):
        assert torch.equal(got, expected)
    for got, expected in zip(masked_beam, plain_beam, strict=True):
        assert [(h.tokens, h.score) for h in got] == [(h.tokens, h.score) for h in expected]


def test_masking_a_head_zeroes_its_contribution_by_hand():
    torch.manual_seed(0)
    d_model, heads, d_k = 8, 2, 4
    attention = MultiHeadAttention(d_model, heads).eval()
    x, memory = torch.randn(2, 3, d_model), torch.randn(2, 5, d_model)
    attention.head_mask.copy_(torch.tensor([1.0, 0.0]))
    # by hand: head 0 alone, softmax(q k^T / sqrt(d_k)) v through its d_k columns of W^O
    rows = slice(0, d_k)
    q = x @ attention.q_proj.weight[rows].T + attention.q_proj.bias[rows]  # (2, 3, d_k)
    k = memory @ attention.k_proj.weight[rows].T + attention.k_proj.bias[rows]  # (2, 5, d_k)
    v = memory @ attention.v_proj.weight[rows].T + attention.v_proj.bias[rows]
    head0 = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(d_k), dim=-1) @ v  # (2, 3, d_k)
    expected = head0 @ attention.out_proj.weight[:, rows].T + attention.out_proj.bias
    with torch.no_grad():
        fused, _ = attention(x, memory, memory)
        explicit, weights = attention(x, memory, memory, need_weights=True)
    torch.testing.assert_close(fused, expected, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(explicit, expected, atol=1e-6, rtol=1e-5)
    assert weights is not None and weights[:, 1].abs().sum() > 0  # the weights stay visible


def test_cached_self_attention_steps_honour_the_mask():
    torch.manual_seed(0)
    attention = MultiHeadAttention(8, 2).eval()
    attention.head_mask.copy_(torch.tensor([0.0, 1.0]))
    x = torch.randn(2, 4, 8)
    with torch.no_grad():
        full, _ = attention(x, x, x, is_causal=True)
        cache = attention.empty_cache(2, x)
        steps = []
        for t in range(4):
            out, _, cache = attention.attend_cached(x[:, t : t + 1], cache)
            steps.append(out)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-6, rtol=1e-5)


def _zero_out_columns(model, kind: str, layer: int, head: int) -> None:
    """The same head removed by hand: its d_k input columns of W^O set to zero."""
    site = next(s for s in attention_sites(model) if (s.kind, s.layer) == (kind, layer))
    d_k = site.attention.d_k
    with torch.no_grad():
        site.attention.out_proj.weight[:, head * d_k : (head + 1) * d_k] = 0.0


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["full", "local"])
def test_a_masked_head_equals_its_output_columns_zeroed_on_every_sublayer(kind):
    overrides = [f"model.attention.kind={kind}", "model.attention.decoder_self=true"]
    if kind == "local":
        overrides.append("model.attention.D=2")
    src, lengths, tgt_in = batch()
    for site_kind, layer, head in [
        ("encoder_self", 1, 2),
        ("decoder_self", 0, 1),
        ("decoder_cross", 1, 3),
    ]:
        masked = make_transformer(*overrides)
        masks = get_head_masks(masked)
        masks[site_kind][layer, head] = 0.0
        set_head_masks(masked, masks)
        zeroed = make_transformer(*overrides)
        _zero_out_columns(zeroed, site_kind, layer, head)
        with torch.no_grad():
            got, expected = masked(src, lengths, tgt_in), zeroed(src, lengths, tgt_in)
            plain = make_transformer(*overrides)(src, lengths, tgt_in)
        torch.testing.assert_close(got.logits, expected.logits, atol=1e-5, rtol=1e-5)
        assert not torch.allclose(got.logits, plain.logits, atol=1e-4)  # the head mattered


def pruned_model():
    model = make_transformer(seed=3)
    masks = get_head_masks(model)
    masks["encoder_self"][0, 1] = masks["decoder_self"][1, 0] = masks["decoder_cross"][0, 3] = 0
    set_head_masks(model, masks)
    return model


def teacher_forced_log_probs(model, src: Tensor, length: int, tokens: list[int]) -> Tensor:
    """log p of each of `tokens` (EOS included by the caller) given the ones before, (T,)."""
    tgt_in = torch.tensor([[BOS, *tokens[:-1]]])
    with torch.no_grad():
        logits = model(src[None, :length], torch.tensor([length]), tgt_in).logits[0]
    return logits.log_softmax(-1).gather(1, torch.tensor(tokens)[:, None]).squeeze(1)


def test_greedy_and_beam_with_cache_equal_the_full_forward_under_the_mask():
    model = pruned_model()
    src, lengths, _ = batch(seed=5)
    limits = max_output_lengths(lengths, 1.0, 2)
    with torch.no_grad():
        greedy = greedy_decode(model, src, lengths, limits)
        beams = beam_search(model, src, lengths, limits, DecodingConfig(beam=4, nbest=4))
    for row, hypothesis in enumerate(greedy):
        n = int(lengths[row])
        tokens = hypothesis.tokens
        tgt_in = torch.tensor([[BOS, *tokens]])
        with torch.no_grad():
            logits = model(src[None, row, :n], torch.tensor([n]), tgt_in).logits[0]
        logits[:, [PAD, BOS]] = float("-inf")  # never a target (decoding/settings.py)
        argmax = logits.argmax(-1).tolist()  # each step's choice given the prefix before it
        assert argmax[: len(tokens)] == tokens
    for row, nbest in enumerate(beams):
        for hypothesis in nbest:
            ended = len(hypothesis.tokens) < int(limits[row])
            tokens = hypothesis.tokens + ([EOS] if ended else [])
            expected = teacher_forced_log_probs(model, src[row], int(lengths[row]), tokens)
            assert hypothesis.score == pytest.approx(float(expected.sum()), abs=1e-4)


@pytest.mark.slow
def test_old_state_dicts_load_with_every_head_kept():
    model = pruned_model()
    state = model.state_dict()
    assert sum(name.endswith("head_mask") for name in state) == 6  # 2 layers x 3 kinds
    old = {name: value for name, value in state.items() if not name.endswith("head_mask")}
    fresh = make_transformer(seed=9)
    fresh.load_state_dict(old)  # strict: the missing masks are filled in
    assert masked_heads(fresh) == [] and pruned_heads_summary(fresh) is None
    fresh.load_state_dict(state)
    assert masked_heads(fresh) == [
        ("encoder_self", 0, 1),
        ("decoder_self", 1, 0),
        ("decoder_cross", 0, 3),
    ]
    assert pruned_heads_summary(fresh) == (
        "3 of 24 (encoder_self L1: 2; decoder_self L2: 1; decoder_cross L1: 4)"
    )
    assert old.keys() == {n for n in state if not n.endswith("head_mask")}  # caller's dict kept


def test_prune_masks_takes_the_lowest_and_keeps_one_head_per_sublayer():
    ones = {
        "encoder_self": torch.ones(1, 3),
        "decoder_self": torch.ones(1, 3),
        "decoder_cross": torch.ones(1, 3),
    }
    scores = {
        "encoder_self": torch.tensor([[0.1, 0.2, 0.3]]),  # the three lowest: one must stay
        "decoder_self": torch.tensor([[0.9, 0.5, 0.8]]),
        "decoder_cross": torch.tensor([[0.6, 0.7, 0.95]]),
    }
    masks = prune_masks(scores, 4, ones)
    assert masks["encoder_self"].tolist() == [[0, 0, 1]]  # 0.3 skipped: last of its sublayer
    assert masks["decoder_self"].tolist() == [[1, 0, 1]]  # 0.5
    assert masks["decoder_cross"].tolist() == [[0, 1, 1]]  # 0.6
    # heads masked already stay masked and count toward K
    again = prune_masks(scores, 4, masks)
    assert all(torch.equal(again[k], masks[k]) for k in masks)
    more = prune_masks(scores, 5, masks)
    assert more["decoder_cross"].tolist() == [[0, 0, 1]]


@pytest.mark.parametrize(
    ("spec", "count"), [("3", 3), ("0", 0), ("0.25", 3), ("0.5", 6), ("0.04", 0)]
)
def test_prune_count(spec, count):
    assert prune_count(spec, 12, 6) == count


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("12", "K must be below"),
        ("13", "K must be below"),
        ("1.0", "in (0, 1)"),
        ("-0.2", "in (0, 1)"),
        ("x", "head count K"),
        ("7", "at most 6 of 12"),
        ("0.6", "at most 6 of 12"),
    ],
)
def test_prune_count_errors(spec, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        prune_count(spec, 12, 6)


def test_rnn_models_have_no_heads():
    torch.manual_seed(0)
    cfg = tiny_config("model.family=rnn")
    model = build_model(cfg.model, Vocabularies(VOCAB, VOCAB, PAD, BOS, EOS))
    with pytest.raises(UserError, match="heads needs a transformer"):
        attention_sites(model)
    assert masked_heads(model) == [] and pruned_heads_summary(model) is None


def test_compacted_heads_compute_what_the_mask_computes():
    model = pruned_model()
    src, lengths, tgt_in = batch(seed=6)
    limits = max_output_lengths(lengths, 1.0, 2)
    settings = DecodingConfig(beam=3, nbest=2)
    with torch.no_grad():
        masked = model(src, lengths, tgt_in).logits
        masked_beam = beam_search(model, src, lengths, limits, settings)
        parameters = sum(p.numel() for p in model.parameters())
        assert compact_heads(model) == 3
        compact = model(src, lengths, tgt_in).logits  # weights no longer stack across layers
        compact_beam = beam_search(model, src, lengths, limits, settings)
    # 3 heads of d_k = 8: 3 x 8 rows of W^Q, W^K, W^V (+ biases) and 3 x 8 columns of W^O
    assert parameters - sum(p.numel() for p in model.parameters()) == 3 * (4 * 8 * 32 + 3 * 8)
    assert [site.attention.heads for site in attention_sites(model)] == [3, 4, 4, 3, 3, 4]
    torch.testing.assert_close(compact, masked, atol=1e-5, rtol=1e-5)
    for got, expected in zip(compact_beam, masked_beam, strict=True):
        assert [h.tokens for h in got] == [h.tokens for h in expected]
    assert compact_heads(model) == 0  # nothing masked is left


def test_a_copy_model_averages_its_copy_attention_over_the_kept_heads(monkeypatch):
    from attnseq.models.pointer_generator import PointerGeneratorTransformer
    from attnseq.models.transformer import TransformerSeq2Seq

    model = make_transformer("model.copy=true", "model.coverage=true", "model.copy_layer=-1")
    assert isinstance(model, PointerGeneratorTransformer)
    src, lengths, tgt_in = batch()
    copy_inputs = {"src_ext": src, "n_oov": 0}
    with torch.no_grad():
        before = model(src, lengths, tgt_in, **copy_inputs)
        monkeypatch.setattr(  # the plain head average
            PointerGeneratorTransformer,
            "_copy_attention",
            lambda self, decoder: decoder.layers[self.copy_layer].cross_weights.mean(dim=1),
        )
        plain = model(src, lengths, tgt_in, **copy_inputs)
        monkeypatch.undo()
        assert torch.equal(before.logits, plain.logits)  # all ones: bit for bit the plain mean
        model.decoder_layers[-1].cross_attn.head_mask[1] = 0.0
        inputs = TeacherForcing(src, lengths, tgt_in, need_weights=True)
        _, decoder, _ = TransformerSeq2Seq.decoder_pass(model, inputs)
    weights = decoder.layers[-1].cross_weights  # (B, H, T, S) of the copy layer
    expected = weights[:, [0, 2, 3]].mean(dim=1)  # the kept heads' mean, (B, T, S)
    torch.testing.assert_close(model._copy_attention(decoder), expected)


def test_compaction_keeps_each_heads_persistent_memory():
    """With memory slots (one key/value set per head), the kept heads keep their own slots."""
    model = make_transformer(
        "model.attention.memory_slots=2", "model.attention.memory_in_cross=true", seed=4
    )
    masks = get_head_masks(model)
    masks["encoder_self"][1, 2] = masks["decoder_cross"][1, 0] = 0
    set_head_masks(model, masks)
    src, lengths, tgt_in = batch(seed=7)
    with torch.no_grad():
        masked = model(src, lengths, tgt_in).logits
        assert compact_heads(model) == 2
        compact = model(src, lengths, tgt_in).logits
    torch.testing.assert_close(compact, masked, atol=1e-5, rtol=1e-5)
