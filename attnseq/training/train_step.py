"""One optimizer update: forward, loss (normalised by the real target tokens of the global batch,
accumulated micro-batches included), backward, clipping, the finite check, the step."""

import contextlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnseq.attention.hard import set_temperature
from attnseq.config.schema import OptimConfig, TrainConfig
from attnseq.data.batching import Batch
from attnseq.data.loader import TokenCounts
from attnseq.models.objective import BatchLoss, move_baseline, training_loss
from attnseq.models.seq2seq import AlignmentHead, Seq2Seq
from attnseq.training.distributed import WorldInfo, all_reduce_sum, all_reduce_tensor
from attnseq.training.precision import MixedPrecision


@dataclass
class UpdateParts:
    """What one update touches.

    module: what the forward pass runs through: the model, or a DDP and/or torch.compile
        wrapper around it.
    model: the bare model (its pad id; the parameters clipped and checked).
    optim: the objective's weights (models/objective.py), the Gumbel temperature schedule and
        `clip_norm`.
    alignment: guided alignment: the attention the forward pass returns for the loss (None:
        off, the forward pass is the plain one).
    """

    module: nn.Module
    model: Seq2Seq
    optimizer: torch.optim.Optimizer
    precision: MixedPrecision
    optim: OptimConfig
    world: WorldInfo
    alignment: AlignmentHead | None = None


class StepOutcome:
    """What an update did. Its numbers stay on the model's device until they are read: the
    first read of an outcome's numbers waits for the device to finish that update, so the
    training loop reads them a batch of updates at a time (`read_all`, one wait for all).

    loss: per real target token of the (global) batch; nan when some rank's was not finite.
    grad_norm: the global gradient norm before clipping; inf or nan when not finite.
    tokens: (source, target, padded positions) of the global batch (known on the host).
    nll: the negative log-likelihood per real target token (`BatchLoss.nll`), read with the
        loss.
    applied: the loss and the gradient norm were finite, so the optimizer stepped.
    loss_scale: after an fp16 overflow (finite loss, non-finite scaled gradients), the lowered
        loss scale; else None.
    """

    def __init__(
        self,
        loss: Tensor,
        grad_norm: Tensor,
        tokens: tuple[float, float, float],
        scale: Tensor | None = None,
        nll: Tensor | None = None,
    ) -> None:
        self.tokens = tokens
        self._tensors = (loss, grad_norm, scale, loss if nll is None else nll)
        self._values: tuple[float, float, float | None, float] | None = None

    @staticmethod
    def read_all(outcomes: Sequence["StepOutcome"]) -> None:
        """Read the numbers of every outcome not read yet, with one host-device
        synchronisation for all of them."""
        unread = [outcome for outcome in outcomes if outcome._values is None]
        if not unread:
            return
        rows = []
        for outcome in unread:
            loss, norm, scale, nll = outcome._tensors
            scale = torch.full_like(loss, math.nan) if scale is None else scale
            rows.append(torch.stack([loss.float(), norm.float(), scale.float(), nll.float()]))
        values = torch.stack(rows).tolist()
        for outcome, (loss, norm, scale, nll) in zip(unread, values, strict=True):
            has_scale = outcome._tensors[2] is not None
            outcome._values = (loss, norm, scale if has_scale else None, nll)

    def _read(self) -> tuple[float, float, float | None, float]:
        if self._values is None:
            StepOutcome.read_all([self])
        assert self._values is not None
        return self._values

    @property
    def loss(self) -> float:
        return self._read()[0]

    @property
    def grad_norm(self) -> float:
        return self._read()[1]

    @property
    def nll(self) -> float:
        return self._read()[3]

    @property
    def applied(self) -> bool:
        loss, norm, _, _ = self._read()
        return math.isfinite(loss) and math.isfinite(norm)

    @property
    def loss_scale(self) -> float | None:
        loss, norm, scale, _ = self._read()
        overflowed = scale is not None and math.isfinite(loss) and not math.isfinite(norm)
        return scale if overflowed else None

    @property
    def problem(self) -> str:
        """Why a skipped update was skipped ("" when applied or after an fp16 overflow)."""
        if self.applied or self.loss_scale is not None:
            return ""
        return (
            f"loss {self.loss}"
            if not math.isfinite(self.loss)
            else f"gradient norm {self.grad_norm}"
        )

    def __repr__(self) -> str:
        if self._values is None:
            return f"StepOutcome(tokens={self.tokens}, not read yet)"
        loss, norm, scale, nll = self._values
        return (
            f"StepOutcome(loss={loss}, grad_norm={norm}, tokens={self.tokens}, scale={scale}, "
            f"nll={nll})"
        )


