"""Batches: padded tensors for a group of examples.

`collate` turns one group of encoded examples (token_sampler.py decides which go together) into
a `Batch` of right-padded tensors with BOS/EOS in place (a `CopyBatch`, with the extended source,
for copy models; with guided alignment's gold distribution, `gold_distribution`, when given the
examples' piece links); `encode_pairs` turns text pairs into the encoded examples both consume.

Shapes: B batch, S source length, T target length (target + 1, for BOS/EOS).
"""

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from attnseq.data.extended_vocab import ExtendedExample
from attnseq.data.tokenizers import Tokenizer

Example = tuple[list[int], list[int]]  # (source ids, target ids), no BOS/EOS
PieceLinks = list[tuple[int, int]]  # (source piece, target piece) gold links of one example
_TENSORS = ("src", "src_lengths", "tgt_in", "tgt_out", "tgt_lengths", "indices")


@dataclass
class Batch:
    """A padded batch, ready for `Seq2Seq.forward(src, src_lengths, tgt_in)`.

    src: (B, S) long source ids, right-padded with pad_id (S >= 1 even if every source is empty).
    src_lengths: (B,) long number of real source tokens.
    tgt_in: (B, T) long decoder input: BOS + target, right-padded.
    tgt_out: (B, T) long decoder output / loss target: target + EOS, right-padded.
    tgt_lengths: (B,) long target length + 1 (real positions of tgt_in and of tgt_out).
    indices: (B,) long position of each example in the dataset; without shuffling batches are
        sorted by length, and `indices` restores the original order (e.g. for hypothesis files).
    alignment: guided alignment only: (B, T, S) float gold distribution over the source of the
        step that predicts tgt_out[:, t] (`gold_distribution`); None otherwise.
    """

    src: Tensor
    src_lengths: Tensor
    tgt_in: Tensor
    tgt_out: Tensor
    tgt_lengths: Tensor
    indices: Tensor
    alignment: Tensor | None = field(default=None, kw_only=True)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "Batch":
        """A copy with every tensor on `device` (non_blocking pays off from pinned memory)."""
        return Batch(
            *(getattr(self, name).to(device, non_blocking=non_blocking) for name in _TENSORS),
            alignment=_moved(
                self.alignment, lambda gold: gold.to(device, non_blocking=non_blocking)
            ),
        )

    def pin_memory(self) -> "Batch":
        """A copy in page-locked host memory (what DataLoader's pin_memory calls)."""
        return Batch(
            *(getattr(self, name).pin_memory() for name in _TENSORS),
            alignment=_moved(self.alignment, Tensor.pin_memory),
        )

    def copy_inputs(self) -> dict[str, Any]:
        """The keyword arguments a copy model's forward/start_decoding take: none here
        (`CopyBatch` has them)."""
        return {}

    @property
    def size(self) -> int:
        """B, the number of examples."""
        return self.src.size(0)

    @property
    def n_src_tokens(self) -> int:
        """Real (non-pad) source tokens."""
        return int(self.src_lengths.sum())

    @property
    def n_tgt_tokens(self) -> int:
        """Real target positions, EOS included: the number of tokens the loss is taken over."""
        return int(self.tgt_lengths.sum())

    @property
    def n_padded_tokens(self) -> int:
        """Positions in the padded tensors, B*S + B*T (compute actually spent)."""
        return self.src.numel() + self.tgt_in.numel()

    @property
    def src_mask(self) -> Tensor:
        """(B, S) bool, True at real source tokens."""
        positions = torch.arange(self.src.size(1), device=self.src.device)
        return positions.unsqueeze(0) < self.src_lengths.unsqueeze(1)

    @property
    def tgt_mask(self) -> Tensor:
        """(B, T) bool, True at real target positions (of tgt_in and tgt_out alike)."""
        positions = torch.arange(self.tgt_in.size(1), device=self.tgt_in.device)
        return positions.unsqueeze(0) < self.tgt_lengths.unsqueeze(1)


def _moved(tensor: Tensor | None, move: Callable[[Tensor], Tensor]) -> Tensor | None:
    return None if tensor is None else move(tensor)


@dataclass
class CopyBatch(Batch):
    """A `Batch` for a copy model (pointer-generator), collated with extended examples
    (attnseq/data/extended_vocab.py); `tgt_out` holds the extended labels (copied
    out-of-vocabulary words get ids >= V), `tgt_in` stays in the target vocabulary.

    src_ext: (B, S) long, the source in the extended vocabulary (pad_id at padding).
    oovs: per example, its out-of-vocabulary source words (id V + k is oovs[b][k]).
    """

    src_ext: Tensor
    oovs: list[list[str]]

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "CopyBatch":
        moved = super().to(device, non_blocking)
        return CopyBatch(
            **vars(moved),
            src_ext=self.src_ext.to(device, non_blocking=non_blocking),
            oovs=self.oovs,
        )

    def pin_memory(self) -> "CopyBatch":
        pinned = super().pin_memory()
        return CopyBatch(**vars(pinned), src_ext=self.src_ext.pin_memory(), oovs=self.oovs)

    @property
    def n_oov(self) -> int:
        """K, the most out-of-vocabulary source words of one example."""
        return max((len(words) for words in self.oovs), default=0)

    def copy_inputs(self) -> dict[str, Any]:
        """`src_ext` and `n_oov`: the keyword arguments of a copy model's forward."""
        return {"src_ext": self.src_ext, "n_oov": self.n_oov}


