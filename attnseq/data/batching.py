"""Batches: which examples go together (`TokenBatchSampler`: length buckets under a budget of
padded tokens) and the padded tensors of each group (`collate` -> `Batch`, `CopyBatch`).

Shapes: B batch, S source length, T target length (target + 1, for BOS/EOS).
"""

import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
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


def example_lengths(examples: Sequence[Example]) -> np.ndarray:
    """(N, 2) int32: (source length, target length) of every example, what `TokenBatchSampler`
    takes; read from the offsets of a memory-mapped split (data/mapped_split.py) without
    reading its rows."""
    lengths = getattr(examples, "lengths", None)
    if lengths is not None:
        return lengths()
    table = np.fromiter(
        (length for src, tgt in examples for length in (len(src), len(tgt))),
        dtype=np.int32,
        count=2 * len(examples),
    )
    return table.reshape(-1, 2)


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


class TokenBatchSampler:
    """Groups example positions into batches by a budget of padded tokens, from length buckets.

    Every example has a width w = max(src_len, tgt_len + 1), its row length in the padded tensors
    of its own side (the decoder side carries BOS/EOS). A batch holds as many examples as fit
    B * max(w) <= max_tokens (and B <= max_sentences); an example wider than the budget forms a
    batch of its own. The padded tensors of a batch then hold at most 2 * max_tokens positions
    (B*S + B*T), and both of them at most max_tokens.

    One epoch (`batches(epoch)`):

    1. Examples are sorted by length bucket, bucket = (w - min w) // bucket_width, and inside a
       bucket by src_len // bucket_width, then (tgt_len + 1) // bucket_width. With shuffling the
       remaining ties are broken at random (so with bucket_width=1 examples of identical lengths
       change company each epoch; a wider bucket mixes more and pads more); without it they are
       kept in (exact lengths, dataset position) order.
    2. The sorted list is cut greedily into batches by the budget. With shuffling the width used
       for the budget is the largest w of the example's bucket, so batch sizes, and hence
       `len(self)`, are the same in every epoch (a batch never exceeds the budget, since no member
       is wider than its bucket's maximum).
    3. With shuffling, the order of the batches is shuffled.

    All randomness comes from a generator seeded with (seed, epoch): `batches(epoch)` is a pure
    function of the constructor arguments and `epoch`. That is what makes resuming reproducible:
    a checkpoint stores (epoch, batch position), and on resume `batches(epoch)[position:]` are
    exactly the batches the interrupted run had left.

    Without shuffling (validation/test) the batches come in ascending length order, the same for
    every epoch; `Batch.indices` restores the dataset order.

    Sharding (data-parallel training, `num_replicas` > 1): every replica computes the same
    epoch (same seed) and takes batches `rank, rank + R, rank + 2R, ...` of it (R =
    `num_replicas`), cut to n // R batches, so every replica has the same number of steps (no
    collective waits for a replica that has run out) and step k of the R replicas together covers
    batches k*R .. k*R + R - 1 of the single-process order: the global batch. The last n % R
    batches of an epoch are left out (with shuffling, different ones each epoch). Shards stay a
    pure function of (constructor arguments, epoch), so resuming works as above.

    Also usable as a `torch.utils.data.DataLoader(batch_sampler=...)`: call `set_epoch` before
    iterating, as with DistributedSampler.
    """

    def __init__(
        self,
        lengths: Sequence[tuple[int, int]],
        max_tokens: int,
        *,
        max_sentences: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        bucket_width: int | None = None,
        num_buckets: int | None = None,
        num_replicas: int = 1,
        rank: int = 0,
    ) -> None:
        """
        Args:
            lengths: (source length, target length) of every example, without BOS/EOS.
            max_tokens: budget: batch size x max(longest src, longest tgt + 1).
            max_sentences: optional cap on the batch size.
            shuffle: random tie-breaking and batch order (training); False keeps length order.
            seed: seed of the per-epoch generators (>= 0).
            bucket_width: lengths per bucket (default 1: exact lengths). Exclusive with
                `num_buckets`, which splits the range of widths into that many equal buckets.
            num_replicas: processes sharing each epoch's batches (data parallelism).
            rank: this process's share, 0 <= rank < num_replicas.
        """
        _check_sampler_arguments(
            max_tokens, max_sentences, seed, bucket_width, num_buckets, num_replicas, rank
        )
        table = np.asarray(lengths).reshape(-1, 2)  # (N, 2)
        if (table < 0).any():
            raise ValueError("lengths must be >= 0")
        if table.size and table.max() >= np.iinfo(np.int32).max:
            raise ValueError("lengths must be < 2**31 - 1")
        # int32: 20 bytes per example for the five arrays below, at millions of examples
        table = table.astype(np.int32, copy=False)
        self.max_tokens = max_tokens
        self.max_sentences = max_sentences
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.num_replicas = num_replicas
        self.rank = rank
        self._src = table[:, 0]  # (N,)
        self._tgt1 = table[:, 1] + 1  # (N,) target + BOS/EOS
        self._width = np.maximum(self._src, self._tgt1)  # (N,) >= 1
        self._assign_buckets(bucket_width, num_buckets)
        self._fixed: list[np.ndarray] | None = None  # unshuffled batches, the same every epoch
        # The last shuffled epoch's batches: the length, the padding log line and the first
        # epoch's updates all ask for epoch 0, which takes seconds at millions of examples.
        self._last_epoch: tuple[int, list[np.ndarray]] | None = None
        self._global_len = len(self._global_arrays(0))
        self._len = self._global_len // num_replicas

    def _assign_buckets(self, bucket_width: int | None, num_buckets: int | None) -> None:
        """Each example's length bucket, and the largest width in its bucket: the budget width
        when shuffling (see the class docstring, step 2)."""
        n = len(self._width)
        min_width = int(self._width.min()) if n else 1
        max_width = int(self._width.max()) if n else 1
        if num_buckets is not None:
            bucket_width = math.ceil((max_width - min_width + 1) / num_buckets)
        self.bucket_width = bucket_width or 1
        self._bucket = (self._width - min_width) // self.bucket_width  # (N,)
        # The widths present (few: one per length) and their buckets: each bucket's largest
        # width from W values instead of N.
        present = np.flatnonzero(np.bincount(self._width, minlength=1)).astype(np.int32)  # (W,)
        present_bucket = (present - min_width) // self.bucket_width  # (W,)
        bucket_max = np.zeros(int(self._bucket.max()) + 1 if n else 0, dtype=np.int32)
        np.maximum.at(bucket_max, present_bucket, present)
        self._bucket_max_width = bucket_max[self._bucket]  # (N,)

    def __len__(self) -> int:
        """Number of batches of this replica; the same for every epoch (see the class
        docstring, step 2) and every replica."""
        return self._len

    @property
    def global_len(self) -> int:
        """Number of batches of an epoch before sharding."""
        return self._global_len

    def set_epoch(self, epoch: int) -> None:
        """The epoch `__iter__` yields (for DataLoader use)."""
        self.epoch = epoch

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.batches(self.epoch))

    def batches(self, epoch: int) -> list[list[int]]:
        """This replica's batches (lists of example positions) of `epoch`; with one replica
        every example exactly once.

        A pure function of (constructor arguments, epoch). `epoch_batches` holds the same
        batches as numpy arrays (8 bytes per example instead of a Python int's ~40).
        """
        return [batch.tolist() for batch in self.epoch_batches(epoch)]

    def epoch_batches(self, epoch: int) -> list[np.ndarray]:
        """This replica's batches of `epoch` as (B,) int64 arrays of example positions, views
        of one array of the epoch's order: what training iterates over."""
        batches = self._global_arrays(epoch)
        if self.num_replicas == 1:
            return batches
        return batches[self.rank :: self.num_replicas][: len(batches) // self.num_replicas]

    def global_batches(self, epoch: int) -> list[list[int]]:
        """All batches of `epoch`, before sharding; every example exactly once."""
        return [batch.tolist() for batch in self._global_arrays(epoch)]

    def _global_arrays(self, epoch: int) -> list[np.ndarray]:
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        if not self.shuffle:
            if self._fixed is None:
                # by (width, src_len, tgt_len + 1), ties in dataset order
                keys = (self._width, self._src, self._tgt1)
                order = _stable_order(keys, np.arange(len(self._src)))
                self._fixed = self._cut(order, self._width)
            return list(self._fixed)
        if self._last_epoch is not None and self._last_epoch[0] == epoch:
            return list(self._last_epoch[1])
        rng = np.random.default_rng([self.seed, epoch])
        tie_break = rng.permutation(len(self._src))
        w = self.bucket_width
        # by (bucket, src_len // w, (tgt_len + 1) // w), ties in the order of `tie_break`'s
        # ranks: the examples listed by ascending tie_break are tie_break's inverse permutation
        by_tie_break = np.empty_like(tie_break)
        by_tie_break[tie_break] = np.arange(len(tie_break))
        del tie_break
        order = _stable_order((self._bucket, self._src // w, self._tgt1 // w), by_tie_break)
        batches = self._cut(order, self._bucket_max_width)
        shuffled = [batches[i] for i in rng.permutation(len(batches)).tolist()]
        self._last_epoch = (epoch, shuffled)
        return list(shuffled)

    def _cut(self, order: np.ndarray, width: np.ndarray) -> list[np.ndarray]:
        """Greedy cut of `order` (N,) into batches with B * max(width) <= max_tokens: walking
        `order`, an example joins the current batch unless the batch, with it, would exceed the
        budget or max_sentences; then it starts the next batch.

        Both orders sort by width first (the bucket's largest width when shuffling, the
        example's own otherwise), so the widths along `order` never decrease and a batch's
        widest member is its last. The walk then only changes course where the width changes:
        inside a run of equal width w a fresh batch takes k = max(1, min(max_tokens // w,
        max_sentences)) examples, and the batch open when the run begins takes as many of the
        run as keep it within k. So the cut is a loop over the distinct widths (a few hundred),
        not over the examples.
        """
        widths = width[order]  # (N,) non-decreasing
        n = len(order)
        if n == 0:
            return []
        assert not (np.diff(widths) < 0).any(), "widths must not decrease along the order"
        run_starts = np.flatnonzero(np.diff(widths)) + 1
        bounds = np.concatenate([[0], run_starts, [n]]).tolist()
        starts: list[np.ndarray] = []  # first position (in `order`) of every batch
        open_size = 0  # members of the batch still open before the run
        for begin, end in itertools.pairwise(bounds):
            w = int(widths[begin])
            fits = self.max_tokens // w
            if self.max_sentences is not None:
                fits = min(fits, self.max_sentences)
            joined = min(max(fits - open_size, 0), end - begin) if open_size else 0
            position = begin + joined
            open_size += joined
            if position == end:
                continue
            size = max(1, fits)
            starts.append(np.arange(position, end, size))
            open_size = end - (position + size * (len(starts[-1]) - 1))
        cuts = np.concatenate(starts)[1:] if starts else np.zeros(0, dtype=np.int64)
        return np.split(order, cuts)

    def padding_share(self, epoch: int) -> float:
        """Share of padded positions in the epoch's batches, counted as `collate` pads them
        (B*S + B*T positions per batch, S >= 1). 0.0 for an empty dataset."""
        batches = self.epoch_batches(epoch)
        if not batches:
            return 0.0
        members = np.concatenate(batches)  # (M,) the epoch's examples, batch after batch
        sizes = np.fromiter(map(len, batches), np.int64, count=len(batches))  # (B,)
        starts = np.cumsum(sizes) - sizes
        src, tgt1 = self._src[members], self._tgt1[members]
        real = int(src.sum(dtype=np.int64) + tgt1.sum(dtype=np.int64))
        widths = np.maximum(np.maximum.reduceat(src, starts), 1) + np.maximum.reduceat(tgt1, starts)
        padded = int((sizes * widths).sum())
        return 1.0 - real / padded if padded else 0.0


def _stable_order(keys: tuple[np.ndarray, ...], start: np.ndarray) -> np.ndarray:
    """The example positions `start` (N,) reordered by `keys` (each (N,), the first the
    primary one), examples with equal keys kept in their order in `start`: the same as
    `np.lexsort((rank_in_start, *reversed(keys)))`, in one stable sort of one int64 key that
    packs the keys (mixed radix) where they fit in 62 bits, else through np.lexsort."""
    bases = [int(key.max()) + 1 if key.size else 1 for key in keys]
    if math.prod(bases) >= 1 << 62:
        ranks = np.empty_like(start)
        ranks[start] = np.arange(len(start))
        return np.lexsort((ranks, *reversed(keys)))
    packed = np.zeros(len(start), dtype=np.int64)
    for key, base in zip(keys, bases, strict=True):
        packed *= base
        packed += key[start]
    return start[np.argsort(packed, kind="stable")]


def _check_sampler_arguments(
    max_tokens: int,
    max_sentences: int | None,
    seed: int,
    bucket_width: int | None,
    num_buckets: int | None,
    num_replicas: int,
    rank: int,
) -> None:
    """ValueError naming the first `TokenBatchSampler` argument out of range."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    if max_sentences is not None and max_sentences < 1:
        raise ValueError(f"max_sentences must be >= 1 or None, got {max_sentences}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    if bucket_width is not None and num_buckets is not None:
        raise ValueError("give bucket_width or num_buckets, not both")
    if bucket_width is not None and bucket_width < 1:
        raise ValueError(f"bucket_width must be >= 1, got {bucket_width}")
    if num_buckets is not None and num_buckets < 1:
        raise ValueError(f"num_buckets must be >= 1, got {num_buckets}")
    if num_replicas < 1 or not 0 <= rank < num_replicas:
        raise ValueError(f"need 0 <= rank < num_replicas, got rank {rank} of {num_replicas}")
