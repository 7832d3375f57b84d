"""How much each attention head matters (Michel et al. 2019, "Are Sixteen Heads Really Better than
One?", NeurIPS), by two measures over the teacher-forced loss of a split:

- gradient (section 4.1, eq. 2): the head importance score

      I_h = E_x | dL(x) / d xi_h |

  with xi the head mask (attnseq/models/head_mask.py) at its current value, L the mean token
  cross entropy (no label smoothing). As in the authors' code the expectation runs over batches:
  I_h = (1 / #batches) sum_b |dL_b / d xi_h|, L_b the mean token loss of batch b. Section 4.1
  normalizes the scores by layer with the l2 norm: I_h / ||I_layer||_2, per attention sublayer
  (kind and layer), so that layers compare on one scale;
- ablation (section 2, Table 1): the direct loss increase L(xi with head h set to 0) - L(xi)
  when that head alone is masked, every other head as it is.

The model runs in eval mode (no dropout), so both measures are deterministic. Heads the model
already masks get an ablation score of 0 (removing them changes nothing).

Shapes: every score is kind -> (L, H), L the layers of that stack, H heads.
"""

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from attnseq.data.batching import Batch
from attnseq.models.head_mask import KINDS, attention_sites, get_head_masks
from attnseq.models.loss_terms import sequence_loss
from attnseq.models.seq2seq import Seq2Seq

MEASURES = ("gradient", "ablation")


@dataclass
class HeadImportance:
    """Both measures on one split.

    base_loss: mean token NLL with the model's masks as they are.
    gradient: raw E|dL/dxi_h|; gradient_normalized: divided by each sublayer's l2 norm.
    ablation: loss increase when the head alone is masked.
    masks: the model's head masks (1 kept, 0 pruned).
    """

    split: str
    batches: int
    tokens: int
    base_loss: float
    gradient: dict[str, Tensor]
    gradient_normalized: dict[str, Tensor]
    ablation: dict[str, Tensor]
    masks: dict[str, Tensor]
    extra: dict[str, Any] = field(default_factory=dict)

    def scores(self, measure: str) -> dict[str, Tensor]:
        """The scores pruning ranks by: normalized gradient or ablation."""
        return self.gradient_normalized if measure == "gradient" else self.ablation

    def to_json(self) -> dict[str, Any]:
        """Plain lists, kind -> [layer][head]."""

        def lists(scores: dict[str, Tensor]) -> dict[str, list[list[float]]]:
            return {kind: scores[kind].tolist() for kind in KINDS if scores[kind].numel()}

        return {
            "split": self.split,
            "batches": self.batches,
            "tokens": self.tokens,
            "base_loss": self.base_loss,
            "gradient": lists(self.gradient),
            "gradient_normalized": lists(self.gradient_normalized),
            "ablation": lists(self.ablation),
            "masks": lists(self.masks),
            **self.extra,
        }


def batch_loss(model: Seq2Seq, batch: Batch) -> tuple[Tensor, int]:
    """Summed token NLL of one batch (teacher-forced) and its number of target tokens."""
    output = model(batch.src, batch.src_lengths, batch.tgt_in, **batch.copy_inputs())
    return sequence_loss(output.logits, batch.tgt_out, model.pad_id)


def mean_loss(model: Seq2Seq, batches: Iterable[Batch]) -> tuple[float, int]:
    """Mean token NLL over the batches (what `Evaluator.loss` reports) and the token count."""
    total, tokens = 0.0, 0
    with torch.no_grad():
        for batch in batches:
            loss_sum, count = batch_loss(model, batch)
            total += float(loss_sum)
            tokens += count
    return total / max(tokens, 1), tokens


def gradient_importance(model: Seq2Seq, batches: Sequence[Batch]) -> dict[str, Tensor]:
    """E_b |dL_b / d xi_h| (section 4.1, eq. 2), kind -> (L, H); L_b the batch's mean token loss.

    Only the head masks take gradients (the weights are frozen for the pass), and the model's
    requires_grad flags and masks are as before afterwards.
    """
    sites = attention_sites(model)
    masks = [site.attention.head_mask for site in sites]
    frozen = [(param, param.requires_grad) for param in model.parameters()]
    totals = [torch.zeros_like(mask) for mask in masks]
    model.eval()
    try:
        for param, _ in frozen:
            param.requires_grad_(False)
        for mask in masks:
            mask.requires_grad_(True)
        for batch in batches:
            loss_sum, tokens = batch_loss(model, batch)
            grads = torch.autograd.grad(loss_sum / max(tokens, 1), masks, allow_unused=True)
            for total, grad in zip(totals, grads, strict=True):
                if grad is not None:
                    total += grad.abs()
    finally:
        for mask in masks:
            mask.requires_grad_(False)
        for param, flag in frozen:
            param.requires_grad_(flag)
    scores = {kind: [] for kind in KINDS}  # type: dict[str, list[Tensor]]
    for site, total in zip(sites, totals, strict=True):
        scores[site.kind].append(total.float().cpu() / max(len(batches), 1))
    return {kind: _stack(rows, model) for kind, rows in scores.items()}


def normalize_per_layer(scores: dict[str, Tensor]) -> dict[str, Tensor]:
    """I_h / ||I_layer||_2 per sublayer (section 4.1); a layer of zeros stays zero."""
    return {
        kind: values / (values.norm(p=2, dim=-1, keepdim=True) + 1e-20)
        for kind, values in scores.items()
    }


def ablation_importance(
    model: Seq2Seq, loss_of: Callable[[Seq2Seq], float], base_loss: float
) -> dict[str, Tensor]:
    """L(xi with head h = 0) - L(xi) for every kept head, kind -> (L, H); 0 for heads already
    masked. `loss_of` computes the split's loss of the model as its masks stand."""
    scores = {kind: [] for kind in KINDS}  # type: dict[str, list[Tensor]]
    for site in attention_sites(model):
        mask = site.attention.head_mask
        row = torch.zeros(mask.numel())
        for head in (mask != 0).nonzero().flatten().tolist():
            kept = float(mask[head])
            with torch.no_grad():
                mask[head] = 0.0
            try:
                row[head] = loss_of(model) - base_loss
            finally:
                with torch.no_grad():
                    mask[head] = kept
        scores[site.kind].append(row)
    return {kind: _stack(rows, model) for kind, rows in scores.items()}


def head_importance(model: Seq2Seq, batches: Sequence[Batch], split: str) -> HeadImportance:
    """Both measures over the batches of one split (see the module docstring)."""
    model.eval()
    base_loss, tokens = mean_loss(model, batches)
    gradient = gradient_importance(model, batches)
    ablation = ablation_importance(model, lambda m: mean_loss(m, batches)[0], base_loss)
    return HeadImportance(
        split=split,
        batches=len(batches),
        tokens=tokens,
        base_loss=base_loss,
        gradient=gradient,
        gradient_normalized=normalize_per_layer(gradient),
        ablation=ablation,
        masks=get_head_masks(model),
    )


def _stack(rows: list[Tensor], model: Seq2Seq) -> Tensor:
    """(L, H) from L rows; (0, H) for a stack without layers."""
    heads = getattr(model, "heads", 0)
    return torch.stack(rows) if rows else torch.zeros(0, heads)
