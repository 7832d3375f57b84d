"""The transformer encoder-decoder (Vaswani et al. 2017, "Attention Is All You Need", NeurIPS).

Encoder layer (section 3.1): self-attention over the source, then a position-wise feed-forward
network; decoder layer: causal self-attention, cross-attention over the encoder output ("memory",
section 3.2.3), feed-forward. Each sublayer sits in a residual connection with dropout and
LayerNorm (section 5.4):

    post-norm (the paper):      x = LayerNorm(x + Dropout(Sublayer(x)))
    pre-norm (Xiong et al. 2020, "On Layer Normalization in the Transformer Architecture"):
                                x = x + Dropout(Sublayer(LayerNorm(x))), and a final LayerNorm
                                after the last encoder and decoder layer

    FFN(x) = max(0, x W_1 + b_1) W_2 + b_2                                   (section 3.3, eq. 2)

Token embeddings are multiplied by sqrt(d_model) and summed with positional encodings
(sections 3.4 and 3.5); the pre-softmax projection may share the target embedding matrix
(section 3.4, "tie_embeddings"), and source and target may share one embedding.

Self-attention may use an efficient mechanism instead of full attention (`self_attention`,
attnseq/attention/efficient.py: local, strided, longformer, linformer, linear, performer): in the
encoder always, in the decoder with `decoder_self_attention` (causal kinds only). Cross-attention
is always full.

Attention weights come back as (B, L, H, T, S) for cross-attention (seq2seq.py's convention) and in
`extras` as "decoder_self_attention" (B, L, H, T, T) and "encoder_self_attention" (B, L, H, S, S);
an extra is absent when its self-attention kind has no weights (linear, performer).

Incremental decoding state (tensors batch-first, so `Seq2Seq.reorder_state` can select rows):

    {
        "memory":      (B, S, d_model) encoder output,
        "memory_mask": (B, S) bool, True at real source tokens,
        "step":        (B,) long, number of target tokens fed so far (= next target position),
        "length":      int, the same number for every row (no tensor: read without a sync),
        "layers": [    one dict per decoder layer
            {"cross_k": (B, H, S, d_k), "cross_v": (B, H, S, d_k),   memory projected once
             "self_k":  (B, H, t, d_k), "self_v":  (B, H, t, d_k)},  grows by one per step
        ],
    }

The self-attention entries are those of the layer's mechanism (`empty_cache`): the growing keys
and values above for full and strided, the last w keys and values for local, the running sums
"self_kv" (B, H, F, d_k) and "self_k_sum" (B, H, F) (and "self_log_scale" (B, H) for performer)
for linear and performer.

Shapes: B batch, S source length, T target length, V target vocabulary, L layers, H heads,
d_k = d_model / H.
"""

import math
from typing import NamedTuple

import torch
from torch import Tensor, nn

from attnseq.attention.efficient import SelfAttentionOptions, build_self_attention
from attnseq.attention.masks import padding_mask
from attnseq.attention.mechanism import KeyValue, SelfCache
from attnseq.attention.multihead import MultiHeadAttention
from attnseq.models.positional import build_positional_encoding, make_positions
from attnseq.models.seq2seq import DecoderState, Seq2Seq, Seq2SeqOutput

NORMS = ("pre", "post")


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2 (section 3.3, eq. 2), dropout after the ReLU.

    Args:
        d_model: input and output size.
        ff_dim: inner size d_ff.
        dropout: dropout on the hidden activations.
    """

    def __init__(self, d_model: int, ff_dim: int, dropout: float) -> None:
        super().__init__()
        self.inner = nn.Linear(d_model, ff_dim)  # W_1, b_1
        self.outer = nn.Linear(ff_dim, d_model)  # W_2, b_2
        self.dropout = nn.Dropout(dropout)
        for proj in (self.inner, self.outer):
            nn.init.xavier_uniform_(proj.weight)
            nn.init.zeros_(proj.bias)

    def forward(self, x: Tensor) -> Tensor:
        """x: (B, N, d_model) -> (B, N, d_model)."""
        return self.outer(self.dropout(torch.relu(self.inner(x))))


class Residual(nn.Module):
    """Residual connection with dropout and LayerNorm around one sublayer (section 5.4).

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


