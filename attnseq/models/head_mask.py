"""The head mask of a transformer: which heads of which attention sublayer are kept (Michel et
al. 2019, "Are Sixteen Heads Really Better than One?", NeurIPS; section 2, the gates xi_h).
Every attention sublayer (a *site*: encoder_self, decoder_self or decoder_cross of layer l)
holds a (H,) `head_mask` buffer (attention/multihead.py): 1 keeps a head, 0 removes its output
before W^O. Masks are handled per kind as (L, H) tensors; pruning (`prune_masks`) and compaction
(`compact_heads`) follow Michel et al., sections 4.1 and 4.3.

Shapes: L layers of a stack, H heads (before compaction), K kept heads, d_k head size.
"""

from typing import NamedTuple

import torch
from torch import Tensor, nn

from attnseq.attention.full import FullAttention
from attnseq.attention.multihead import MultiHeadAttention
from attnseq.errors import UserError

KINDS = ("encoder_self", "decoder_self", "decoder_cross")
KIND_TITLES = {
    "encoder_self": "encoder self-attention",
    "decoder_self": "decoder self-attention",
    "decoder_cross": "decoder cross-attention",
}
BUFFER = "head_mask"


class HeadSite(NamedTuple):
    """One attention sublayer: its kind (one of KINDS), layer index and module."""

    kind: str
    layer: int
    attention: MultiHeadAttention


def has_heads(model: nn.Module) -> bool:
    """Whether the model is a transformer with head masks."""
    from attnseq.models.transformer import TransformerSeq2Seq

    return isinstance(model, TransformerSeq2Seq)


def attention_sites(model: nn.Module) -> list[HeadSite]:
    """Every attention sublayer of a transformer, in KINDS order, then by layer.

    Raises:
        UserError: the model is not a transformer (RNN models have no heads).
    """
    if not has_heads(model):
        raise UserError(
            f"heads needs a transformer (model.family=transformer); this is a "
            f"{type(model).__name__}"
        )
    sites = [
        HeadSite("encoder_self", index, layer.self_attn)
        for index, layer in enumerate(model.encoder.layers)  # type: ignore[union-attr]
    ]
    for kind, name in (("decoder_self", "self_attn"), ("decoder_cross", "cross_attn")):
        sites += [
            HeadSite(kind, index, getattr(layer, name))
            for index, layer in enumerate(model.decoder_layers)  # type: ignore[arg-type]
        ]
    return sites


def get_head_masks(model: nn.Module) -> dict[str, Tensor]:
    """kind -> (L, H) copy of the masks (CPU, float32)."""
    masks: dict[str, list[Tensor]] = {kind: [] for kind in KINDS}
    for site in attention_sites(model):
        masks[site.kind].append(site.attention.head_mask.detach().float().cpu())
    return {kind: torch.stack(rows) for kind, rows in masks.items()}


def set_head_masks(model: nn.Module, masks: dict[str, Tensor]) -> None:
    """Copy kind -> (L, H) masks into the model's buffers (shapes must match)."""
    with torch.no_grad():
        for site in attention_sites(model):
            site.attention.head_mask.copy_(masks[site.kind][site.layer])


def masked_heads(model: nn.Module) -> list[tuple[str, int, int]]:
    """(kind, layer, head) of every head whose mask is 0; empty for models without heads."""
    if not has_heads(model):
        return []
    return [
        (kind, layer, head)
        for kind, mask in get_head_masks(model).items()
        for layer, head in (mask == 0).nonzero().tolist()
    ]


def pruned_heads_summary(model: nn.Module) -> str | None:
    """e.g. '3 of 24 (encoder_self L1: 2 4; decoder_cross L2: 1)': the masked heads, layers
    and heads counted from 1 as the command-line options count them, or None when every head
    is kept (or the model has none)."""
    pruned = masked_heads(model)
    if not pruned:
        return None
    total = sum(site.attention.heads for site in attention_sites(model))
    groups: dict[tuple[str, int], list[str]] = {}
    for kind, layer, head in pruned:
        groups.setdefault((kind, layer + 1), []).append(str(head + 1))
    parts = [f"{kind} L{layer}: {' '.join(heads)}" for (kind, layer), heads in groups.items()]
    return f"{len(pruned)} of {total} ({'; '.join(parts)})"


def optional_entry(name: str) -> bool:
    """State-dict entries a checkpoint may lack (older checkpoints have no head masks; they load
    with every head kept)."""
    return name == BUFFER or name.endswith("." + BUFFER)


def prune_count(spec: str, total: int, sites: int, name: str = "prune") -> int:
    """The number of heads a pruning `spec` "K" or "FRACTION" asks for: an integer K, or a
    fraction in (0, 1) of all `total` heads (rounded to the nearest integer). `name`: what the
    messages call the spec (a command passes its option).

    Raises:
        UserError: not a number, a fraction outside (0, 1), K >= total, or more heads than can
            go while every one of the `sites` sublayers keeps one.
    """
    try:
        value = float(spec)
    except ValueError:
        message = f"{name} takes a head count K or a fraction in (0, 1), got {spec!r}"
        raise UserError(message) from None
    if spec.strip().lstrip("+").isdigit():
        count = int(value)
        if count >= total:
            raise UserError(f"{name} {count}: the model has {total} heads; K must be below that")
    elif 0 < value < 1:
        count = round(value * total)
    else:
        raise UserError(f"{name} fraction must be in (0, 1), got {spec}")
    if count > total - sites:
        raise UserError(
            f"{name} {spec}: at most {total - sites} of {total} heads can be pruned "
            f"(every one of the {sites} attention sublayers keeps at least one head)"
        )
    return count


