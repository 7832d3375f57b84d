"""How a model spreads its cross-attention over a split, teacher-forced on the reference
targets: the mass on the end of the source and the entropy of every head, for validation's
TensorBoard scalars, the metrics.json of the test split and of `attnseq eval`, and `attnseq
compare`.

Shapes: B batch, T target positions, S source positions, L layers, H heads.
"""

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from attnseq.alignment.attribution import length_sorted_batches, teacher_forced_attention
from attnseq.data.batching import Example
from attnseq.models.seq2seq import Seq2Seq


def is_per_layer_key(key: str) -> bool:
    """Is `key` (``SPLIT/attention/layer{L}/...``) a per-layer or per-head diagnostic?
    metrics.json keeps them; the HParams table and the printed summaries, which they would
    crowd, leave them out."""
    return "/attention/layer" in key


def row_entropy(weights: Tensor) -> Tensor:
    """H(w_t) = -sum_s w[..., t, s] ln w[..., t, s] of every row, in nats: (..., T, S) ->
    (..., T); 0 for a one-hot row, ln S for a uniform one (xlogy(0, 0) = 0: zero weights,
    e.g. at padding, add nothing)."""
    return -torch.special.xlogy(weights, weights).sum(dim=-1)


def attention_statistics(weights: Tensor, mask: Tensor | None = None) -> dict[str, float]:
    """Sharpness of attention rows, for TensorBoard.

    entropy: mean over real rows of H(w_t) = -sum_s w[t, s] ln w[t, s] (nats; 0 for a one-hot
        row, ln S for a uniform row over S positions).
    argmax_weight: mean over real rows of max_s w[t, s] (1 for one-hot, 1/S for uniform).

    Args:
        weights: (..., T, S) attention, e.g. (B, T, S) or (B, L, H, T, S); pass
            weights[:, layer, head] for one head's numbers.
        mask: bool, True at real (target row, source column) positions, broadcastable to
            `weights`, e.g. ``batch.tgt_mask[:, :, None] & batch.src_mask[:, None, :]`` (B, T, S),
            which is also accepted for (B, L, H, T, S) weights. Masked positions are ignored and a
            row with no real position is left out of the means. None: every position is real.

    Returns:
        {"entropy", "argmax_weight"}; both 0.0 when there is no real row.
    """
    w = weights.detach().double()
    if mask is None:
        mask = torch.ones_like(w, dtype=torch.bool)
    else:
        mask = mask.to(device=w.device, dtype=torch.bool)
        if mask.dim() == 3 and w.dim() == 5:
            mask = mask[:, None, None]  # (B, T, S) -> (B, 1, 1, T, S)
        mask = mask.broadcast_to(w.shape)
    w = w.masked_fill(~mask, 0.0)
    real_rows = mask.any(dim=-1)  # (..., T)
    if not real_rows.any():
        return {"entropy": 0.0, "argmax_weight": 0.0}
    entropy = row_entropy(w)  # (..., T)
    top = w.max(dim=-1).values  # (..., T)
    return {
        "entropy": float(entropy[real_rows].mean()),
        "argmax_weight": float(top[real_rows].mean()),
    }


@torch.no_grad()
def example_entropies(
    model: Seq2Seq,
    examples: Sequence[Example],
    device: torch.device | str = "cpu",
    batch_size: int = 64,
) -> np.ndarray:
    """Summed row entropy (nats) and number of rows of each example's teacher-forced
    cross-attention: (N, 2) float64, sums so that a group's mean is sum / rows. The rows are the
    T_b + 1 decoder steps
    (the </s> row included); a transformer's row entropy is the mean over its layers and heads.
    An example with an empty source or target is not scored: (0, 0), as validation skips it.

    Args:
        model: any `Seq2Seq` that returns cross-attention; in eval mode for the pass, its mode
            restored after.
        examples: (source ids, target ids) without BOS/EOS, within the model's positions.
        device: where the model runs.
        batch_size: pairs per forward pass.

    Raises:
        ValueError: a model that returns no attention.
    """
    sums = np.zeros((len(examples), 2), dtype=np.float64)
    scored = [i for i, (src, tgt) in enumerate(examples) if src and tgt]
    was_training = model.training
    model.eval()
    try:
        chosen = [examples[i] for i in scored]
        for chunk, batch in length_sorted_batches(model, chosen, batch_size, device):
            weights = teacher_forced_attention(model, batch).double()  # (B, [L, H,] T, S)
            entropy = row_entropy(weights)  # (B, [L, H,] T): padded columns weigh 0
            if entropy.dim() == 4:
                entropy = entropy.mean(dim=(1, 2))  # (B, T): the layers' and heads' mean
            lengths = batch.tgt_lengths.cpu()  # (B,): target + 1, the real rows
            real = torch.arange(entropy.size(1)) < lengths.unsqueeze(1)  # (B, T)
            totals = (entropy * real).sum(dim=1)  # (B,)
            for b, position in enumerate(chunk):
                sums[scored[position]] = (float(totals[b]), float(lengths[b]))
    finally:
        model.train(was_training)
    return sums