class EncoderLayer(nn.Module):
    """Self-attention + feed-forward, each in a residual block (section 3.1, "Encoder").

    Args:
        d_model, heads, ff_dim: sizes.
        dropout: residual and feed-forward dropout.
        attention_dropout: dropout on attention weights.
        pre_norm: pre-norm (True) or post-norm (False) residual blocks.
        self_attention: the self-attention mechanism; None = full.
    """

    def __init__(
        self,
        d_model: int,
        heads: int,
        ff_dim: int,
        dropout: float,
        attention_dropout: float,
        pre_norm: bool,
        self_attention: SelfAttentionOptions | None = None,
    ) -> None:
        super().__init__()
        self.self_attn = build_self_attention(self_attention, d_model, heads, attention_dropout)
        self.self_block = Residual(d_model, dropout, pre_norm)
        self.ff = FeedForward(d_model, ff_dim, dropout)
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
        x = self.ff_block.combine(x, self.ff(self.ff_block.sublayer_input(x)))
        return x, weights


class TransformerEncoder(nn.Module):
    """A stack of encoder layers over already embedded inputs (+ final LayerNorm if pre-norm).

    Args:
        layers: number of layers N.
        d_model, heads, ff_dim, dropout, attention_dropout, pre_norm, self_attention: as in
            `EncoderLayer`.
    """

    def __init__(
        self,
        layers: int,
        d_model: int,
        heads: int,
        ff_dim: int,
        dropout: float,
        attention_dropout: float,
        pre_norm: bool,
        self_attention: SelfAttentionOptions | None = None,
    ) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            EncoderLayer(
                d_model, heads, ff_dim, dropout, attention_dropout, pre_norm, self_attention
            )
            for _ in range(layers)
        )
        # pre-norm leaves the residual stream unnormalised: normalise once at the end
        self.final_norm: nn.Module = nn.LayerNorm(d_model) if pre_norm else nn.Identity()

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


class DecoderLayerOutput(NamedTuple):
    """What one decoder layer returns.

    output: (B, T, d_model).
    self_cache: this layer's self-attention state after the new positions (incremental
        decoding), None for teacher forcing.
    self_weights: (B, H, T, t) or None.
    cross_weights: (B, H, T, S) or None.
    """

    output: Tensor
    self_cache: SelfCache | None
    self_weights: Tensor | None
    cross_weights: Tensor | None


class DecoderLayer(nn.Module):
    """Causal self-attention, cross-attention over the memory, feed-forward (section 3.1).

    The same code serves teacher forcing (no past, T new positions) and incremental decoding
    (cached self-attention state, usually T = 1 new position).

    Args:
        d_model, heads, ff_dim, dropout, attention_dropout, pre_norm: as in `EncoderLayer`.
        self_attention: the (causal) self-attention mechanism; None = full. Cross-attention is
            always full.
    """

    def __init__(
        self,
        d_model: int,
        heads: int,
        ff_dim: int,
        dropout: float,
        attention_dropout: float,
        pre_norm: bool,
        self_attention: SelfAttentionOptions | None = None,
    ) -> None:
        super().__init__()
        self.self_attn = build_self_attention(
            self_attention, d_model, heads, attention_dropout, causal=True
        )
        self.self_block = Residual(d_model, dropout, pre_norm)
        self.cross_attn = MultiHeadAttention(d_model, heads, attention_dropout)
        self.cross_block = Residual(d_model, dropout, pre_norm)
        self.ff = FeedForward(d_model, ff_dim, dropout)
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
        attended, cross_weights = self.cross_attn.attend(
            h, *memory_kv, memory_mask, need_weights=need_weights
        )
        x = self.cross_block.combine(x, attended)

        x = self.ff_block.combine(x, self.ff(self.ff_block.sublayer_input(x)))
        return DecoderLayerOutput(x, self_cache, self_weights, cross_weights)


