"""The training objective (models/objective.py): each term against its formula written out
here, and `training_loss` as their weighted sum."""

import math

import pytest
import torch
import torch.nn.functional as F
from helpers import tiny_model

from attnseq.config.schema import OptimConfig
from attnseq.models.objective import move_baseline, sequence_loss, token_loss_sum, training_loss
from attnseq.models.seq2seq import ReinforceSample, Seq2SeqOutput

PAD = 0
B, T, S, V = 2, 3, 4, 6
TARGETS = torch.tensor([[4, 2, 5], [3, 1, PAD]])  # (B, T): 5 real tokens
REAL = (TARGETS != PAD).float()
OPTIM = OptimConfig(
    label_smoothing=0.1,
    coverage_lambda=0.5,
    coverage_start_step=2,
    alignment_lambda=0.7,
    reinforce_lambda=1.5,
    reinforce_entropy=0.2,
    reinforce_baseline_decay=0.9,
)


def _smoothed_token_losses(logits: torch.Tensor, eps: float) -> torch.Tensor:
    """(B, T): -(1 - eps) log p(y) - eps/V sum_v log p(v) (Szegedy et al. 2016), 0 at padding."""
    log_p = logits.double().log_softmax(-1)
    gold = log_p.gather(-1, TARGETS.clamp_min(0).unsqueeze(-1)).squeeze(-1)
    return (-(1 - eps) * gold - eps * log_p.mean(-1)) * REAL.double()


def _output(baseline: float) -> tuple[Seq2SeqOutput, torch.Tensor]:
    """A forward output with every term's inputs (seeded values) and a gold distribution
    (B, T, S) for guided alignment."""
    torch.manual_seed(3)
    gold = torch.rand(B, T, S).softmax(-1)
    gold[0, 1] = 0.0  # a step without a link adds nothing
    output = Seq2SeqOutput(
        logits=torch.randn(B, T, V),
        coverage_loss=torch.rand(B, T),
        alignment_attention=torch.rand(B, T, S).softmax(-1),
        reinforce=ReinforceSample(
            log_prob=(-torch.rand(B, T)).requires_grad_(),
            entropy=torch.rand(B, T),
            baseline=torch.tensor(baseline),
        ),
    )
    return output, gold


def test_cross_entropy_is_the_label_smoothed_sum_over_real_tokens() -> None:
    torch.manual_seed(0)
    logits = torch.randn(B, T, V)
    expected = _smoothed_token_losses(logits, 0.1).sum()
    assert float(token_loss_sum(logits, TARGETS, PAD, 0.1)) == pytest.approx(float(expected))
    loss, tokens = sequence_loss(logits, TARGETS, PAD)
    assert tokens == 5
    assert float(loss) == pytest.approx(float(_smoothed_token_losses(logits, 0.0).sum()))


def test_training_loss_is_the_weighted_sum_of_every_term() -> None:
    output, gold = _output(baseline=-1.25)
    sample = output.reinforce
    assert sample is not None and output.coverage_loss is not None
    rewards = -_smoothed_token_losses(output.logits, 0.0).sum(1) / REAL.sum(1)  # (B,)
    advantage = (rewards + 1.25).unsqueeze(1)  # r_b - b
    cross_entropy = _smoothed_token_losses(output.logits, 0.1).sum()
    coverage = 0.5 * (output.coverage_loss * REAL).sum()
    alignment = 0.7 * -(gold * output.alignment_attention.log()).sum()
    policy = (advantage * sample.log_prob.detach() * REAL).sum()
    reinforce = -1.5 * policy - 0.2 * (sample.entropy * REAL).sum()
    loss, nll = training_loss(output, TARGETS, PAD, OPTIM, step=2, gold_alignment=gold)
    expected = cross_entropy + coverage + alignment + reinforce
    assert float(loss.detach()) == pytest.approx(float(expected), rel=1e-5)
    # beside it the nll: the cross entropy without smoothing and without the other terms
    assert not nll.requires_grad
    assert float(nll) == pytest.approx(float(_smoothed_token_losses(output.logits, 0.0).sum()))
    # REINFORCE's gradient reaches the sample's log-probability only: -lambda_r (r - b)
    loss.backward()
    grad = sample.log_prob.grad
    torch.testing.assert_close(grad, (-1.5 * advantage * REAL).float())


