"""The layers of the transformer (Vaswani et al. 2017, "Attention Is All You Need", NeurIPS): the
feed-forward network, the residual block, the Conformer convolution sublayer, the encoder layer
and stack, the decoder layer, and what a pass of the decoder stack returns (`DecoderPass`);
transformer.py assembles them. Self-attention may be an efficient kind
(attention/efficient.py); cross-attention is always full.

Shapes: B batch, S source length, T target length (new positions), t positions seen so far,
N any sequence length, H heads, d_k = d_model / H, d = d_model.
"""

import functools
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnseq.attention.efficient import build_self_attention, for_layer
from attnseq.attention.mechanism import KeyValue, SelfCache
from attnseq.attention.multihead import MultiHeadAttention
from attnseq.config.schema import AttentionConfig


@dataclass(frozen=True)
class LayerOptions:
    """What every encoder and decoder layer of one model shares.

    d_model: model width; heads: attention heads H (must divide d_model); ff_dim: the
        feed-forward inner size d_ff.
    dropout: residual and feed-forward dropout P_drop; attention_dropout: dropout on attention
        weights.
    pre_norm: pre-norm (True) or post-norm (False) residual blocks.
    memory_slots: N persistent memory vectors per head in self-attention (0 = none), and in
        cross-attention too with memory_in_cross (attention/multihead.py).
    conv_kernel: k of the encoder's convolution sublayer (0 = none; `ConvolutionModule`).
    max_positions: the longest sequence; linformer's n (attention/efficient.py).
    scaled: every attention of the model divides q . k by sqrt(d_k) (False: unscaled).
    activation: the feed-forward nonlinearity (`ACTIVATIONS`); activation_dropout: dropout on
        its output, None = `dropout`.
    """

    d_model: int
    heads: int
    ff_dim: int
    dropout: float
    attention_dropout: float
    pre_norm: bool
    memory_slots: int = 0
    memory_in_cross: bool = False
    conv_kernel: int = 0
    max_positions: int = 1024
    scaled: bool = True
    activation: str = "relu"
    activation_dropout: float | None = None

    @property
    def ff_dropout(self) -> float:
        """The dropout on the feed-forward hidden activations."""
        return self.dropout if self.activation_dropout is None else self.activation_dropout


