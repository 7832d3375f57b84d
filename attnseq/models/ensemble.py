"""An ensemble of trained models behind the one `Seq2Seq` interface (`EnsembleModel`), so that
every search, `attnseq eval` and `attnseq translate` use it as one model; `load_ensemble` loads
and checks its members.

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
from attnseq.models.seq2seq import DecoderState, Seq2Seq, Seq2SeqOutput, TeacherForcing


def mean_log_probs(logits: Sequence[Tensor]) -> Tensor:
    """The log of the mean of the members' probabilities, (..., V), from each member's logits
    (..., V), each member's next-token distribution from its own decoder state:

        log p(y | y_<t, x) = log (1/M) sum_m p_m(y | y_<t, x)
                           = logsumexp_m log p_m(y | y_<t, x) - log M

    the arithmetic mean of fairseq's `EnsembleModel.forward_decoder` (OpenNMT-py averages the
    log-probabilities instead). Decoders read these as logits (log_softmax leaves them as they
    are); a single member's logits come back as they are."""
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


def _mean(values: Sequence[Tensor | None]) -> Tensor | None:
    """The mean of the members' values when every member has one of one shape, else None."""
    first = values[0]
    if first is None or any(v is None or v.shape != first.shape for v in values):
        return None
    return torch.stack(list(values)).mean(dim=0)  # type: ignore[arg-type]


class EnsembleModel(Seq2Seq):
    """Members decoding together: each from its own decoder state (the ensemble's is their
    list), combined by `mean_log_probs`. Members share their special ids; copy members share
    their extended vocabularies (`load_ensemble` checks that all copy or none does).

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

    def teacher_forced(self, inputs: TeacherForcing) -> Seq2SeqOutput:
        """Every member's teacher-forced pass, combined field by field:

        - logits: the log of the mean probability (`mean_log_probs`), (B, T, V);
        - attention: the mean (the first member's when the shapes differ, `mean_attention`);
        - self-attention, alignment attention, p_gen and the coverage loss: the mean when every
          member has one of one shape, else none. The ensemble's distribution is the mean of
          the members', so its probability of generating is the mean p_gen;
        - support: the first member's (it depends on the inputs alone);
        - the REINFORCE sample and the segment attention: none. A sample drawn by one member
          is no sample of the ensemble (which never trains), and segment ids are integers of
          each member's own cut of the source.
        """
        outputs = [
            member(
                inputs.src,
                inputs.src_lengths,
                inputs.tgt_in,
                need_weights=inputs.need_weights,
                alignment=inputs.alignment,
                **inputs.copy,
            )
            for member in self.members
        ]
        return Seq2SeqOutput(
            logits=mean_log_probs([output.logits for output in outputs]),
            attention=mean_attention([output.attention for output in outputs]),
            encoder_self_attention=_mean([o.encoder_self_attention for o in outputs]),
            decoder_self_attention=_mean([o.decoder_self_attention for o in outputs]),
            alignment_attention=_mean([o.alignment_attention for o in outputs]),
            p_gen=_mean([o.p_gen for o in outputs]),
            coverage_loss=_mean([o.coverage_loss for o in outputs]),
            support=outputs[0].support,
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
    config (decoding settings, data) and tokenizers, and the smallest data.max_src_len of the
    members (sources are cut to it); the payload records the members under "ensemble".

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