class TransformerSeq2Seq(Seq2Seq):
    """Transformer encoder-decoder (Vaswani et al. 2017) behind the `Seq2Seq` interface.

    Args:
        src_vocab_size, tgt_vocab_size: vocabulary sizes.
        pad_id, bos_id, eos_id: special token ids (shared by source and target).
        d_model: model width (paper base: 512).
        heads: attention heads H; must divide d_model.
        enc_layers, dec_layers: layers in the encoder and decoder stacks.
        ff_dim: feed-forward inner size d_ff.
        dropout: residual, embedding and feed-forward dropout P_drop.
        attention_dropout: dropout on attention weights.
        norm: "pre" (LayerNorm before each sublayer, final LayerNorm) or "post" (the paper's).
        positions: "sinusoidal" or "learned" positional encodings.
        max_positions: longest source/target with learned positions.
        tie_embeddings: the output projection reuses the target embedding matrix.
        share_src_tgt_embeddings: one embedding for source and target (equal vocab sizes).
        self_attention: encoder self-attention mechanism (attention/efficient.py); None = full.
        decoder_self_attention: use it for decoder self-attention too (causal kinds only).

    Raises:
        ValueError: for inconsistent sizes or options, e.g. a decoder use of a kind that
            cannot be causal.
    """

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        pad_id: int,
        bos_id: int,
        eos_id: int,
        *,
        d_model: int = 256,
        heads: int = 4,
        enc_layers: int = 3,
        dec_layers: int = 3,
        ff_dim: int = 1024,
        dropout: float = 0.1,
        attention_dropout: float = 0.0,
        norm: str = "pre",
        positions: str = "sinusoidal",
        max_positions: int = 1024,
        tie_embeddings: bool = True,
        share_src_tgt_embeddings: bool = False,
        self_attention: SelfAttentionOptions | None = None,
        decoder_self_attention: bool = False,
    ) -> None:
        super().__init__(pad_id, bos_id, eos_id)
        _check_options(
            src_vocab_size,
            tgt_vocab_size,
            d_model,
            heads,
            (enc_layers, dec_layers),
            norm,
            share_src_tgt_embeddings,
        )
        self.d_model = d_model
        self.heads = heads
        self.max_positions = max_positions
        self.positions = positions
        pre_norm = norm == "pre"

        self.tgt_embed = self._make_embedding(tgt_vocab_size, d_model, pad_id)
        self.src_embed = (
            self.tgt_embed
            if share_src_tgt_embeddings
            else self._make_embedding(src_vocab_size, d_model, pad_id)
        )
        self.src_positions = build_positional_encoding(positions, d_model, max_positions)
        self.tgt_positions = build_positional_encoding(positions, d_model, max_positions)
        self.embed_dropout = nn.Dropout(dropout)

        stack_args = (d_model, heads, ff_dim, dropout, attention_dropout, pre_norm)
        self.encoder = TransformerEncoder(enc_layers, *stack_args, self_attention)
        decoder_self = self_attention if decoder_self_attention else None
        self.decoder_layers = nn.ModuleList(
            DecoderLayer(*stack_args, decoder_self) for _ in range(dec_layers)
        )
        self.decoder_norm: nn.Module = nn.LayerNorm(d_model) if pre_norm else nn.Identity()

        self.output_proj = nn.Linear(d_model, tgt_vocab_size, bias=False)
        if tie_embeddings:
            self.output_proj.weight = self.tgt_embed.weight  # section 3.4: shared weight matrix
        else:
            nn.init.normal_(self.output_proj.weight, mean=0.0, std=d_model**-0.5)

    @staticmethod
    def _make_embedding(vocab_size: int, d_model: int, pad_id: int) -> nn.Embedding:
        """Embedding with N(0, d_model^-0.5) init: times sqrt(d_model) it has unit scale."""
        embedding = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        nn.init.normal_(embedding.weight, mean=0.0, std=d_model**-0.5)
        with torch.no_grad():
            embedding.weight[pad_id].zero_()
        return embedding

    def _embed(
        self, tokens: Tensor, embedding: nn.Embedding, encoding: nn.Module, positions: Tensor
    ) -> Tensor:
        """Dropout(sqrt(d_model) * E[tokens] + PE(positions)) (sections 3.4, 3.5, 5.4).

        Args:
            tokens: (B, N) token ids.
            positions: (N,) or (B, N) positions of those tokens.

        Returns:
            (B, N, d_model).
        """
        scaled = embedding(tokens) * math.sqrt(self.d_model)  # (B, N, d_model)
        return self.embed_dropout(scaled + encoding(positions).to(scaled.dtype))

    def _check_length(self, length: int) -> None:
        """Learned positions only exist up to max_positions; fail with a clear message."""
        if self.positions == "learned" and length > self.max_positions:
            raise ValueError(
                f"sequence of length {length} exceeds max_positions={self.max_positions} "
                "of the learned positional encoding"
            )

    def encode(
        self, src: Tensor, src_lengths: Tensor, need_weights: bool = False
    ) -> tuple[Tensor, Tensor, list[Tensor]]:
        """Run the encoder.

        Args:
            src: (B, S) source ids, right-padded.
            src_lengths: (B,) real source lengths.
            need_weights: explicit attention path, return the self-attention weights.

        Returns:
            memory (B, S, d_model), source mask (B, S) bool, and L weights (B, H, S, S).
        """
        self._check_length(src.size(1))
        src_mask = padding_mask(src_lengths, src.size(1))  # (B, S)
        positions = make_positions(src.size(1), device=src.device)  # (S,)
        x = self._embed(src, self.src_embed, self.src_positions, positions)  # (B, S, d_model)
        memory, weights = self.encoder(x, src_mask, need_weights)
        return memory, src_mask, weights

    def forward(
        self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, need_weights: bool = False
    ) -> Seq2SeqOutput:
        """Teacher-forced pass; see `Seq2Seq.forward`.

        Returns:
            logits (B, T, V); with need_weights, attention (B, L, H, T, S) and extras
            "decoder_self_attention" (B, L, H, T, T), "encoder_self_attention" (B, L, H, S, S),
            each absent when its self-attention kind has no weights.
        """
        self._check_length(tgt_in.size(1))
        memory, src_mask, enc_weights = self.encode(src, src_lengths, need_weights)
        positions = make_positions(tgt_in.size(1), device=tgt_in.device)  # (T,)
        x = self._embed(tgt_in, self.tgt_embed, self.tgt_positions, positions)  # (B, T, d_model)
        self_weights: list[Tensor] = []
        cross_weights: list[Tensor] = []
        for layer in self.decoder_layers:
            out = layer(x, layer.memory_kv(memory), src_mask, need_weights=need_weights)
            x = out.output
            if out.self_weights is not None:
                self_weights.append(out.self_weights)  # (B, H, T, T)
            if out.cross_weights is not None:
                cross_weights.append(out.cross_weights)  # (B, H, T, S)
        logits = self.output_proj(self.decoder_norm(x))  # (B, T, V)
        if not need_weights:
            return Seq2SeqOutput(logits)
        extras: dict[str, Tensor] = {}
        if self_weights:
            extras["decoder_self_attention"] = torch.stack(self_weights, dim=1)  # (B,L,H,T,T)
        if enc_weights:
            extras["encoder_self_attention"] = torch.stack(enc_weights, dim=1)  # (B,L,H,S,S)
        return Seq2SeqOutput(logits, torch.stack(cross_weights, dim=1), extras)  # (B,L,H,T,S)

    def start_decoding(self, src: Tensor, src_lengths: Tensor) -> DecoderState:
        """Encode once and project the memory to every layer's cross-attention keys/values.

        Args:
            src: (B, S) source ids, right-padded.
            src_lengths: (B,) real source lengths.

        Returns:
            the state described in the module docstring, with empty self-attention caches.
        """
        memory, src_mask, _ = self.encode(src, src_lengths)
        batch = src.size(0)
        layers = []
        for layer in self.decoder_layers:
            cross_k, cross_v = layer.memory_kv(memory)  # (B, H, S, d_k) each
            # the self-attention state before any target token (full: (B, H, 0, d_k) keys)
            empty = layer.self_attn.empty_cache(batch, cross_k)
            layers.append({"cross_k": cross_k, "cross_v": cross_v, **empty})
        step = torch.zeros(batch, dtype=torch.long, device=src.device)  # (B,)
        return {
            "memory": memory,
            "memory_mask": src_mask,
            "step": step,
            "length": 0,
            "layers": layers,
        }

    def decode_step(
        self, prev_tokens: Tensor, state: DecoderState, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None, DecoderState]:
        """Feed one target token per row, attending over the cached keys/values: O(t) per step.

        Args:
            prev_tokens: (B,) the previous token (BOS at the first step).
            state: from `start_decoding` or the previous `decode_step`.
            need_weights: explicit attention path, return this step's cross-attention.

        Returns:
            logits (B, V), cross-attention (B, L, H, S) or None, and the new state (the input
            state is not modified).
        """
        step: Tensor = state["step"]  # (B,)
        # read the length from the int, not from `step`, to avoid a device sync: every row has
        # fed the same number of tokens
        length: int = state["length"] + 1
        self._check_length(length)
        positions = make_positions(1, step)  # (B, 1)
        x = self._embed(prev_tokens.unsqueeze(1), self.tgt_embed, self.tgt_positions, positions)
        new_layers = []
        cross_weights: list[Tensor] = []
        for layer, cache in zip(self.decoder_layers, state["layers"], strict=True):
            out = layer(
                x,  # (B, 1, d_model)
                (cache["cross_k"], cache["cross_v"]),
                state["memory_mask"],
                past_self=cache,
                need_weights=need_weights,
            )
            x = out.output
            new_layers.append({**cache, **(out.self_cache or {})})
            if out.cross_weights is not None:
                cross_weights.append(out.cross_weights.squeeze(2))  # (B, H, 1, S) -> (B, H, S)
        logits = self.output_proj(self.decoder_norm(x)).squeeze(1)  # (B, 1, V) -> (B, V)
        attention = torch.stack(cross_weights, dim=1) if need_weights else None  # (B, L, H, S)
        new_state = {**state, "step": step + 1, "length": length, "layers": new_layers}
        return logits, attention, new_state


