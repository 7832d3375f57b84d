"""Sampling decoding: every output token drawn from the model's next-token distribution reshaped
by a temperature and truncated to its top-k or its nucleus (`filter_log_probs`), through the
token-by-token loop of greedy decoding. Draws come from one seeded `torch.Generator` on the
decoding device (`sampling_generator`): the same inputs, batches, device and seed give the
same samples.

Shapes: B batch, R = B * num_samples rows, R_live rows still decoding, S source length,
V target vocabulary.
"""

from typing import Unpack

import torch
from torch import Tensor

from attnseq.config.schema import DecodingConfig
from attnseq.decoding.greedy import token_by_token
from attnseq.decoding.settings import NEG_INF, Hypothesis
from attnseq.models.seq2seq import CopyInputs, Seq2Seq


def sampling_generator(seed: int, device: torch.device) -> torch.Generator:
    """The random generator sampling draws from, seeded, on the decoding device."""
    return torch.Generator(device=device).manual_seed(seed)


def filter_log_probs(log_probs: Tensor, settings: DecodingConfig) -> Tensor:
    """`settings.temperature`, `top_k` and `top_p` applied to (R, V) log-probabilities, in that
    order (as Hugging Face `generate` and fairseq apply them): the renormalised
    log-probabilities of the distribution to draw from, -inf for the tokens cut off.

        temperature T > 0   p_T(y) = softmax(z / T), z the logits (Ackley, Hinton & Sejnowski
                            1985; Holtzman et al. 2020, section 3.3, eq. 4)
        top-k (k > 0)       the k most probable tokens V^(k), p'(y) = p_T(y) / sum_{V^(k)}
                            (Fan, Lewis & Dauphin 2018, "Hierarchical Neural Story
                            Generation", section 5.4); k = 0 keeps every token
        top-p (p)           the smallest set V^(p) of most probable tokens with
                            sum_{V^(p)} p_T >= p, renormalised (Holtzman, Buys, Du, Forbes &
                            Choi 2020, "The Curious Case of Neural Text Degeneration", ICLR,
                            section 3.1, eq. 2-3); the most probable token always stays
    """
    scaled = torch.log_softmax(log_probs / settings.temperature, dim=-1)  # softmax(z / T)
    if settings.top_k and settings.top_k < scaled.size(-1):
        kth = scaled.topk(settings.top_k, dim=-1).values[:, -1:]  # (R, 1) the k-th largest
        scaled = scaled.masked_fill(scaled < kth, NEG_INF)
    if settings.top_p < 1:
        scaled = _nucleus(torch.log_softmax(scaled, dim=-1), settings.top_p)
    return torch.log_softmax(scaled, dim=-1)


def _nucleus(log_probs: Tensor, top_p: float) -> Tensor:
    """Keep the smallest set of most probable tokens whose mass reaches `top_p` (Holtzman et
    al. 2020, eq. 2): a token stays when the mass of the tokens ranked above it is < top_p."""
    sorted_log_probs, order = log_probs.sort(dim=-1, descending=True)  # (R, V)
    probs = sorted_log_probs.exp()
    mass_before = probs.cumsum(dim=-1) - probs  # (R, V) mass ranked strictly above
    cut = mass_before >= top_p
    cut[:, 0] = False  # the most probable token always stays
    return log_probs.masked_fill(cut.scatter(1, order, cut), NEG_INF)


@torch.no_grad()
def sample_decode(
    model: Seq2Seq,
    src: Tensor,
    src_lengths: Tensor,
    max_lengths: Tensor,
    settings: DecodingConfig,
    generator: torch.Generator | None = None,
    need_weights: bool = False,
    **copy_inputs: Unpack[CopyInputs],
) -> list[list[Hypothesis]]:
    """Draw `settings.num_samples` outputs for every input, each independently (the input's row
    repeated). A sample's `score` is the sum of the model's own log-probabilities of its tokens
    (EOS included when drawn), without temperature or truncation, so that samples and beam
    outputs are scored alike.

    Args:
        src: (B, S) source ids; src_lengths: (B,); max_lengths: (B,) output limits (tokens,
            EOS not counted).
        settings: temperature, top_k, top_p, num_samples and seed shape the draws; min_length
            (no EOS before this many tokens), no_repeat_ngram (block repeated n-grams) and
            eos_at_limit (EOS after the limit) and forced_first_token hold.
        generator: where the draws come from (one made from `settings.seed` if None).
        **copy_inputs: copy models: src_ext (B, S) and n_oov.

    Returns:
        per input, its `num_samples` hypotheses in the order drawn.
    """
    n, device = settings.num_samples, src.device
    if generator is None:
        generator = sampling_generator(settings.seed, device)
    rows = torch.arange(src.size(0), device=device).repeat_interleave(n)  # (R,)
    if copy_inputs.get("src_ext") is not None:
        copy_inputs = {**copy_inputs, "src_ext": copy_inputs["src_ext"][rows]}
    eos_id = model.eos_id

    def draw(log_probs: Tensor) -> Tensor:
        """One token per row (R_live,) from the filtered distribution of its (R_live, V)."""
        drawn = filter_log_probs(log_probs, settings).exp().nan_to_num()  # (R_live, V)
        drawn[drawn.sum(dim=-1) == 0, eos_id] = 1.0  # all forbidden: stop the row
        return torch.multinomial(drawn, 1, generator=generator).squeeze(1)

    flat = token_by_token(
        model,
        src[rows],
        src_lengths.to(device)[rows],
        max_lengths.to(device)[rows],
        draw,
        need_weights,
        copy_inputs,
        settings.min_length,
        settings.no_repeat_ngram,
        settings.eos_at_limit,
        settings.forced_first_token,
    )
    return [flat[start : start + n] for start in range(0, len(flat), n)]