class AttentionDiagnostics:
    """The end-of-source mass and the entropy of teacher-forced cross-attention, means over
    every real target row (the EOS row included) of the batches `add`ed:

        last_source_mass = mean_t w[t, S_b - 1],   entropy = mean_t H(w_t)

    attnseq's sources carry no EOS, so the last real source position stands for the end, where
    heads with nothing to align park their mass (the `</s>` sink of Clark et al. 2019, "What
    Does BERT Look At?", section 3); a uniform row gives 1 / S_b.
    """

    def __init__(self) -> None:
        self.rows = 0  # real target rows seen
        self.mass: Tensor | None = None  # () or (L, H): summed last-source mass
        self.entropy: Tensor | None = None  # () or (L, H): summed row entropy

    def add(self, weights: Tensor, src_lengths: Tensor, tgt_lengths: Tensor) -> None:
        """Add one batch.

        Args:
            weights: (B, T, S) or (B, L, H, T, S) cross-attention of a teacher-forced pass.
            src_lengths: (B,) real source positions (>= 1); tgt_lengths: (B,) real target rows.
        """
        w = weights.detach().double()
        B, T, S = w.size(0), w.size(-2), w.size(-1)
        device = w.device
        src_lengths, tgt_lengths = src_lengths.to(device), tgt_lengths.to(device)
        columns = torch.arange(S, device=device) < src_lengths.unsqueeze(1)  # (B, S)
        rows = torch.arange(T, device=device) < tgt_lengths.unsqueeze(1)  # (B, T)
        middle = (1,) * (w.dim() - 3)  # the (L, H) dims, if any
        w = w.masked_fill(~columns.view(B, *middle, 1, S), 0.0)
        last = (src_lengths - 1).view(B, *middle, 1, 1).expand(*w.shape[:-1], 1)
        mass = w.gather(-1, last).squeeze(-1)  # (B, [L, H,] T)
        entropy = row_entropy(w)  # (B, [L, H,] T)
        real = rows.view(B, *middle, T).to(w.dtype)
        self._accumulate((mass * real).sum(dim=(0, -1)), (entropy * real).sum(dim=(0, -1)))
        self.rows += int(rows.sum())

    def _accumulate(self, mass: Tensor, entropy: Tensor) -> None:
        if self.mass is None or self.entropy is None:
            self.mass, self.entropy = mass, entropy
        else:
            self.mass, self.entropy = self.mass + mass, self.entropy + entropy

    def results(self) -> dict[str, float]:
        """The keys attention/last_source_mass and attention/entropy (for a transformer the
        means over layers and heads, with attention/layer{L}/last_source_mass, the layer's
        head mean, and attention/layer{L}/head{H}/entropy, 1-based); {} when no row was added."""
        if self.rows == 0 or self.mass is None or self.entropy is None:
            return {}
        mass = self.mass.cpu() / self.rows  # () or (L, H)
        entropy = self.entropy.cpu() / self.rows
        results = {
            "attention/last_source_mass": float(mass.mean()),
            "attention/entropy": float(entropy.mean()),
        }
        if mass.dim() == 2:
            for layer in range(mass.size(0)):
                results[f"attention/layer{layer + 1}/last_source_mass"] = float(mass[layer].mean())
                for head in range(mass.size(1)):
                    name = f"attention/layer{layer + 1}/head{head + 1}/entropy"
                    results[name] = float(entropy[layer, head])
        return results