def train_step(
    parts: UpdateParts, micro_batches: Sequence[tuple[Batch, TokenCounts]], step: int
) -> StepOutcome:
    """One update over `micro_batches` (one batch, or `optim.accumulate` of them) at update
    number `step` (0-based, for the coverage and temperature schedules)."""
    counts = TokenCounts(*(sum(c[field] for _, c in micro_batches) for field in range(3)))
    tokens = global_tokens(counts, parts.world)
    parts.module.train()  # DDP's wrapper and the model inside
    set_temperature(parts.model, gumbel_temperature(parts.optim, step))  # hard attention's tau
    n_tgt = max(tokens[1], 1.0)
    # DDP's average over the R ranks turns R * sum_r / N into sum / N
    scale = (parts.world.world_size if parts.world.distributed else 1.0) / n_tgt
    parts.optimizer.zero_grad(set_to_none=True)
    micro_losses, micro_nlls = [], []
    for index, (batch, _) in enumerate(micro_batches):
        last = index == len(micro_batches) - 1
        with contextlib.nullcontext() if last else _without_gradient_sync(parts.module):
            micro = _summed_loss(parts, batch, step)
            parts.precision.backward(micro.loss * scale)
        micro_losses.append(micro.loss.detach().float())
        micro_nlls.append(micro.nll.float())
    loss_sum = torch.stack(micro_losses).sum()
    nll_sum = torch.stack(micro_nlls).sum()
    parts.precision.unscale(parts.optimizer)  # fp16: clip and check the true gradients
    norm = _clip_gradients(parts.model, parts.optim.clip_norm)
    if parts.world.distributed:
        loss, nll = _global_per_token(loss_sum, nll_sum, n_tgt)
    else:
        loss, nll = loss_sum / n_tgt, nll_sum / n_tgt
    # Decided on the device: the host queues the next update without waiting for this one.
    apply = torch.isfinite(loss) & torch.isfinite(norm)
    parts.precision.step(parts.optimizer, apply)
    return StepOutcome(loss.detach(), norm.detach(), tokens, parts.precision.scale(), nll)


def _summed_loss(parts: UpdateParts, batch: Batch, step: int) -> BatchLoss:
    """The training loss of one (micro-)batch and its nll, summed over its target tokens."""
    guided = parts.alignment is not None and batch.alignment is not None
    inputs = {**batch.copy_inputs(), **({"alignment": parts.alignment} if guided else {})}
    pad_id = parts.model.pad_id
    with parts.precision.autocast():
        output = parts.module(batch.src, batch.src_lengths, batch.tgt_in, **inputs)
        loss = training_loss(output, batch.tgt_out, pad_id, parts.optim, step, batch.alignment)
        if output.reinforce is not None:  # REINFORCE: the baseline follows this batch's rewards
            move_baseline(output, batch.tgt_out, pad_id, parts.optim.reinforce_baseline_decay)
    return loss


def _without_gradient_sync(module: nn.Module) -> contextlib.AbstractContextManager[None]:
    """DDP: no gradient all-reduce in this block (a micro-batch before the last); a plain
    module, or torch.compile's wrapper around one: nothing to skip."""
    inner = getattr(module, "_orig_mod", module)  # torch.compile keeps the module it wraps
    no_sync = getattr(inner, "no_sync", None)
    return no_sync() if no_sync is not None else contextlib.nullcontext()


def global_tokens(counts: TokenCounts, world: WorldInfo) -> tuple[float, float, float]:
    """(source, target, padded) token counts summed over the data-parallel ranks."""
    totals = [float(counts.src), float(counts.tgt), float(counts.padded)]
    if world.distributed:  # the global token count normalises the loss, so it comes first
        totals = all_reduce_sum(totals)
    return totals[0], totals[1], totals[2]


def _clip_gradients(model: nn.Module, clip_norm: float) -> Tensor:
    """Clip to `clip_norm` (0: no clipping); the total norm before clipping."""
    if clip_norm > 0:
        return torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    return torch.nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None])


def _global_per_token(loss_sum: Tensor, nll_sum: Tensor, n_tgt: float) -> tuple[Tensor, Tensor]:
    """The global loss and nll per target token, the same on every rank (0-d, on the device),
    in one all-reduce; the loss is nan when some rank's loss was not finite. The gradients,
    and so their norm, already agree (DDP's all-reduce spreads a rank's non-finite gradient to
    all)."""
    local = loss_sum.detach().double()
    finite = torch.isfinite(local)
    total, bad, nll = all_reduce_tensor(
        torch.stack([torch.where(finite, local, 0.0), (~finite).double(), nll_sum.double()])
    )
    return torch.where(bad > 0, math.nan, total / n_tgt), nll / n_tgt


def gumbel_temperature(optim: OptimConfig, step: int) -> float:
    """tau at update `step`: the exponential anneal of Jang et al. 2017 (section 4.1, tau
    annealed towards a floor) from `optim.gumbel_tau_start` to `optim.gumbel_tau_end` over
    `optim.gumbel_anneal_steps` updates, then constant:

        tau(step) = tau_start (tau_end / tau_start) ^ min(1, step / anneal_steps)
    """
    start, end, steps = optim.gumbel_tau_start, optim.gumbel_tau_end, optim.gumbel_anneal_steps
    if steps == 0:
        return end
    progress = min(1.0, step / steps)
    return math.exp(math.log(start) + progress * (math.log(end) - math.log(start)))


def supervised_attention(cfg: TrainConfig) -> AlignmentHead | None:
    """The attention guided alignment supervises (`model.alignment_layer`/`alignment_head`),
    or None when `optim.alignment_lambda` is 0 (the forward pass then stays the plain one)."""
    if cfg.optim.alignment_lambda == 0:
        return None
    return AlignmentHead(cfg.model.alignment_layer, cfg.model.alignment_head)