# the feed-forward nonlinearities by their config name (config/choices.py, Activation)
ACTIVATIONS = {
    "relu": torch.relu,
    "gelu": F.gelu,  # x Phi(x), exact (erf)
    "gelu_tanh": functools.partial(F.gelu, approximate="tanh"),
    "silu": F.silu,  # x sigmoid(x), "swish"
}


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2 (section 3.3, eq. 2), dropout after the ReLU
    (or the `activation` in its place).

    Args:
        d_model: input and output size.
        ff_dim: inner size d_ff.
        dropout: dropout on the hidden activations.
        activation: a name of `ACTIVATIONS`.
    """

    def __init__(self, d_model: int, ff_dim: int, dropout: float, activation: str = "relu") -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(
                f"unknown activation {activation!r}; choose one of {list(ACTIVATIONS)}"
            )
        self.inner = nn.Linear(d_model, ff_dim)  # W_1, b_1
        self.outer = nn.Linear(ff_dim, d_model)  # W_2, b_2
        self.dropout = nn.Dropout(dropout)
        self.activation = activation
        self._activate = ACTIVATIONS[activation]
        for proj in (self.inner, self.outer):
            nn.init.xavier_uniform_(proj.weight)
            nn.init.zeros_(proj.bias)

    def forward(self, x: Tensor) -> Tensor:
        """x: (B, N, d_model) -> (B, N, d_model)."""
        return self.outer(self.dropout(self._activate(self.inner(x))))

    def extra_repr(self) -> str:
        return "" if self.activation == "relu" else f"activation={self.activation}"


class Residual(nn.Module):
    """Residual connection with dropout and LayerNorm around one sublayer (section 5.4):

        post-norm (the paper):      x = LayerNorm(x + Dropout(Sublayer(x)))
        pre-norm (Xiong et al. 2020, "On Layer Normalization in the Transformer Architecture"):
                                    x = x + Dropout(Sublayer(LayerNorm(x))), and a final
                                    LayerNorm after the last layer of a stack (`final_norm`)

    Usage: `h = block.sublayer_input(x); x = block.combine(x, sublayer(h))`, so that sublayers
    returning extra values (attention weights, caches) need no wrapper.

    Args:
        d_model: feature size.
        dropout: residual dropout P_drop.
        pre_norm: normalise the sublayer input (pre-norm) instead of the sum (post-norm).
    """

    def __init__(self, d_model: int, dropout: float, pre_norm: bool) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.pre_norm = pre_norm

    def sublayer_input(self, x: Tensor) -> Tensor:
        """x: (B, N, d_model) -> what the sublayer sees, (B, N, d_model)."""
        return self.norm(x) if self.pre_norm else x

    def combine(self, x: Tensor, sublayer_output: Tensor) -> Tensor:
        """x + Dropout(sublayer output), normalised afterwards in post-norm; (B, N, d_model)."""
        out = x + self.dropout(sublayer_output)
        return out if self.pre_norm else self.norm(out)


class ConvolutionModule(nn.Module):
    """The encoder's convolution sublayer, `model.conv_kernel=k`: the convolution module of the
    Conformer (Gulati et al. 2020, "Conformer: Convolution-augmented Transformer for Speech
    Recognition", Interspeech; section 2.2, figure 2), local context beside self-attention's:

        pointwise conv (d -> 2d) -> GLU -> depthwise conv (kernel k) -> norm -> Swish
        -> pointwise conv (d -> d) -> dropout

    between self-attention and the feed-forward network, in a residual block like every
    sublayer. Against the paper: padding is zeroed right before the depthwise convolution, the
    one step that mixes positions, so extra padding leaves real positions unchanged; and
    LayerNorm replaces BatchNorm, whose batch statistics would make one example's output
    depend on the others and on the padding.

    Args:
        d_model: channels d.
        kernel: k, odd, >= 1.
        dropout: dropout on the output.

    Raises:
        ValueError: for an even or non-positive kernel.
    """

    def __init__(self, d_model: int, kernel: int, dropout: float) -> None:
        super().__init__()
        if kernel < 1 or kernel % 2 == 0:
            raise ValueError(
                f"the convolution kernel must be odd and >= 1 (same length out), got {kernel}"
            )
        self.kernel = kernel
        self.pointwise_in = nn.Linear(d_model, 2 * d_model)  # first pointwise conv, before GLU
        self.depthwise = nn.Conv1d(
            d_model, d_model, kernel, padding=kernel // 2, groups=d_model
        )  # one filter of k taps per channel
        self.norm = nn.LayerNorm(d_model)
        self.pointwise_out = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        """Convolve.

        Args:
            x: (B, N, d) the sublayer input.
            mask: (B, N) bool, True at real positions; None = no padding.

        Returns:
            (B, N, d).
        """
        h = F.glu(self.pointwise_in(x), dim=-1)  # (B, N, 2d) -> (B, N, d)
        if mask is not None:  # padding contributes zeros, as beyond the sequence's end
            h = h.masked_fill(~mask[..., None], 0.0)
        h = self.depthwise(h.transpose(1, 2)).transpose(1, 2)  # (B, d, N) conv -> (B, N, d)
        h = F.silu(self.norm(h))  # Swish(x) = x sigmoid(x)
        return self.dropout(self.pointwise_out(h))

    def extra_repr(self) -> str:
        return f"kernel={self.kernel}"


def feed_forward(options: LayerOptions) -> FeedForward:
    """The feed-forward network of a layer of `options`."""
    return FeedForward(options.d_model, options.ff_dim, options.ff_dropout, options.activation)


def convolution_or_none(d_model: int, kernel: int, dropout: float) -> ConvolutionModule | None:
    """The module for `model.conv_kernel=kernel`; None for 0 (off)."""
    return ConvolutionModule(d_model, kernel, dropout) if kernel else None


class EncoderLayer(nn.Module):
    """Self-attention + feed-forward, each in a residual block (section 3.1, "Encoder").

    Args:
        options: sizes, dropout and norm placement.
        self_attention: the self-attention mechanism; None = full.
    """

    def __init__(
        self, options: LayerOptions, self_attention: AttentionConfig | None = None
    ) -> None:
        super().__init__()
        d_model, dropout, pre_norm = options.d_model, options.dropout, options.pre_norm
        self.self_attn = build_self_attention(
            self_attention,
            d_model,
            options.heads,
            options.attention_dropout,
            memory_slots=options.memory_slots,
            max_length=options.max_positions,
            scaled=options.scaled,
        )
        self.self_block = Residual(d_model, dropout, pre_norm)
        # the convolution sublayer (Conformer): after self-attention, before the feed-forward
        self.conv = convolution_or_none(d_model, options.conv_kernel, dropout)
        self.conv_block = Residual(d_model, dropout, pre_norm) if self.conv else None
        self.ff = feed_forward(options)
        self.ff_block = Residual(d_model, dropout, pre_norm)

    def forward(
        self, x: Tensor, src_mask: Tensor | None, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """One encoder layer.

        Args:
            x: (B, S, d_model).
            src_mask: (B, S) bool, True at real tokens; None = no padding.
            need_weights: use the explicit attention path and return its weights (when the
                self-attention kind has any).

        Returns:
            (B, S, d_model) and self-attention weights (B, H, S, S) or None.
        """
        h = self.self_block.sublayer_input(x)
        need_weights = need_weights and self.self_attn.has_weights
        attended, weights = self.self_attn(h, h, h, src_mask, need_weights=need_weights)
        x = self.self_block.combine(x, attended)
        if self.conv is not None and self.conv_block is not None:
            x = self.conv_block.combine(x, self.conv(self.conv_block.sublayer_input(x), src_mask))
        x = self.ff_block.combine(x, self.ff(self.ff_block.sublayer_input(x)))
        return x, weights


class TransformerEncoder(nn.Module):
    """A stack of encoder layers over already embedded inputs (+ final LayerNorm if pre-norm).

    Args:
        layers: number of layers N.
        options, self_attention: as in `EncoderLayer`.
    """

    def __init__(
        self,
        layers: int,
        options: LayerOptions,
        self_attention: AttentionConfig | None = None,
    ) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            EncoderLayer(options, for_layer(self_attention, index)) for index in range(layers)
        )
        # pre-norm leaves the residual stream unnormalised: normalise once at the end
        self.final_norm = final_norm(options)

    def forward(
        self, x: Tensor, src_mask: Tensor | None, need_weights: bool = False
    ) -> tuple[Tensor, list[Tensor]]:
        """Encode.

        Args:
            x: (B, S, d_model) embedded source.
            src_mask: (B, S) bool, True at real tokens; None = no padding.
            need_weights: collect every layer's self-attention weights.

        Returns:
            memory (B, S, d_model) and a list of L weights (B, H, S, S) (empty unless asked,
            and for self-attention kinds without weights).
        """
        all_weights: list[Tensor] = []
        for layer in self.layers:
            x, weights = layer(x, src_mask, need_weights)
            if weights is not None:
                all_weights.append(weights)
        return self.final_norm(x), all_weights


def final_norm(options: LayerOptions) -> nn.Module:
    """The LayerNorm after a pre-norm stack (its residual stream is never normalised
    otherwise); identity for post-norm, whose every block already ends in one."""
    return nn.LayerNorm(options.d_model) if options.pre_norm else nn.Identity()


class DecoderLayerOutput(NamedTuple):
    """What one decoder layer returns.

    output: (B, T, d_model).
    self_cache: this layer's self-attention state after the new positions (incremental
        decoding), None for teacher forcing.
    self_weights: (B, H, T, t) or None.
    cross_weights: (B, H, T, S) or None.
    cross_sample: hard cross-attention (models/hard_attention.py) in training: the
        `HardSample` of its choice; None otherwise.
    """

    output: Tensor
    self_cache: SelfCache | None
    self_weights: Tensor | None
    cross_weights: Tensor | None
    cross_sample: Any = None


class DecoderLayer(nn.Module):
    """Causal self-attention, cross-attention over the memory, feed-forward (section 3.1).

    The same code serves teacher forcing (no past, T new positions) and incremental decoding
    (cached self-attention state, usually T = 1 new position).

    Args:
        options: as in `EncoderLayer`.
        self_attention: the (causal) self-attention mechanism; None = full. Cross-attention is
            always full.
    """

    def __init__(
        self, options: LayerOptions, self_attention: AttentionConfig | None = None
    ) -> None:
        super().__init__()
        d_model, dropout, pre_norm = options.d_model, options.dropout, options.pre_norm
        heads, attention_dropout = options.heads, options.attention_dropout
        memory_slots = options.memory_slots
        self.self_attn = build_self_attention(
            self_attention,
            d_model,
            heads,
            attention_dropout,
            causal=True,
            memory_slots=memory_slots,
            max_length=options.max_positions,
            scaled=options.scaled,
        )
        self.self_block = Residual(d_model, dropout, pre_norm)
        self.cross_attn = MultiHeadAttention(
            d_model,
            heads,
            attention_dropout,
            memory_slots=memory_slots if options.memory_in_cross else 0,
            memory_in_weights=False,  # cross-attention weights stay over the source
            scaled=options.scaled,
        )
        self.cross_block = Residual(d_model, dropout, pre_norm)
        self.ff = feed_forward(options)
        self.ff_block = Residual(d_model, dropout, pre_norm)

    def memory_kv(self, memory: Tensor) -> KeyValue:
        """Cross-attention keys/values of the encoder output, (B, H, S, d_k) each; once per batch.

        Args:
            memory: (B, S, d_model).
        """
        return self.cross_attn.project_kv(memory, memory)

    def forward(
        self,
        x: Tensor,
        memory_kv: KeyValue,
        memory_mask: Tensor,
        past_self: SelfCache | None = None,
        need_weights: bool = False,
    ) -> DecoderLayerOutput:
        """One decoder layer.

        Args:
            x: (B, T, d_model) the new target positions.
            memory_kv: from `memory_kv`, each (B, H, S, d_k).
            memory_mask: (B, S) bool, True at real source tokens.
            past_self: self-attention state of the earlier positions (`self_attn.empty_cache`,
                or a previous step; keys it does not use, such as the cross-attention
                cache, are ignored); None for teacher forcing from position 0.
            need_weights: explicit attention path, return weights (self-attention weights
                only when its kind has any).
        """
        h = self.self_block.sublayer_input(x)
        self_need_weights = need_weights and self.self_attn.has_weights
        self_cache = None
        if past_self is None:
            attended, self_weights = self.self_attn(
                h, h, h, is_causal=True, need_weights=self_need_weights
            )
        else:
            # the T new queries are the last T positions (bottom-right causal)
            attended, self_weights, self_cache = self.self_attn.attend_cached(
                h, past_self, self_need_weights
            )
        x = self.self_block.combine(x, attended)

        h = self.cross_block.sublayer_input(x)
        attended, cross_weights, sample = self.cross_attention(
            h, memory_kv, memory_mask, need_weights
        )
        x = self.cross_block.combine(x, attended)

        x = self.ff_block.combine(x, self.ff(self.ff_block.sublayer_input(x)))
        return DecoderLayerOutput(x, self_cache, self_weights, cross_weights, sample)

    def cross_attention(
        self, h: Tensor, memory_kv: KeyValue, memory_mask: Tensor, need_weights: bool
    ) -> tuple[Tensor, Tensor | None, Any]:
        """Attention from h (B, T, d_model) over the memory: output (B, T, d_model), weights
        (B, H, T, S) or None, and what a subclass reports of its choice (None here)."""
        attended, weights = self.cross_attn.attend(
            h, *memory_kv, memory_mask, need_weights=need_weights
        )
        return attended, weights, None


class DecoderPass(NamedTuple):
    """The decoder stack run over T new target positions (`TransformerSeq2Seq.run_decoder`,
    transformer.py).

    inputs: x_t (B, T, d_model), the embedded decoder input (scaled embedding + position).
    decoded: s_t (B, T, d_model), the last layer's output after the final norm: what the
        output projection reads.
    layers: one `DecoderLayerOutput` per decoder layer, with its cross-attention weights
        (B, H, T, S) where they were asked for and its self-attention cache when decoding
        incrementally.
    """

    inputs: Tensor
    decoded: Tensor
    layers: list[DecoderLayerOutput]

    def cross_weights(self) -> list[Tensor]:
        """The cross-attention weights of every layer that returned them, (B, H, T, S) each."""
        return [out.cross_weights for out in self.layers if out.cross_weights is not None]