def prune_masks(
    scores: dict[str, Tensor], count: int, current: dict[str, Tensor]
) -> dict[str, Tensor]:
    """Masks with the `count` lowest-scoring heads set to 0, ranked over the whole model (Michel
    et al. 2019, section 4.1), every site keeping one head: a site without heads would pass on
    only W^O's bias, the same vector at every position, removing the sublayer rather than
    thinning it. So at most (total heads - sites) heads can go.

    Args:
        scores: kind -> (L, H) importance, higher = more important.
        count: heads to mask in all; heads `current` already masks stay masked and count.
        current: kind -> (L, H) masks to start from.

    Returns:
        kind -> (L, H) new masks. Ties go to the earlier kind, layer and head.
    """
    masks = {kind: mask.clone() for kind, mask in current.items()}
    pruned = sum(int((mask == 0).sum()) for mask in masks.values())
    candidates = sorted(
        (float(scores[kind][layer, head]), KINDS.index(kind), layer, head)
        for kind, mask in masks.items()
        for layer, head in (mask != 0).nonzero().tolist()
    )
    for _, kind_index, layer, head in candidates:
        if pruned >= count:
            break
        row = masks[KINDS[kind_index]][layer]
        if int((row != 0).sum()) > 1:  # the last head of a site stays
            row[head] = 0.0
            pruned += 1
    return masks


def random_scores(masks: dict[str, Tensor], seed: int) -> dict[str, Tensor]:
    """Uniform random importance, kind -> (L, H), the baseline of Michel et al.'s figures."""
    generator = torch.Generator().manual_seed(seed)
    return {kind: torch.rand(mask.shape, generator=generator) for kind, mask in masks.items()}


def head_mask_state(model: nn.Module) -> dict[str, Tensor]:
    """The state-dict entries of the head masks, name -> (H,) on the CPU: what a pruned
    checkpoint changes in its source's weights."""
    return {
        name: buffer.detach().cpu().clone()
        for name, buffer in model.named_buffers()
        if optional_entry(name)
    }


def folded_state_dict(model: nn.Module) -> dict[str, Tensor]:
    """The model's state dict (detached copies on the CPU) with every attention sublayer's head
    mask xi (H,) folded into its W^O, for an engine without head masks (the exports): the
    mask scales head h's context (B, H, T, d_k) before W^O (d_model, H d_k), which equals
    scaling W^O's input columns h d_k .. (h + 1) d_k - 1 by xi_h."""
    state = {name: value.detach().cpu().clone() for name, value in model.state_dict().items()}
    names = {module: name for name, module in model.named_modules()}
    for site in attention_sites(model):
        attention = site.attention
        mask = state[f"{names[attention]}.{BUFFER}"]  # (H,)
        if bool((mask == 1).all()):
            continue
        key = f"{names[attention]}.out_proj.weight"
        state[key] = state[key] * mask.repeat_interleave(attention.d_k).to(state[key].dtype)
    return state


def compact_heads(model: nn.Module) -> int:
    """Remove the masked heads of every full-attention sublayer in place (Michel et al. 2019,
    section 4.3: a mask zeroes a head but still computes it); returns how many heads were
    removed. With kept heads K (row blocks of d_k):

        W^Q, W^K, W^V: (d_model, d_model) -> (K d_k, d_model)   the kept heads' output rows
        W^O:           (d_model, d_model) -> (d_model, K d_k)   their input columns, times xi_h

    so the sublayer computes sum over kept h of xi_h head_h W^O_h, what the masked model
    computes (up to rounding). Efficient self-attention kinds keep their masks. The result is
    for decoding and scoring without weights only: its state dict no longer fits the config
    (it is never saved), and layers of different head counts no longer stack their weights."""
    removed = 0
    for site in attention_sites(model):
        attention = site.attention
        keep = (attention.head_mask != 0).nonzero().flatten()  # (K,)
        if len(keep) == attention.heads or not isinstance(attention.mechanism, FullAttention):
            continue
        removed += attention.heads - len(keep)
        _keep_heads(attention, keep)
    return removed


def _keep_heads(attention: MultiHeadAttention, keep: Tensor) -> None:
    """Slice the projections of `attention` down to the heads `keep` (K,)."""
    d_k = attention.d_k
    rows = (keep.unsqueeze(1) * d_k + torch.arange(d_k, device=keep.device)).flatten()  # (K d_k,)
    scale = attention.head_mask[keep].repeat_interleave(d_k)  # xi_h per kept column, (K d_k,)
    with torch.no_grad():
        for name in ("q_proj", "k_proj", "v_proj"):
            setattr(attention, name, _rows(getattr(attention, name), rows))
        out = attention.out_proj
        compact = nn.Linear(len(rows), out.out_features, bias=out.bias is not None)
        compact.to(out.weight)
        compact.weight.copy_(out.weight[:, rows] * scale.to(out.weight.dtype))
        if out.bias is not None:
            compact.bias.copy_(out.bias)
        attention.out_proj = compact
        if attention.memory is not None:  # persistent memory holds one key/value set per head
            memory = attention.memory
            memory.keys = nn.Parameter(memory.keys[keep].clone())
            memory.values = nn.Parameter(memory.values[keep].clone())
    attention.heads = len(keep)
    attention.head_mask = torch.ones_like(attention.head_mask[keep])


def _rows(linear: nn.Linear, rows: Tensor) -> nn.Linear:
    """A linear layer computing only the output features `rows` of `linear`."""
    sliced = nn.Linear(linear.in_features, len(rows), bias=linear.bias is not None)
    sliced.to(linear.weight)
    sliced.weight.copy_(linear.weight[rows])
    if linear.bias is not None:
        sliced.bias.copy_(linear.bias[rows])
    return sliced
