"""Faithfulness measures (studies/faithfulness.py): the deletion curve of a hand-built
copying model, where the right attribution is known (masking the copied word drops the
reference log-probability most, a random order less, k = 0 not at all); the curve area; the
word pooling and rankings; AER through argmax links; rank agreement of two methods."""

import math

import pytest
import torch
from helpers import BOS, EOS, PAD, VOCAB, load_script, make_model
from torch import Tensor

from attnseq.models.seq2seq import Seq2Seq, Seq2SeqOutput

faithfulness = load_script("studies/faithfulness.py")
pytestmark = pytest.mark.usefixtures("one_intra_op_thread")

CONFIDENCE = 10.0  # the copying model's logit on the token it copies


class CopyingModel(Seq2Seq):
    """A hand-built model whose step t copies source position `positions[t]`: logit
    CONFIDENCE on that token, 0 elsewhere; the steps past the positions predict EOS. Its
    prediction at step t depends on source position positions[t] and on nothing else."""

    def __init__(self, positions: list[int]) -> None:
        super().__init__(PAD, BOS, EOS)
        self.positions = positions

    def forward(self, src, src_lengths, tgt_in, need_weights=False, alignment=None):
        B, T = tgt_in.shape
        logits = torch.zeros(B, T, VOCAB)
        for step in range(T):
            if step < len(self.positions):
                copied = src[:, min(self.positions[step], src.size(1) - 1)]  # (B,)
                logits[torch.arange(B), step, copied] = CONFIDENCE
            else:
                logits[:, step, EOS] = CONFIDENCE
        return Seq2SeqOutput(logits)

    def start_decoding(self, src, src_lengths):  # not used: teacher forcing only
        raise NotImplementedError

    def decode_step(self, prev_tokens, state, need_weights=False):
        raise NotImplementedError


POSITIONS = [3, 0, 4, 1]  # step t copies source word POSITIONS[t]
SOURCES = [[5, 6, 7, 8, 9, 10], [11, 12, 13, 9, 8], [4, 5, 6, 7, 8, 9, 10]]
EXAMPLES = [(src, [src[p] for p in POSITIONS]) for src in SOURCES]
WORDS = [list(range(len(src))) for src in SOURCES]  # one piece per word


def copied_first(example_words: list[int]) -> Tensor:
    """The right ranking: each step's copied word first, then the others in order; the EOS step
    (which reads no source word) in plain order."""
    n = len(example_words)
    rows = []
    for step in range(len(POSITIONS) + 1):
        first = [POSITIONS[step]] if step < len(POSITIONS) else []
        rows.append(first + [w for w in range(n) if w not in first])
    return torch.tensor(rows)


def copied_last(example_words: list[int]) -> Tensor:
    """A wrong ranking: each step's copied word last."""
    return copied_first(example_words).roll(-1, dims=1)


def curve_of(rankings: list[Tensor], ks=(0, 1, 2, 3), **kwargs) -> faithfulness.DeletionCurve:
    model = CopyingModel(POSITIONS)
    return faithfulness.deletion_curve(model, EXAMPLES, WORDS, rankings, ks, mask_id=PAD, **kwargs)


def test_masking_the_copied_word_drops_its_log_probability_most():
    right = curve_of([copied_first(w) for w in WORDS])
    # the copied token goes from softmax CONFIDENCE vs 0s to 0 vs CONFIDENCE on <pad>
    per_step = CONFIDENCE  # log(e^c / Z) - log(1 / Z)
    share = len(POSITIONS) / (len(POSITIONS) + 1)  # the EOS step drops nothing
    assert right.drops[0] == pytest.approx(0.0, abs=1e-6)
    for drop in right.drops[1:]:
        assert drop == pytest.approx(per_step * share, rel=1e-4)
    assert right.steps == len(EXAMPLES) * (len(POSITIONS) + 1)
    wrong = curve_of([copied_last(w) for w in WORDS])
    assert wrong.drops[1] == pytest.approx(0.0, abs=1e-6)  # other words do not matter to it
    assert wrong.area < right.area


