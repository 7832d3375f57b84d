"""Pointer-generator and coverage (See, Liu & Manning 2017, "Get To The Point: Summarization with
Pointer-Generator Networks", ACL; sections 2.2 and 2.3).

Generation probability (eq. 8), from the context vector c_t, the decoder state s_t and the
decoder input x_t:

    p_gen = sigmoid(w_c^T c_t + w_s^T s_t + w_x^T x_t + b_ptr)

Final distribution over the extended vocabulary (eq. 9): the target vocabulary (V ids) plus the
source words of the example that it lacks (ids V, V+1, ...; attnseq/data/extended_vocab.py):

    P(w) = p_gen P_vocab(w) + (1 - p_gen) sum_{i: w_i = w} a_i^t

An extended id has P_vocab(w) = 0, so only the copy term produces it; a word that is not in the
source has copy mass 0. The sum over the source positions holding w is a `scatter_add` of the
attention a^t into the extended vocabulary.

Computed in log space, so log P(w) stays finite and exact where P(w) > 0 even when one of the
two terms underflows:

    log P(w) = logaddexp(log p_gen + log_softmax(logits)(w),  log(1 - p_gen) + log(copy mass(w)))

with log p_gen = logsigmoid(z) and log(1 - p_gen) = logsigmoid(-z) for the logit z. The copy mass
is clamped to the smallest normal float before its log: an id with no copy mass and no vocabulary
probability (an extended slot that another example of the batch uses) gets log P = log(tiny)
(about -87 in float32) instead of -inf, which keeps cross entropy and label smoothing finite;
its gradient is zero. Everything is returned as log-probabilities in the place of logits: a
log_softmax of them (cross entropy, decoding) changes them by at most that tiny mass.

Coverage (section 2.3): the coverage vector is the sum of the attention of the previous decoder
steps, c^t = sum_{t' < t} a^{t'} (eq. 10; c^0 = 0), and the coverage loss of step t (eq. 12)

    covloss_t = sum_i min(a_i^t, c_i^t)

is added to the NLL with weight lambda (eq. 13): loss_t = -log P(w*_t) + lambda covloss_t.

Shapes: B batch, T target positions, S source positions, V target vocabulary, K = n_oov extra
(extended) ids, so V + K ids in all.
"""

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class GenerationProbability(nn.Module):
    """p_gen's logit z = w_c^T c_t + w_s^T s_t + w_x^T x_t + b_ptr (See et al. 2017, eq. 8).

    The three vectors w_c, w_s, w_x are one linear layer over the concatenation [c; s; x]
    (the same function); p_gen = sigmoid(z) is left to the caller, which needs log p_gen and
    log(1 - p_gen) as logsigmoid(z) and logsigmoid(-z) for the log-space mixture.

    Args:
        context_dim, state_dim, input_dim: sizes of c_t, s_t and x_t.
    """

    def __init__(self, context_dim: int, state_dim: int, input_dim: int) -> None:
        super().__init__()
        self.linear = nn.Linear(context_dim + state_dim + input_dim, 1)  # [w_c; w_s; w_x], b_ptr

    def forward(self, context: Tensor, state: Tensor, inputs: Tensor) -> Tensor:
        """context (..., Dc), state (..., Ds), inputs (..., Dx) -> logit z (...)."""
        return self.linear(torch.cat([context, state, inputs], dim=-1)).squeeze(-1)


def extended_log_probs(
    logits: Tensor, attention: Tensor, src_ext: Tensor, n_oov: int, p_gen_logit: Tensor
) -> Tensor:
    """log P(w) of the pointer-generator's final distribution (eq. 9), over V + n_oov ids.

    Args:
        logits: (B, [T,] V) unnormalised vocabulary scores (P_vocab = softmax(logits)).
        attention: (B, [T,] S) attention a^t over the source, rows summing to one (zero at
            padding).
        src_ext: (B, S) long, the extended-vocabulary id of every source position (padding may
            hold any id below V + n_oov: its attention is zero).
        n_oov: K, the number of extended ids past V.
        p_gen_logit: (B, [T]) logit z of p_gen.

    Returns:
        (B, [T,] V + n_oov) float32 log-probabilities; exp sums to one per row (up to the tiny
        clamp, see the module docstring).
    """
    vocab = logits.size(-1)
    attention = attention.float()
    log_vocab = torch.log_softmax(logits.float(), dim=-1)  # (B, [T,] V)
    z = p_gen_logit.float().unsqueeze(-1)  # (B, [T,] 1)
    generate = F.logsigmoid(z) + log_vocab  # log(p_gen P_vocab(w))
    # (B, S) -> (B, [1,] S) -> the attention's shape: the same ids for every target position
    index = src_ext.view(src_ext.size(0), *([1] * (attention.dim() - 2)), src_ext.size(1))
    index = index.expand_as(attention)
    mass = attention.new_zeros(*attention.shape[:-1], vocab + n_oov)  # (B, [T,] V + K)
    mass.scatter_add_(-1, index, attention)  # sum_{i: w_i = w} a_i
    copy = F.logsigmoid(-z) + torch.log(mass.clamp_min(torch.finfo(mass.dtype).tiny))
    in_vocab = torch.logaddexp(generate, copy[..., :vocab])  # (B, [T,] V)
    return torch.cat([in_vocab, copy[..., vocab:]], dim=-1)  # extended ids: copy term only


def coverage_loss(attention: Tensor, coverage: Tensor) -> Tensor:
    """covloss_t = sum_i min(a_i^t, c_i^t) (See et al. 2017, eq. 12).

    Args:
        attention: (B, [T,] S) attention of the step(s).
        coverage: same shape, c^t = the attention summed over the earlier steps.

    Returns:
        (B, [T]) the loss of every step (padding columns are zero in both, so add nothing).
    """
    return torch.minimum(attention, coverage).sum(dim=-1)


def teacher_forced_coverage(attention: Tensor) -> Tensor:
    """c^t = sum_{t' < t} a^{t'} for all T positions at once (eq. 10): (B, T, S) -> (B, T, S).

    An exclusive cumulative sum, c^0 = 0, c^1 = a^0, ..., shifted rather than `cumsum - a` so
    that it adds in the same order as a decoder accumulating step by step.
    """
    summed = torch.cumsum(attention, dim=1)  # (B, T, S): sum over t' <= t
    return torch.cat([torch.zeros_like(summed[:, :1]), summed[:, :-1]], dim=1)