def collate(
    examples: Sequence[Example],
    indices: Sequence[int],
    *,
    pad_id: int,
    bos_id: int,
    eos_id: int,
    extended: Sequence[ExtendedExample] | None = None,
    alignments: Sequence[PieceLinks] | None = None,
) -> Batch:
    """Pad a group of encoded examples into a `Batch`.

    Args:
        examples: (source ids, target ids) pairs, without BOS/EOS.
        indices: the dataset position of each example (same length as `examples`).
        pad_id, bos_id, eos_id: special ids of the tokenizer(s).
        extended: copy models: each example's extended-vocabulary view; the result is then a
            `CopyBatch` whose `tgt_out` holds the extended labels.
        alignments: guided alignment: each example's gold piece links; the batch then carries
            their `gold_distribution` as `alignment`.
    """
    if not examples:
        raise ValueError("cannot collate an empty batch")
    if len(indices) != len(examples):
        raise ValueError(f"{len(examples)} examples but {len(indices)} indices")
    src_lengths = [len(src) for src, _ in examples]
    tgt_lengths = [len(tgt) + 1 for _, tgt in examples]
    # S >= 1: a zero-width source tensor breaks encoders; the empty source stays fully masked.
    S = max(1, max(src_lengths))
    T = max(tgt_lengths)
    # Pad as Python lists and build each tensor once: much faster than per-row tensor writes.
    src = [list(s) + [pad_id] * (S - len(s)) for s, _ in examples]
    tgt_in = [[bos_id, *t] + [pad_id] * (T - len(t) - 1) for _, t in examples]
    tgt_out = [[*t, eos_id] + [pad_id] * (T - len(t) - 1) for _, t in examples]
    if extended is not None:
        if len(extended) != len(examples):
            raise ValueError(f"{len(examples)} examples but {len(extended)} extended ones")
        tgt_out = [[*e.tgt_ext, eos_id] + [pad_id] * (T - len(e.tgt_ext) - 1) for e in extended]
    batch = Batch(
        src=torch.tensor(src, dtype=torch.long),  # (B, S)
        src_lengths=torch.tensor(src_lengths, dtype=torch.long),  # (B,)
        tgt_in=torch.tensor(tgt_in, dtype=torch.long),  # (B, T)
        tgt_out=torch.tensor(tgt_out, dtype=torch.long),  # (B, T)
        tgt_lengths=torch.tensor(tgt_lengths, dtype=torch.long),  # (B,)
        indices=torch.tensor(list(indices), dtype=torch.long),  # (B,)
        alignment=None if alignments is None else gold_distribution(alignments, T, S),
    )
    if extended is None:
        return batch
    src_ext = [e.src_ext + [pad_id] * (S - len(e.src_ext)) for e in extended]
    return CopyBatch(
        **vars(batch),
        src_ext=torch.tensor(src_ext, dtype=torch.long),  # (B, S)
        oovs=[list(e.oovs) for e in extended],
    )


def gold_distribution(alignments: Sequence[PieceLinks], T: int, S: int) -> Tensor:
    """Guided alignment's gold distribution of a batch (Garg et al. 2019, section 4.2: the gold
    alignment matrix with each row normalised to a distribution over the source).

    The decoder step t predicts target piece t (`tgt_out[:, t]`), so its row is over the source
    pieces linked to target piece t:

        G[b, t, s] = 1 / |{s' : (s', t) in links_b}|  if (s, t) in links_b, else 0

    A step whose target piece has no link (EOS and padding never have one) keeps a zero row and
    so adds nothing to the loss.

    Args:
        alignments: each example's (source piece, target piece) links.
        T, S: the batch's padded target and source lengths.

    Returns:
        (B, T, S) float.
    """
    gold = torch.zeros(len(alignments), T, S)
    rows = [(b, t, s) for b, links in enumerate(alignments) for s, t in links]
    if rows:
        b, t, s = torch.tensor(rows, dtype=torch.long).unbind(dim=1)
        gold[b, t, s] = 1.0
    return gold / gold.sum(dim=-1, keepdim=True).clamp_min(1.0)  # (B, T, S), rows sum to 1 or 0


def encode_pairs(
    pairs: Iterable[tuple[str, str]], src_tokenizer: Tokenizer, tgt_tokenizer: Tokenizer
) -> list[Example]:
    """Encode (source text, target text) pairs into (source ids, target ids), no BOS/EOS."""
    return [(src_tokenizer.encode(src), tgt_tokenizer.encode(tgt)) for src, tgt in pairs]


def example_lengths(examples: Sequence[Example]) -> list[tuple[int, int]]:
    """(source length, target length) of every example: what `TokenBatchSampler` takes."""
    return [(len(src), len(tgt)) for src, tgt in examples]


def iterate_batches(
    examples: Sequence[Example],
    batches: Sequence[Sequence[int]],
    *,
    pad_id: int,
    bos_id: int,
    eos_id: int,
    start: int = 0,
) -> Iterator[Batch]:
    """Collate `batches` (lists of example positions) in order, from batch number `start` on
    (resuming mid-epoch: `start` is the saved batch position)."""
    for batch in batches[start:]:
        yield collate(
            [examples[i] for i in batch], batch, pad_id=pad_id, bos_id=bos_id, eos_id=eos_id
        )