def test_a_random_order_drops_less_on_average_and_by_the_expected_amount():
    right = curve_of([copied_first(w) for w in WORDS])
    random_drops = []
    for seed in range(40):
        generator = torch.Generator().manual_seed(seed)
        rankings = [
            faithfulness.random_ranking(len(POSITIONS) + 1, len(w), generator) for w in WORDS
        ]
        random_drops.append(curve_of(rankings, ks=(0, 1)).drops[1])
    mean = sum(random_drops) / len(random_drops)
    # P(the copied word is the one random word) = 1 / words, averaged over the sentences
    expected = CONFIDENCE * len(POSITIONS) / (len(POSITIONS) + 1)
    expected *= sum(1 / len(w) for w in WORDS) / len(WORDS)
    assert mean < right.drops[1] / 2
    assert mean == pytest.approx(expected, rel=0.35)


def test_k_beyond_the_words_masks_them_all():
    curve = curve_of([copied_last(w) for w in WORDS], ks=(0, 7))
    assert curve.drops[1] == pytest.approx(CONFIDENCE * len(POSITIONS) / (len(POSITIONS) + 1))


@pytest.mark.parametrize("family", ["bahdanau", "transformer"])
def test_k_zero_gives_zero_drop_and_batching_changes_nothing(family):
    model = make_model(family)
    generator = torch.Generator().manual_seed(3)
    examples, words, rankings = [], [], []
    for length in (3, 7, 5, 2, 6, 4, 7, 3, 5):  # lengths mixed: padding differs per batch
        src = torch.randint(4, VOCAB, (length,), generator=generator).tolist()
        tgt = torch.randint(4, VOCAB, (length + 1,), generator=generator).tolist()
        examples.append((src, tgt))
        words.append(list(range(length)))
        rankings.append(faithfulness.random_ranking(len(tgt) + 1, length, generator))
    one = faithfulness.deletion_curve(
        model, examples, words, rankings, (0, 1, 2), mask_id=PAD, batch_size=1
    )
    eight = faithfulness.deletion_curve(
        model, examples, words, rankings, (0, 1, 2), mask_id=PAD, batch_size=8
    )
    assert abs(one.drops[0]) < 1e-5 and abs(eight.drops[0]) < 1e-5
    assert one.drops == pytest.approx(eight.drops, abs=1e-5)
    assert one.drops[2] != pytest.approx(0.0, abs=1e-4)  # masking does reach the model


def test_reference_log_probs_are_the_teacher_forced_scores():
    model = CopyingModel(POSITIONS)
    scores = faithfulness.reference_log_probs(model, EXAMPLES[:1])[0]
    top = -math.log1p((VOCAB - 1) * math.exp(-CONFIDENCE))  # log softmax of the copied token
    assert scores.shape == (len(POSITIONS) + 1,)
    assert scores.tolist() == pytest.approx([top] * (len(POSITIONS) + 1), abs=1e-6)


def test_deletion_arguments_are_checked():
    model = CopyingModel(POSITIONS)
    rankings = [copied_first(w) for w in WORDS]
    with pytest.raises(ValueError, match="ascending"):
        faithfulness.deletion_curve(model, EXAMPLES, WORDS, rankings, (2, 1), mask_id=PAD)
    with pytest.raises(ValueError, match="expected"):
        faithfulness.deletion_curve(
            model, EXAMPLES, WORDS, [r[:, :2] for r in rankings], (0,), mask_id=PAD
        )
    with pytest.raises(ValueError, match="one of each"):
        faithfulness.deletion_curve(model, EXAMPLES, WORDS[:2], rankings, (0,), mask_id=PAD)
    with pytest.raises(ValueError, match="mask must be one of"):
        faithfulness.mask_id_of(model, "blank")
    assert (
        faithfulness.mask_id_of(model, "pad") == PAD and faithfulness.mask_id_of(model, "unk") == 1
    )


def test_masked_source_replaces_every_piece_of_a_word():
    # pieces of words 0 0 1 2 2, masking words 0 and 2; -1 (a space) is never masked
    assert faithfulness.masked_source([5, 6, 7, 8, 9], [0, 0, 1, 2, 2], {0, 2}, 0) == [
        0,
        0,
        7,
        0,
        0,
    ]
    assert faithfulness.masked_source([5, 6, 7], [0, -1, 1], {1}, 1) == [5, 6, 1]


