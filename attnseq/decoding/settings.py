"""What decoding is asked for and what it returns, and the pieces both searches share.

`DecodingSettings` says how to decode (beam size, output limits, length penalty, n-best,
constraints, or sampling: `SamplingSettings`); `Hypothesis` is one decoded output.
`gnmt_length_penalty` is the lp(Y) of the GNMT length-normalised score
s(Y, X) = log P(Y | X) / lp(Y) (Wu et al. 2016, eq. 14) that outputs are ranked by
(beam_search.py).

Both searches give PAD and BOS probability zero (`never_pad_or_bos`): neither is ever a target.

Shapes: B batch, R rows of the live batch, V target vocabulary.
"""

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, overload

from torch import Tensor

from attnseq.models.seq2seq import CopyInputs, DecoderState, Seq2Seq

if TYPE_CHECKING:
    from attnseq.config.schema import TrainerConfig

NEG_INF = float("-inf")

# the settings that a run's TrainerConfig holds under the same name (min_length is its
# min_output_length; nbest is a choice of eval and translate only)
_TRAINER_KEYS = (
    "beam",
    "length_penalty",
    "max_output_ratio",
    "max_output_extra",
    "no_repeat_ngram",
    "coverage_penalty",
)


# The lowest sampling temperature: below it logits / T overflow float32 (3.4e38) for logits of
# ordinary size and the draws turn to NaN; at it, sampling is already greedy decoding for any
# two logits 1e-4 apart (their probabilities differ by a factor e^100).
MIN_TEMPERATURE = 1e-6