def _check_options(
    src_vocab_size: int,
    tgt_vocab_size: int,
    d_model: int,
    heads: int,
    layers: tuple[int, int],
    norm: str,
    share_src_tgt_embeddings: bool,
) -> None:
    """Reject inconsistent hyperparameters with a message that says what would be valid.

    `layers` is (enc_layers, dec_layers); the other arguments are the constructor's.
    """
    if heads <= 0 or d_model % heads != 0:
        raise ValueError(
            f"d_model ({d_model}) must be divisible by heads ({heads}); "
            f"e.g. heads in {[h for h in range(1, d_model + 1) if d_model % h == 0][:8]}"
        )
    if min(layers) < 1:
        # weights are stacked per layer, and a decoder needs cross-attention to see the source
        enc_layers, dec_layers = layers
        raise ValueError(
            f"enc_layers and dec_layers must be at least 1, got {enc_layers} and {dec_layers}"
        )
    if norm not in NORMS:
        raise ValueError(f"unknown norm {norm!r}; choose one of {', '.join(NORMS)}")
    if share_src_tgt_embeddings and src_vocab_size != tgt_vocab_size:
        raise ValueError(
            "share_src_tgt_embeddings needs equal vocabulary sizes, got "
            f"src_vocab_size={src_vocab_size} and tgt_vocab_size={tgt_vocab_size}"
        )