def test_curve_area_is_the_trapezoid_mean_height():
    assert faithfulness.curve_area([0, 1, 2], [0.0, 1.0, 1.0]) == pytest.approx(0.75)
    assert faithfulness.curve_area([0, 2, 3], [1.0, 1.0, 4.0]) == pytest.approx((2 * 1 + 2.5) / 3)
    assert faithfulness.DeletionCurve((0, 1), (0.0, 2.0), 5).as_dict()["area"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="ascending"):
        faithfulness.curve_area([0, 0], [1, 1])
    with pytest.raises(ValueError, match="two points"):
        faithfulness.curve_area([0], [1])


def test_source_words_sum_their_pieces_and_rank_stably():
    source = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.5, 0.0, 0.25, 0.25]])  # (R=2, S=4)
    scores = faithfulness.source_word_scores(source, [0, 0, 1, 2])
    torch.testing.assert_close(scores, torch.tensor([[0.3, 0.3, 0.4], [0.5, 0.25, 0.25]]))
    assert faithfulness.ranking(scores).tolist() == [[2, 0, 1], [0, 1, 2]]  # ties: lower word first
    order = faithfulness.random_ranking(3, 5, torch.Generator().manual_seed(0))
    assert sorted(order[0].tolist()) == list(range(5))
    assert (order == order[0]).all()


def test_word_maps_and_their_aer():
    # target "x y" (2 pieces + </s> row) over source pieces "▁a", "b", "▁c" (2 words)
    source = torch.tensor([[0.2, 0.1, 0.7], [0.5, 0.4, 0.1], [1.0, 0.0, 0.0]])
    word = faithfulness.word_map(source, ["▁a", "b", "▁c"], ["x", "y"], "sentencepiece", "word")
    torch.testing.assert_close(word, torch.tensor([[0.3, 0.7], [0.9, 0.1]]))  # no </s> row
    scores, links = faithfulness.alignment_scores([word], [{(1, 0), (0, 1)}])
    assert links == [{(1, 0), (0, 1)}] and scores["aer"] == pytest.approx(0.0)
    scores, _ = faithfulness.alignment_scores([word], [{(0, 0)}], [{(0, 0), (0, 1)}])
    # hypothesis {(1,0), (0,1)}: 1 of 2 possible, 0 of 1 sure -> AER 1 - 1/3
    assert scores["aer"] == pytest.approx(1 - 1 / 3)
    reversed_scores, _ = faithfulness.alignment_scores([word], [{(0, 1), (1, 0)}], src_first=False)
    assert reversed_scores["aer"] == pytest.approx(0.0)


def test_spearman_of_rows_with_ties_and_constant_rows():
    a = torch.tensor([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0], [1.0, 1.0, 2.0], [5.0, 5.0, 5.0]])
    b = torch.tensor([[2.0, 4.0, 9.0], [3.0, 2.0, 1.0], [1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
    assert faithfulness.average_ranks(a[2:3]).tolist() == [[1.5, 1.5, 3.0]]
    rho = faithfulness.spearman_rows(a, b)
    # ranks (1.5, 1.5, 3) against (1, 2, 3): centred (-.5, -.5, 1) . (-1, 0, 1) = 1.5,
    # norms sqrt(1.5) and sqrt(2)
    assert rho[:3].tolist() == pytest.approx([1.0, -1.0, 1.5 / math.sqrt(1.5 * 2)])
    assert math.isnan(rho[3])


def test_agreement_of_two_methods():
    attention = [torch.tensor([[0.9, 0.1], [0.2, 0.8]]), torch.tensor([[0.3, 0.3, 0.4]])]
    gradient = [torch.tensor([[0.6, 0.4], [0.7, 0.3]]), torch.tensor([[0.1, 0.2, 0.7]])]
    result = faithfulness.agreement(attention, gradient)
    assert result["argmax"] == pytest.approx(2 / 3)  # rows 1 and 3 agree
    assert result["rows"] == 3
    # two-word rows: rho = +1 or -1; the tied row (.3, .3, .4) vs (.1, .2, .7): as above
    assert result["spearman"] == pytest.approx((1 - 1 + 1.5 / math.sqrt(3)) / 3)
    with pytest.raises(ValueError, match="differ"):
        faithfulness.agreement(attention[:1], [torch.zeros(2, 3)])