def test_the_loss_leaves_the_baseline_and_the_training_step_moves_it_once() -> None:
    output, _ = _output(baseline=-1.25)
    sample = output.reinforce
    assert sample is not None
    for _ in range(2):  # computing the loss twice changes nothing
        training_loss(output, TARGETS, PAD, OPTIM, step=2)
    assert float(sample.baseline) == -1.25
    move_baseline(output, TARGETS, PAD, OPTIM.reinforce_baseline_decay)
    rewards = -_smoothed_token_losses(output.logits, 0.0).sum(1) / REAL.sum(1)
    moved = 0.9 * -1.25 + 0.1 * float(rewards.mean())  # b <- decay b + (1 - decay) mean(r)
    assert float(sample.baseline) == pytest.approx(moved, rel=1e-6)


def test_coverage_counts_from_its_start_step_on() -> None:
    before = training_loss(_output(-1.0)[0], TARGETS, PAD, OPTIM, step=1).loss
    after = training_loss(_output(-1.0)[0], TARGETS, PAD, OPTIM, step=2).loss
    coverage = 0.5 * (_output(-1.0)[0].coverage_loss * REAL).sum()
    assert float((after - before).detach()) == pytest.approx(float(coverage), rel=1e-5)
    assert float(coverage) > 0


def test_the_first_baseline_is_the_batch_mean_reward() -> None:
    """A NaN baseline (no reward seen) makes the advantages centred and becomes mean(r)."""
    output, _ = _output(math.nan)
    rewards = -_smoothed_token_losses(output.logits, 0.0).sum(1) / REAL.sum(1)
    loss = training_loss(output, TARGETS, PAD, OPTIM, step=0).loss
    loss.backward()
    advantage = (rewards - rewards.mean()).unsqueeze(1)
    assert output.reinforce is not None
    grad = output.reinforce.log_prob.grad
    torch.testing.assert_close(grad, (-1.5 * advantage * REAL).float())
    move_baseline(output, TARGETS, PAD, OPTIM.reinforce_baseline_decay)
    baseline = float(output.reinforce.baseline)
    assert baseline == pytest.approx(float(rewards.mean()), rel=1e-6)


# ------------------------------------------------------------ label smoothing over a support
def test_smoothing_over_a_support_is_the_formula_on_hand_numbers() -> None:
    """Ids 0..5: PAD 0 and BOS 2 and another example's source word 5 are outside the example's
    support {1, 3, 4}; the target is its own source word 4."""
    probs = torch.tensor([[0.05, 0.25, 0.05, 0.2, 0.4, 0.05]])  # (T=1, V + K = 6)
    logits = probs.log().unsqueeze(0)  # (B=1, T=1, 6): log-probabilities, as a copy model's
    support = torch.tensor([[False, True, False, True, True, False]])  # (B, 6)
    targets = torch.tensor([[4]])
    expected = -0.9 * math.log(0.4) - 0.1 / 3 * (math.log(0.25) + math.log(0.2) + math.log(0.4))
    loss = token_loss_sum(logits, targets, PAD, 0.1, support)
    assert float(loss) == pytest.approx(expected, rel=1e-6)


def test_a_support_of_every_id_is_the_plain_label_smoothing() -> None:
    torch.manual_seed(0)
    logits = torch.randn(B, T, V)
    every = torch.ones(B, V, dtype=torch.bool)
    smoothed = token_loss_sum(logits, TARGETS, PAD, 0.1, every)
    assert float(smoothed) == pytest.approx(float(token_loss_sum(logits, TARGETS, PAD, 0.1)))


