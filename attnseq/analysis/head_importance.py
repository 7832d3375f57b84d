"""How much each attention head matters (Michel, Levy & Neubig 2019, "Are Sixteen Heads Really
Better than One?", NeurIPS): gradient importance and ablation over the teacher-forced loss of a
split, and their tables and figure. Shapes: every score is kind -> (L, H)."""

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from attnseq.data.batching import Batch
from attnseq.models.head_mask import (
    KIND_TITLES,
    KINDS,
    attention_sites,
    get_head_masks,
)
from attnseq.models.objective import sequence_loss
from attnseq.models.seq2seq import Seq2Seq

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from rich.table import Table

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
        """Plain lists, kind -> [layer][head]: list position p holds layer (head) p + 1, as
        the tables, figures and options number them (the file says so in "numbering")."""

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
            "numbering": "lists are [layer][head]; position p is layer (head) p + 1",
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
    """The head importance score of Michel et al. 2019, section 4.1, eq. 2,

        I_h = E_x | dL(x) / d xi_h |,

    xi the head mask (models/head_mask.py) at its current value and L the mean token cross
    entropy (no label smoothing); as in the authors' code the expectation runs over batches,
    (1 / #batches) sum_b |dL_b / d xi_h|. kind -> (L, H).

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
    """I_h / ||I_layer||_2 per attention sublayer, kind and layer (section 4.1), so that layers
    compare on one scale; a layer of zeros stays zero."""
    return {
        kind: values / (values.norm(p=2, dim=-1, keepdim=True) + 1e-20)
        for kind, values in scores.items()
    }


def ablation_importance(
    model: Seq2Seq, loss_of: Callable[[Seq2Seq], float], base_loss: float
) -> dict[str, Tensor]:
    """L(xi with head h = 0) - L(xi) for every kept head, every other head as it is (Michel
    et al. 2019, section 2, Table 1), kind -> (L, H); 0 for heads already masked. `loss_of`
    computes the split's loss of the model as its masks stand."""
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
    """Both measures over the batches of one split, in eval mode (no dropout): deterministic."""
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


# -------------------------------------------------------------------------------------- report
_PANELS = (
    ("gradient_normalized", "gradient E|dL/dxi| (l2-normalized per layer)", "viridis"),
    ("ablation", "loss increase when masked alone", "magma"),
)


def importance_tables(importance: HeadImportance) -> list["Table"]:
    """One rich table per kind present: a row per layer, a column per head."""
    from rich.table import Table

    tables = []
    for kind in KINDS:
        gradient = importance.gradient_normalized[kind]
        if not gradient.numel():
            continue
        ablation, masks = importance.ablation[kind], importance.masks[kind]
        table = Table(
            title=KIND_TITLES[kind],
            title_justify="left",
            caption="normalized gradient / loss increase",
            caption_justify="left",
        )
        table.add_column("layer", justify="right")
        for head in range(gradient.size(1)):
            table.add_column(f"head {head + 1}", justify="right")
        for layer in range(gradient.size(0)):
            cells = [
                "pruned"
                if masks[layer, head] == 0
                else f"{gradient[layer, head]:.3f} / {ablation[layer, head]:+.4f}"
                for head in range(gradient.size(1))
            ]
            table.add_row(str(layer + 1), *cells)
        tables.append(table)
    return tables


def importance_figure(importance: HeadImportance, title: str) -> "Figure":
    """Heatmaps, one row per measure and one column per kind (layers x heads)."""
    from matplotlib.figure import Figure

    kinds = [kind for kind in KINDS if importance.masks[kind].numel()]
    layers = max(importance.masks[kind].size(0) for kind in kinds)
    heads = importance.masks[kinds[0]].size(1)
    cell = 0.7
    width = 1.5 + len(kinds) * (1.2 + heads * cell)
    figure = Figure(figsize=(width, 1.2 + len(_PANELS) * (1.2 + layers * cell)))
    figure.suptitle(title)
    axes = figure.subplots(len(_PANELS), len(kinds), squeeze=False)
    for row, (attribute, label, cmap) in enumerate(_PANELS):
        for column, kind in enumerate(kinds):
            values = getattr(importance, attribute)[kind].numpy()
            _heatmap(axes[row][column], values, importance.masks[kind].numpy(), cmap)
            axes[row][column].set_title(f"{KIND_TITLES[kind]}\n{label}", fontsize=8)
    figure.tight_layout()
    return figure


def _heatmap(ax, values: np.ndarray, masks: np.ndarray, cmap: str) -> None:  # type: ignore[no-untyped-def]
    """One (layers, heads) heatmap with the value in each cell; pruned heads show an x."""
    image = ax.imshow(values, cmap=cmap, aspect="auto")
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    ax.set_xticks(range(values.shape[1]), [str(head + 1) for head in range(values.shape[1])])
    ax.set_yticks(range(values.shape[0]), [str(layer + 1) for layer in range(values.shape[0])])
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    span = float(values.max() - values.min()) or 1.0
    for layer in range(values.shape[0]):
        for head in range(values.shape[1]):
            pruned = masks[layer, head] == 0
            text = "x" if pruned else f"{values[layer, head]:.2g}"
            light = (values[layer, head] - values.min()) / span < 0.5
            ax.text(
                head,
                layer,
                text,
                ha="center",
                va="center",
                fontsize=7,
                color="white" if light else "black",
            )


def write_figure(importance: HeadImportance, path: Path, title: str) -> Path:
    """Save `importance_figure` as a PNG at `path`."""
    from attnseq.analysis.figures import save_figure

    return save_figure(importance_figure(importance, title), path)
