"""An ensemble of trained models behind the one `Seq2Seq` interface, so that greedy decoding,
beam search, sampling, `attnseq eval` and `attnseq translate` use it as they use one model.

Combination. At every step each member m gives its next-token distribution p_m(y | y_<t, x)
from its own decoder state (RNN hidden state, transformer key/value cache; the ensemble's state
is the list of the members' states, and `reorder_state` reorders each). The ensemble's
distribution is the mean of the members' probabilities,

    log p(y | y_<t, x) = log (1/M) sum_m p_m(y | y_<t, x)
                       = logsumexp_m log p_m(y | y_<t, x) - log M,

the arithmetic mean that fairseq's `EnsembleModel.forward_decoder` (sequence_generator.py)
computes; OpenNMT-py's ensemble takes the mean of the log-probabilities instead (a normalised
geometric mean). The ensemble returns these log-probabilities where a model returns logits:
log_softmax leaves normalised log-probabilities as they are, so every decoder reads them
unchanged. A one-member ensemble returns its member's logits exactly.

Attention: the mean of the members' cross-attention when all have the same shape (same family
and layout: (B, S) or (B, L, H, S) per step), otherwise the first member's.
Copy models (pointer-generators) already return log-probabilities over their extended
vocabulary; all members copy or none does (`load_ensemble` checks), so their extended
vocabularies agree.

The teacher-forced `forward` combines the same way, so `attnseq eval`'s loss and perplexity are
those of the ensemble.

`load_ensemble` loads the members from their checkpoints and refuses (UserError, exit 2) a
member whose tokenizers (hence vocabularies and special ids), task or copy setting differ from
the first's; the first checkpoint's config (decoding settings, data) serves the ensemble, with
the smallest `data.max_src_len` of the members (sources are cut to it).

Shapes: B batch, S source length, T target length, V target vocabulary (V + n_oov for copy
models), M members.
"""

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from attnseq.errors import UserError
from attnseq.models.loading import TrainedModel, load_trained_model
from attnseq.models.seq2seq import DecoderState, Seq2Seq, Seq2SeqOutput


def mean_log_probs(logits: Sequence[Tensor]) -> Tensor:
    """log of the mean of the members' probabilities, (..., V), from each member's logits
    (..., V); a single member's logits come back as they are."""
    if len(logits) == 1:
        return logits[0]
    stacked = torch.stack([torch.log_softmax(item.float(), dim=-1) for item in logits])
    return torch.logsumexp(stacked, dim=0) - math.log(len(logits))  # (..., V)


def mean_attention(weights: Sequence[Tensor | None]) -> Tensor | None:
    """The mean of the members' attention when all have it with one shape, else the first's."""
    first = weights[0]
    if first is None or any(w is None or w.shape != first.shape for w in weights):
        return first
    return torch.stack(list(weights)).mean(dim=0)  # type: ignore[arg-type]


class EnsembleModel(Seq2Seq):
    """Members decoding together (module docstring); members share their special ids.

    Args:
        members: trained models over the same vocabularies, in eval mode.
    """

    def __init__(self, members: Sequence[Seq2Seq]) -> None:
        if not members:
            raise ValueError("an ensemble needs at least one model")
        first = members[0]
        super().__init__(first.pad_id, first.bos_id, first.eos_id)
        ids = {(m.pad_id, m.bos_id, m.eos_id) for m in members}
        if len(ids) != 1:
            raise ValueError(f"ensemble members disagree on (pad, bos, eos) ids: {sorted(ids)}")
        self.members = nn.ModuleList(members)

    @property
    def has_attention(self) -> bool:
        return all(member.has_attention for member in self.members)

    def forward(  # type: ignore[override]
        self,
        src: Tensor,
        src_lengths: Tensor,
        tgt_in: Tensor,
        need_weights: bool = False,
        **inputs: Any,
    ) -> Seq2SeqOutput:
        """Teacher-forced pass of every member; log-probabilities (B, T, V) as logits, mean
        attention, and the mean of every extra all members return with one shape."""
        outputs = [
            member(src, src_lengths, tgt_in, need_weights=need_weights, **inputs)
            for member in self.members
        ]
        extras = {
            key: torch.stack([output.extras[key] for output in outputs]).mean(dim=0)
            for key, value in outputs[0].extras.items()
            if all(key in o.extras and o.extras[key].shape == value.shape for o in outputs)
        }
        return Seq2SeqOutput(
            mean_log_probs([output.logits for output in outputs]),
            mean_attention([output.attention for output in outputs]),
            extras,
        )

    def start_decoding(self, src: Tensor, src_lengths: Tensor, **copy_inputs: Any) -> DecoderState:
        """Each member's own decoder state, in a list."""
        return [member.start_decoding(src, src_lengths, **copy_inputs) for member in self.members]

    def decode_step(
        self, prev_tokens: Tensor, state: DecoderState, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None, DecoderState]:
        """Every member steps from its own state; log-probabilities (B, V) as logits."""
        logits, weights, states = [], [], []
        for member, member_state in zip(self.members, state, strict=True):
            step_logits, step_weights, new_state = member.decode_step(
                prev_tokens, member_state, need_weights=need_weights
            )
            logits.append(step_logits)
            weights.append(step_weights)
            states.append(new_state)
        return mean_log_probs(logits), mean_attention(weights), states

    def reorder_state(self, state: DecoderState, index: Tensor) -> DecoderState:
        """Each member reorders its own state."""
        return [
            member.reorder_state(member_state, index)
            for member, member_state in zip(self.members, state, strict=True)
        ]


def load_ensemble(paths: Sequence[Path], overrides: list[str] | None = None) -> TrainedModel:
    """The checkpoints at `paths` as one model (one path: that model itself), with the first's
    config and tokenizers; the payload records the members under "ensemble".

    Raises:
        UserError: a checkpoint fails to load, or a member cannot join the first (its
            tokenizers, task or copy setting differ).
    """
    members = [load_trained_model(path, overrides) for path in paths]
    first = members[0]
    if len(members) == 1:
        return first
    for path, member in zip(paths[1:], members[1:], strict=True):
        _check_joinable(paths[0], first, path, member)
    # every member must read the source: the shortest source any of them was trained with
    first.cfg.data.max_src_len = min(member.cfg.data.max_src_len for member in members)
    model = EnsembleModel([member.model for member in members]).eval()
    payload = {**first.payload, "ensemble": [str(Path(path).resolve()) for path in paths]}
    return TrainedModel(model, first.cfg, first.tokenizers, payload)


def _check_joinable(
    first_path: Path, first: TrainedModel, path: Path, member: TrainedModel
) -> None:
    """UserError unless `member` reads and writes what `first` does."""
    differences = []
    if member.tokenizers.state() != first.tokenizers.state():
        differences.append("tokenizers (vocabularies)")
    if member.cfg.data.task != first.cfg.data.task:
        differences.append(f"tasks ({member.cfg.data.task.value} vs {first.cfg.data.task.value})")
    if member.cfg.model.copy != first.cfg.model.copy:
        differences.append("copy settings (model.copy): all members copy or none does")
    if differences:
        raise UserError(
            f"{path} cannot join an ensemble with {first_path}: their "
            f"{' and '.join(differences)} differ; an ensemble's checkpoints must share "
            "tokenizers and task"
        )