@dataclass(frozen=True)
class SamplingSettings:
    """How to sample (decoding/sampling.py gives the formulas).

    temperature: T >= MIN_TEMPERATURE, finite; 1 leaves the distribution as the model gives it.
    top_k: keep the k most probable tokens, 0 = all.
    top_p: nucleus mass p in (0, 1]; 1 = all.
    num_samples: outputs per input.
    seed: seeds the generator the draws come from.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    num_samples: int = 1
    seed: int = 0

    def problems(self) -> list[str]:
        """What is out of range, one phrase each (empty when all is valid)."""
        found = []
        if not MIN_TEMPERATURE <= self.temperature < math.inf:
            found.append(
                f"temperature must be >= {MIN_TEMPERATURE:g} and finite, got {self.temperature}"
            )
        if self.top_k < 0:
            found.append(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if not 0 < self.top_p <= 1:
            found.append(f"top_p must be in (0, 1], got {self.top_p}")
        if self.num_samples < 1:
            found.append(f"num_samples must be >= 1, got {self.num_samples}")
        return found

    def name(self) -> str:
        """'sample-t0.7-k10-p0.9-n1-seed0': every setting, for result folder names."""
        return (
            f"sample-t{self.temperature:g}-k{self.top_k}-p{self.top_p:g}"
            f"-n{self.num_samples}-seed{self.seed}"
        )


@dataclass
class DecodingSettings:
    """How to decode (validation, test, `attnseq eval`, `attnseq translate`).

    beam: beam size K; 1 with nbest=1 (and no constraints) is greedy decoding.
    max_output_ratio, max_output_extra: at most ratio * source length + extra output tokens.
    length_penalty: GNMT alpha in lp = ((5 + |Y|) / 6) ^ alpha (Wu et al. 2016, eq. 14).
    nbest: hypotheses returned per input (<= beam), best first.
    min_length: EOS is blocked until this many tokens were produced.
    no_repeat_ngram: forbid any n-gram of this size to occur twice in an output (0 = off).
    coverage_penalty: GNMT beta of the coverage penalty (Wu et al. 2016, eq. 14; 0 = off).
    sampling: draw the outputs at random (sampling.py) instead of searching; then beam and
        nbest are 1, `sampling.num_samples` outputs come per input, min_length and
        no_repeat_ngram still apply and the coverage penalty plays no part (it ranks beams).
    """

    beam: int = 1
    max_output_ratio: float = 1.5
    max_output_extra: int = 10
    length_penalty: float = 1.0
    nbest: int = 1
    min_length: int = 0
    no_repeat_ngram: int = 0
    coverage_penalty: float = 0.0
    sampling: SamplingSettings | None = None

    @classmethod
    def from_trainer(cls, trainer: "TrainerConfig") -> "DecodingSettings":
        """The trainer.* decoding keys of a run's config: how its validation, test evaluation
        and, by default, `attnseq eval` / `attnseq translate` decode."""
        same_name = {name: getattr(trainer, name) for name in _TRAINER_KEYS}
        return cls(min_length=trainer.min_output_length, **same_name)

    def check(self) -> None:
        """Raise ValueError naming every setting that is out of range."""
        problems = []
        if self.beam < 1:
            problems.append(f"beam must be >= 1, got {self.beam}")
        if not 1 <= self.nbest <= max(self.beam, 1):
            problems.append(f"nbest must be between 1 and beam ({self.beam}), got {self.nbest}")
        if self.min_length < 0:
            problems.append(f"min_length must be >= 0, got {self.min_length}")
        if self.no_repeat_ngram < 0:
            problems.append(f"no_repeat_ngram must be >= 0, got {self.no_repeat_ngram}")
        if self.max_output_ratio < 0 or self.max_output_extra < 0:
            problems.append("max_output_ratio and max_output_extra must be >= 0")
        if self.coverage_penalty < 0:
            problems.append(f"coverage_penalty must be >= 0, got {self.coverage_penalty}")
        if self.sampling is not None:
            problems += self.sampling.problems()
            if self.beam != 1 or self.nbest != 1:
                problems.append("sampling draws its outputs: it takes beam 1 and nbest 1")
        if problems:
            raise ValueError("; ".join(problems))

    def with_sampling(self, sampling: SamplingSettings | None) -> "DecodingSettings":
        """These settings drawing their outputs as `sampling` says (beam and nbest 1); None
        leaves them as they are."""
        if sampling is None:
            return self
        return replace(self, beam=1, nbest=1, sampling=sampling)

    @property
    def outputs_per_input(self) -> int:
        """How many outputs `decode` returns per input: nbest, or the number of samples."""
        return self.nbest if self.sampling is None else self.sampling.num_samples

    @property
    def is_greedy(self) -> bool:
        """Greedy decoding gives exactly what these settings ask for."""
        return (
            self.sampling is None
            and self.beam == 1
            and self.nbest == 1
            and self.min_length == 0
            and not self.no_repeat_ngram
            and not self.coverage_penalty
        )


@dataclass
class Hypothesis:
    """One decoded output.

    tokens: target ids without BOS and EOS.
    score: raw model score, the sum of the token log-probabilities (EOS included when produced).
    attention: cross-attention while producing it, (T_out, S) for RNNs or (L, H, T_out, S) for
        transformers, over the real source positions only; None if not requested. T_out is the
        number of scored positions: len(tokens), plus one for EOS when it was produced.
    normalized_score: score / lp(T_out) (+ cp with a coverage penalty), the GNMT-normalised
        score beam search ranks by; None from `greedy_decode` (which does not rank), filled in
        by `decode`.

    Copy models: tokens may hold ids >= V, source words outside the target vocabulary
    (`Tokenizer.decode_extended` writes them out).
    """

    tokens: list[int]
    score: float
    attention: Tensor | None = None
    normalized_score: float | None = None


def max_output_lengths(src_lengths: Tensor, ratio: float, extra: int) -> Tensor:
    """Per-sentence output limit: ratio * source length + extra, as a (B,) long tensor."""
    return (src_lengths.float() * ratio).long() + extra


@overload
def gnmt_length_penalty(lengths: int, alpha: float) -> float: ...
@overload
def gnmt_length_penalty(lengths: Tensor, alpha: float) -> Tensor: ...
def gnmt_length_penalty(lengths: int | Tensor, alpha: float) -> float | Tensor:
    """lp(Y) = ((5 + |Y|) / 6) ^ alpha (Wu et al. 2016, eq. 14): of one length |Y| (in Python
    floats), or elementwise over a tensor of lengths (float32)."""
    if isinstance(lengths, Tensor):
        lengths = lengths.float()
    return ((5.0 + lengths) / 6.0) ** alpha


def start_decoding(
    model: Seq2Seq, src: Tensor, src_lengths: Tensor, copy_inputs: CopyInputs
) -> DecoderState:
    """`model.start_decoding`, with the extended source for copy models (plain models take
    no copy inputs)."""
    if copy_inputs.get("src_ext") is None:
        return model.start_decoding(src, src_lengths)
    return model.start_decoding(src, src_lengths, **copy_inputs)  # type: ignore[call-arg]


def never_pad_or_bos(log_probs: Tensor, model: Seq2Seq) -> Tensor:
    """Give PAD and BOS probability zero in (R, V) log-probabilities, in place.

    Neither is ever a target, so a trained model gives them almost nothing; an undertrained one
    may not, and an output of invisible tokens (text decoding drops them) helps nobody.
    """
    for token in (model.pad_id, model.bos_id):
        if token != model.eos_id:
            log_probs[:, token] = NEG_INF
    return log_probs