def test_plain_models_keep_cross_entropy_over_every_id() -> None:
    """No support: the loss is torch's label-smoothed cross entropy itself, bit for bit."""
    output = tiny_model("rnn", vocab_size=V_COPY + 2)(*COPY_SRC[:2], COPY_TGT_IN)
    assert output.support is None
    loss, nll = training_loss(output, COPY_TGT_OUT, PAD, OPTIM, step=0)
    flat = output.logits.reshape(-1, output.logits.size(-1))
    plain = F.cross_entropy(
        flat, COPY_TGT_OUT.reshape(-1), ignore_index=PAD, reduction="sum", label_smoothing=0.1
    )
    assert torch.equal(loss.detach(), plain.detach())
    unsmoothed = F.cross_entropy(flat, COPY_TGT_OUT.reshape(-1), ignore_index=PAD, reduction="sum")
    assert torch.equal(nll, unsmoothed.detach())


def test_without_smoothing_the_nll_is_the_cross_entropy_itself() -> None:
    output, _ = _output(baseline=-1.0)
    plain = OptimConfig(coverage_lambda=0.5)  # no smoothing; the other terms join the loss only
    loss, nll = training_loss(output, TARGETS, PAD, plain, step=0)
    assert torch.equal(nll, token_loss_sum(output.logits, TARGETS, PAD))
    assert not torch.equal(loss.detach(), nll)


# three sources (lengths 5, 3, 4) with 2, 0 and 1 words of their own past the vocabulary (ids
# V_COPY, V_COPY + 1 in that example's extended vocabulary), and targets that copy them
V_COPY = 12
COPY_SRC = (
    torch.tensor([[4, 1, 5, 1, 6], [7, 8, 9, PAD, PAD], [1, 10, 11, 4, PAD]]),
    torch.tensor([5, 3, 4]),
    torch.tensor([[4, V_COPY, 5, V_COPY + 1, 6], [7, 8, 9, PAD, PAD], [V_COPY, 10, 11, 4, PAD]]),
)
COPY_TGT_OUT = torch.tensor([[V_COPY + 1, 4, V_COPY, 3], [8, 3, PAD, PAD], [V_COPY, 11, 3, PAD]])
COPY_TGT_IN = torch.cat([torch.full((3, 1), 2), COPY_TGT_OUT[:, :-1]], dim=1).masked_fill(
    COPY_TGT_OUT == PAD, PAD
)
OWN_OOV = [2, 0, 1]


def _copy_loss(model, rows: list[int], support: bool = True) -> torch.Tensor:
    """The label-smoothed training loss of the examples `rows` as one padded batch."""
    src, lengths, src_ext = (part[rows] for part in COPY_SRC)
    width, steps = int(lengths.max()), int((COPY_TGT_OUT[rows] != PAD).sum(1).max())
    n_oov = max(OWN_OOV[row] for row in rows)
    tgt_in = COPY_TGT_IN[rows, :steps]
    output = model(src[:, :width], lengths, tgt_in, src_ext=src_ext[:, :width], n_oov=n_oov)
    if not support:  # the uniform part over every id of the batch's extended vocabulary
        return token_loss_sum(output.logits, COPY_TGT_OUT[rows, :steps], PAD, 0.1)
    return training_loss(output, COPY_TGT_OUT[rows, :steps], PAD, OPTIM, step=0).loss


def _gradients(model, loss: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad()
    loss.backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_a_padded_copy_batch_has_the_loss_and_gradients_of_its_examples_alone(family) -> None:
    """Label smoothing spreads over each example's own ids only: the other examples' source
    words (whose log-probability moves with p_gen) and PAD and BOS take none of it, so a batch
    and its examples one at a time agree; spread over the batch's whole extended vocabulary,
    the gradients do not."""
    model = tiny_model(family, vocab_size=V_COPY, copy="true")
    batched = _copy_loss(model, [0, 1, 2])
    alone = [_copy_loss(model, [row]) for row in range(3)]
    assert float(batched.detach()) == pytest.approx(float(sum(alone).detach()), rel=1e-5)
    grads = _gradients(model, batched)
    for name, grad in _gradients(model, sum(alone)).items():
        torch.testing.assert_close(grads[name], grad, atol=1e-5, rtol=1e-4)
    everywhere = _gradients(model, _copy_loss(model, [0, 1, 2], support=False))
    apart = _gradients(model, sum(_copy_loss(model, [row], support=False) for row in range(3)))
    assert not all(torch.allclose(everywhere[n], apart[n], atol=1e-5, rtol=1e-4) for n in apart)
