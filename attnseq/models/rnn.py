"""RNN encoder-decoders with attention (Bahdanau et al. 2015, Luong et al. 2015; without
attention, Cho et al. 2014): the encoder, the decoder of both styles (`RNNSeq2Seq._step`) and
the word values of `values="embeddings"` (`WordValues`); docs/internals/models.md says why.

Shapes: B batch, S source length, T target length, E encoder output size, H decoder hidden size,
emb the source embedding size, P = 2 * POSITION_SIZE.
"""

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from attnseq.attention.base import Attention
from attnseq.attention.masks import padding_mask
from attnseq.models.positional import SinusoidalPositionalEncoding
from attnseq.models.seq2seq import (
    DecoderState,
    Seq2Seq,
    Seq2SeqOutput,
    TeacherForcing,
    Vocabularies,
)

# channels per distance: sinusoids of wavelengths 2*pi .. 2*pi*10000^(14/16), distinct far
# beyond any source length the models take
POSITION_SIZE = 16


class WordValues(nn.Module):
    """The values and keys of `values="embeddings"`: the context averages the source words
    alone, c_i = sum_j a_ij v_j, and the scores read keys k_j,

        p_j = [PE(j) ; PE(n - 1 - j)]        v_j = W_v [x_j ; p_j]        k_j = h_j + W_p p_j

    x_j the source word embedding, h_j its annotation, n the source length, PE the sinusoids
    of Vaswani et al. (2017, section 3.5) at POSITION_SIZE channels, W_v and W_p projections
    to E: a bidirectional h_j also encodes its neighbours, v_j is word j alone.

    Args:
        emb_dim: source embedding size.
        size: E, the value and key size.
    """

    def __init__(self, emb_dim: int, size: int) -> None:
        super().__init__()
        self.positions = SinusoidalPositionalEncoding(POSITION_SIZE)
        self.projection = nn.Linear(emb_dim + 2 * POSITION_SIZE, size, bias=False)  # W_v
        self.key_positions = nn.Linear(2 * POSITION_SIZE, size, bias=False)  # W_p

    def where(self, lengths: Tensor, width: int) -> Tensor:
        """p_j (B, S=width, P) for sources of `lengths` (B,); past a row's length the distance
        to the end is 0 (those positions are masked wherever they are read)."""
        from_start = torch.arange(width, device=lengths.device)  # (S,)
        from_end = (lengths.unsqueeze(1) - 1 - from_start).clamp_min(0)  # (B, S)
        start = self.positions(from_start).expand(lengths.size(0), -1, -1)  # (B, S, P/2)
        return torch.cat([start, self.positions(from_end)], dim=-1)

    def forward(
        self, embedded: Tensor, annotations: Tensor, lengths: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Source embeddings (B, S, emb), annotations (B, S, E) and lengths (B,) -> the values
        v (B, S, E) and the keys k (B, S, E)."""
        where = self.where(lengths.to(embedded.device), embedded.size(1)).to(embedded.dtype)
        values = self.projection(torch.cat([embedded, where], dim=-1))
        return values, annotations + self.key_positions(where)


RNN_CLASSES: dict[str, type[nn.RNNBase]] = {"gru": nn.GRU, "lstm": nn.LSTM}

RNNInput = Tensor | PackedSequence
RNNState = Tensor | tuple[Tensor, Tensor]


def recurrence(rnn: nn.RNNBase, inputs: RNNInput, state: RNNState | None = None) -> Any:
    """`rnn(inputs, state)`. An LSTM under CPU autocast runs in float32 with autocast off where
    the CPU has no LSTM kernel of the autocast dtype (oneDNN's bf16/fp16 LSTM needs AVX-512):
    found by a one-time probe, so that processors with the kernel keep it."""
    if not (isinstance(rnn, nn.LSTM) and torch.is_autocast_enabled("cpu")):
        return rnn(inputs, state)
    if rnn.weight_ih_l0.device.type != "cpu" or _cpu_lstm_kernel(torch.get_autocast_dtype("cpu")):
        return rnn(inputs, state)
    with torch.autocast("cpu", enabled=False):
        if state is not None:
            state = tuple(part.float() for part in state) if isinstance(state, tuple) else state
        return rnn(inputs.float(), state)


@functools.cache
def _cpu_lstm_kernel(dtype: torch.dtype) -> bool:
    """Whether an LSTM runs under CPU autocast to `dtype` here (the random stream is kept)."""
    with torch.random.fork_rng(devices=[]), torch.autocast("cpu", dtype=dtype):
        try:
            nn.LSTM(1, 1)(torch.zeros(1, 1, 1))
        except RuntimeError:
            return False
    return True


# what a subclass computes after every step of a teacher-forced pass: the states before and
# after it and its attention
StepHook = Callable[[dict[str, Tensor], Tensor | None, dict[str, Tensor]], None]


class RNNPass(NamedTuple):
    """The decoder run over a whole target (teacher forcing).

    pre_output: (B, T, out), what the output projection reads.
    weights: (B, T, S) attention, or None without attention.
    states: the decoder state before the first step and after each of the T steps; Luong's
        parallel pass has one, the encoder state, that its attention over all T wrote into.
    """

    pre_output: Tensor
    weights: Tensor | None
    states: list[dict[str, Tensor]]


class RNNEncoder(nn.Module):
    """Embedding + stacked (bi)directional RNN over packed sequences."""

    def __init__(
        self,
        vocab_size: int,
        emb_dim: int,
        hidden: int,
        *,
        layers: int,
        bidirectional: bool,
        cell: str,
        dropout: float,
        pad_id: int,
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=pad_id)
        self.dropout = nn.Dropout(dropout)
        self.rnn = RNN_CLASSES[cell](
            emb_dim,
            hidden,
            num_layers=layers,
            batch_first=True,
            bidirectional=bidirectional,
            dropout=dropout if layers > 1 else 0.0,
        )
        self.output_size = hidden * (2 if bidirectional else 1)

    def forward(self, src: Tensor, src_lengths: Tensor) -> tuple[Tensor, Tensor]:
        """Encode a padded batch.

        Args:
            src: (B, S) token ids.
            src_lengths: (B,) real lengths.

        Returns:
            annotations (B, S, E) (zeros at padding) and the summary (B, E): the final state
            of the top layer, forward and backward directions concatenated.
        """
        embedded = self.dropout(self.embedding(src))  # (B, S, emb)
        # pack so the backward direction starts at each sequence's real last token
        packed = pack_padded_sequence(
            embedded, src_lengths.cpu(), batch_first=True, enforce_sorted=False
        )
        outputs, final = recurrence(self.rnn, packed)
        annotations, _ = pad_packed_sequence(outputs, batch_first=True, total_length=src.size(1))
        final_hidden = final[0] if isinstance(final, tuple) else final  # LSTM: (h, c)
        directions = 2 if self.rnn.bidirectional else 1
        top = final_hidden[-directions:]  # (dirs, B, hidden) of the top layer
        summary = top.transpose(0, 1).reshape(src.size(0), -1)  # (B, E)
        return annotations, summary


class RNNSeq2Seq(Seq2Seq):
    """Encoder-decoder with a Bahdanau- or Luong-style attentional decoder.

    Args:
        vocab: vocabulary sizes and special ids.
        attention: the score mechanism (attnseq/attention/), or None for no attention.
        style: "bahdanau" or "luong".
        enc_hidden: encoder hidden size per direction.
        hidden: decoder hidden size H.
        input_feeding: Luong only: concatenate h~_{t-1} to the next input.
        tie_embeddings: the output projection shares the target embedding matrix.
        share_src_tgt_embeddings: the encoder uses the target embedding too (one joint
            vocabulary: equal vocabulary sizes).
        init_hidden: the decoder's initial state s_0 of every layer: "bridge" = tanh(W_s
            summary) of the encoder's final states (Bahdanau et al. 2015, appendix A.2.2), or
            "zero" = 0 (the decoder then knows the source only through what it attends to).
        values: what the context averages: "annotations" (h_j) or "embeddings" (v_j, the
            word and its position; `WordValues`).
    """

    def __init__(
        self,
        vocab: Vocabularies,
        *,
        attention: Attention | None,
        style: str = "bahdanau",
        emb_dim: int = 64,
        enc_hidden: int = 64,
        hidden: int = 128,
        layers: int = 1,
        bidirectional: bool = True,
        cell: str = "gru",
        dropout: float = 0.1,
        input_feeding: bool = True,
        tie_embeddings: bool = True,
        share_src_tgt_embeddings: bool = False,
        init_hidden: str = "bridge",
        values: str = "annotations",
    ) -> None:
        super().__init__(vocab.pad_id, vocab.bos_id, vocab.eos_id)
        if init_hidden not in ("bridge", "zero"):
            raise ValueError(f"init_hidden must be 'bridge' or 'zero', got {init_hidden!r}")
        if values not in ("annotations", "embeddings"):
            raise ValueError(f"values must be 'annotations' or 'embeddings', got {values!r}")
        if values == "embeddings" and attention is None:
            raise ValueError("values='embeddings' are what attention reads; the model has none")
        if share_src_tgt_embeddings:
            vocab.check_shareable()
        if style not in ("bahdanau", "luong"):
            raise ValueError(f"decoder style must be 'bahdanau' or 'luong', got {style!r}")
        self.style = style
        self.cell = cell
        self.layers = layers
        self.hidden = hidden
        self.attention = attention
        self.input_feeding = input_feeding and style == "luong"
        self.encoder = RNNEncoder(
            vocab.src_size,
            emb_dim,
            enc_hidden,
            layers=layers,
            bidirectional=bidirectional,
            cell=cell,
            dropout=dropout,
            pad_id=vocab.pad_id,
        )
        self.embedding = nn.Embedding(vocab.tgt_size, emb_dim, padding_idx=vocab.pad_id)
        if share_src_tgt_embeddings:
            self.encoder.embedding = self.embedding
        self.dropout = nn.Dropout(dropout)
        # bridge: initial decoder state of every layer from the encoder summary (Bahdanau A.2.2)
        enc_size = self.encoder.output_size
        # the word values are E wide, so the decoder is the same either way
        self.word_values = WordValues(emb_dim, enc_size) if values == "embeddings" else None
        self.bridge = nn.Linear(enc_size, layers * hidden) if init_hidden == "bridge" else None
        out_dim = emb_dim if tie_embeddings else hidden
        self._build_decoder(emb_dim, out_dim, dropout)
        self.output = nn.Linear(out_dim, vocab.tgt_size)
        if tie_embeddings:
            self.output.weight = self.embedding.weight

    def _build_decoder(self, emb_dim: int, out_dim: int, dropout: float) -> None:
        """The decoder RNN and the layers between it and the output projection (out_dim wide):
        Bahdanau's deep output W_o, or Luong's W_c (and a projection to emb_dim for tying)."""
        enc_size, hidden = self.encoder.output_size, self.hidden
        if self.style == "bahdanau":
            rnn_input = emb_dim + enc_size
            self.pre_output = nn.Linear(hidden + enc_size + emb_dim, out_dim)  # W_o
        else:
            rnn_input = emb_dim + (hidden if self.input_feeding else 0)
            self.combine = nn.Linear(enc_size + hidden, hidden, bias=False)  # W_c
            # tying needs the output layer's input to be emb_dim wide
            self.pre_output = nn.Linear(hidden, out_dim) if out_dim != hidden else nn.Identity()
        self.rnn = RNN_CLASSES[self.cell](
            rnn_input,
            hidden,
            num_layers=self.layers,
            batch_first=True,
            dropout=dropout if self.layers > 1 else 0.0,
        )

    @property
    def has_attention(self) -> bool:
        return self.attention is not None

    def _refuse_without_annotation_attention(self, feature: str) -> None:
        """ValueError unless the model attends over the annotations, which `feature` reads."""
        if self.word_values is not None:
            raise ValueError(f"{feature}: values='embeddings' is not supported (it reads h_j)")
        if self.attention is None:
            raise ValueError(f"{feature} needs attention; the model has none")

    # ------------------------------------------------------------------ encoder side
    def _encoder_outputs(
        self, src: Tensor, src_lengths: Tensor
    ) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
        """Annotations (B, S, E), the summary (B, E), and entries a subclass adds to the
        decoder state (none here; models/rnn_hierarchical.py adds its segment level)."""
        annotations, summary = self.encoder(src, src_lengths)
        return annotations, summary, {}

    def _encode(self, src: Tensor, src_lengths: Tensor) -> dict[str, Tensor]:
        annotations, summary, extra_state = self._encoder_outputs(src, src_lengths)
        mask = padding_mask(src_lengths, src.size(1))  # (B, S)
        if self.bridge is not None:
            hidden0 = torch.tanh(self.bridge(summary))  # (B, layers*H)
            hidden0 = hidden0.view(src.size(0), self.layers, self.hidden)  # (B, layers, H)
        else:
            hidden0 = summary.new_zeros(src.size(0), self.layers, self.hidden)
        state: dict[str, Tensor] = {
            "annotations": annotations,  # (B, S, E)
            "mask": mask,
            "summary": summary,  # (B, E)
            "hidden": hidden0,  # batch-first so reorder_state can index it
            "step": torch.zeros(src.size(0), dtype=torch.long, device=src.device),
            **extra_state,
        }
        if self.cell == "lstm":
            state["cell"] = torch.zeros_like(hidden0)
        keys = annotations
        if self.word_values is not None:
            source_words = self.dropout(self.encoder.embedding(src))  # (B, S, emb)
            # v_j and k_j: (B, S, E) each
            state["values"], keys = self.word_values(source_words, annotations, src_lengths)
        if self.attention is not None:
            state["keys"] = self.attention.prepare_keys(keys)  # once per batch
        if self.input_feeding:
            state["feed"] = annotations.new_zeros(src.size(0), self.hidden)  # h~_0 = 0
        return state

    def _rnn_state(self, state: dict[str, Tensor]) -> Tensor | tuple[Tensor, Tensor]:
        """(B, layers, H) batch-first state -> the (layers, B, H) layout nn.GRU/LSTM expect."""
        hidden = state["hidden"].transpose(0, 1).contiguous()
        if self.cell == "lstm":
            return hidden, state["cell"].transpose(0, 1).contiguous()
        return hidden

    @staticmethod
    def _values(state: dict[str, Tensor]) -> Tensor:
        """What the context averages (B, S, E): the word values v_j if the state has them,
        else the annotations h_j."""
        return state.get("values", state["annotations"])

    def _attend(
        self, query: Tensor, state: dict[str, Tensor], positions: Tensor
    ) -> tuple[Tensor, Tensor | None]:
        """Context (B, T, E) and weights (B, T, S) for queries (B, T, H) at positions (B, T)."""
        if self.attention is None:
            summary = state["summary"].unsqueeze(1).expand(-1, query.size(1), -1)
            return summary, None
        return self.attention(
            query,
            state["annotations"],
            self._values(state),
            state["mask"],
            prepared_keys=state["keys"],
            query_positions=positions,
        )

    # ------------------------------------------------------------------ one decoder step
    def _step(
        self, prev_tokens: Tensor, state: dict[str, Tensor]
    ) -> tuple[Tensor, Tensor | None, dict[str, Tensor]]:
        """One decoder step: prev_tokens (B,) -> pre-output (B, out), weights (B, S), state.

        Bahdanau (Bahdanau, Cho & Bengio 2015, appendix A.2; a tanh deep output in place of
        the paper's maxout), attention from the previous state:
            c_i = Attend(s_{i-1}, h)                 s_i = RNN([y_{i-1}; c_i], s_{i-1})
            t_i = tanh(W_o [s_{i-1}; c_i; y_{i-1}])  p(y_i) = softmax(W_out t_i)
        Luong (Luong, Pham & Manning 2015, eq. 5 and section 3.3), attention from this step's:
            h_t = RNN([y_{t-1}; h~_{t-1}], h_{t-1})  c_t = Attend(h_t, h)
            h~_t = tanh(W_c [c_t; h_t])              p(y_t) = softmax(W_out h~_t)
        Without attention (Cho et al. 2014, section 2.2), c_i is the encoder summary and t_i
        reads s_i.
        """
        embedded = self.dropout(self.embedding(prev_tokens)).unsqueeze(1)  # (B, 1, emb)
        positions = state["step"].unsqueeze(1)  # (B, 1)
        rnn_state = self._rnn_state(state)
        new_state = dict(state)
        if self.style == "bahdanau":
            top = state["hidden"][:, -1:]  # s_{i-1}: (B, 1, H)
            context, weights = self._attend(top, state, positions)  # (B, 1, E)
            rnn_input = torch.cat([embedded, context], dim=-1)
            output, rnn_state = recurrence(self.rnn, rnn_input, rnn_state)
            # Bahdanau A.2.2 reads s_{i-1} (the state that chose c_i); Cho et al.'s encoder-
            # decoder without attention reads s_i
            decoder_state = top if self.attention is not None else output
            features = torch.cat([decoder_state, context, embedded], dim=-1)
            pre_output = torch.tanh(self.pre_output(features))
        else:
            rnn_input = embedded
            if self.input_feeding:
                rnn_input = torch.cat([embedded, state["feed"].unsqueeze(1)], dim=-1)
            output, rnn_state = recurrence(self.rnn, rnn_input, rnn_state)  # h_t: (B, 1, H)
            context, weights = self._attend(output, state, positions)
            attentional = torch.tanh(self.combine(torch.cat([context, output], dim=-1)))
            if self.input_feeding:
                new_state["feed"] = attentional.squeeze(1)
            pre_output = self.pre_output(attentional)
        if self.cell == "lstm":
            new_state["hidden"] = rnn_state[0].transpose(0, 1)
            new_state["cell"] = rnn_state[1].transpose(0, 1)
        else:
            new_state["hidden"] = rnn_state.transpose(0, 1)
        new_state["step"] = state["step"] + 1
        weights = None if weights is None else weights.squeeze(1)
        return pre_output.squeeze(1), weights, new_state

    # ------------------------------------------------------------------ Seq2Seq interface
    def teacher_forced(self, inputs: TeacherForcing) -> Seq2SeqOutput:
        """The teacher-forced pass (`Seq2Seq.forward`); the one attention is computed anyway, so
        `alignment` (layer and head ignored) costs nothing."""
        state = self._encode(inputs.src, inputs.src_lengths)
        if self.style == "luong" and not self.input_feeding:
            decoded = self._luong_parallel(inputs.tgt_in, state)
        else:
            decoded = self._step_by_step(inputs.tgt_in, state)
        return self._output(decoded, inputs)

    def _output(self, decoded: RNNPass, inputs: TeacherForcing) -> Seq2SeqOutput:
        """The output of a teacher-forced pass: logits (B, T, V) and the attention asked for."""
        logits = self.output(self.dropout(decoded.pre_output))  # (B, T, V)
        output = Seq2SeqOutput(logits, decoded.weights if inputs.need_weights else None)
        if inputs.alignment is not None:
            output.alignment_attention = decoded.weights  # (B, T, S); None without attention
        return output

    def _step_by_step(
        self, tgt_in: Tensor, state: dict[str, Tensor], per_step: StepHook | None = None
    ) -> RNNPass:
        """The decoder over tgt_in (B, T), one `_step` per position, from the encoder state;
        `per_step(before, weights, after)` runs after each step, with the states around it."""
        outputs, all_weights, states = [], [], [state]
        for t in range(tgt_in.size(1)):
            pre, step_weights, new_state = self._step(tgt_in[:, t], state)
            if per_step is not None:
                per_step(state, step_weights, new_state)
            outputs.append(pre)
            all_weights.append(step_weights)
            states.append(new_state)
            state = new_state
        weights = None if all_weights[0] is None else torch.stack(all_weights, dim=1)
        return RNNPass(torch.stack(outputs, dim=1), weights, states)

    def _luong_parallel(self, tgt_in: Tensor, state: dict[str, Tensor]) -> RNNPass:
        """Luong without input feeding: one RNN call over T, attention for all T at once (into
        the one state, which is the encoder's)."""
        embedded = self.dropout(self.embedding(tgt_in))  # (B, T, emb)
        outputs, _ = recurrence(self.rnn, embedded, self._rnn_state(state))  # (B, T, H)
        positions = torch.arange(tgt_in.size(1), device=tgt_in.device).expand(tgt_in.size(0), -1)
        context, weights = self._attend(outputs, state, positions)  # (B, T, E), (B, T, S)
        attentional = torch.tanh(self.combine(torch.cat([context, outputs], dim=-1)))
        return RNNPass(self.pre_output(attentional), weights, [state])

    def start_decoding(self, src: Tensor, src_lengths: Tensor) -> DecoderState:
        return self._encode(src, src_lengths)

    def decode_step(
        self, prev_tokens: Tensor, state: DecoderState, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None, DecoderState]:
        pre_output, weights, state = self._step(prev_tokens, state)
        # the same dropout as forward: a no-op when decoding (eval mode), and in training mode
        # a step-by-step pass computes what forward computes (benchmarks/check_loss_curve.py)
        logits = self.output(self.dropout(pre_output))  # (B, V)
        return logits, weights if need_weights else None, state
