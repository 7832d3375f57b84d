"""Which examples go together in a batch: length buckets under a budget of padded tokens, so
little compute is spent on padding (`TokenBatchSampler`).
"""

import math
from collections.abc import Iterator, Sequence

import numpy as np


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
        table = np.asarray(lengths, dtype=np.int64).reshape(-1, 2)  # (N, 2)
        if (table < 0).any():
            raise ValueError("lengths must be >= 0")
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
        self._fixed: list[list[int]] | None = None  # unshuffled batches, the same every epoch
        self._global_len = len(self.global_batches(0))
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
        bucket_max = np.zeros(int(self._bucket.max()) + 1 if n else 0, dtype=np.int64)
        np.maximum.at(bucket_max, self._bucket, self._width)
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

        A pure function of (constructor arguments, epoch).
        """
        batches = self.global_batches(epoch)
        if self.num_replicas == 1:
            return batches
        return batches[self.rank :: self.num_replicas][: len(batches) // self.num_replicas]

    def global_batches(self, epoch: int) -> list[list[int]]:
        """All batches of `epoch`, before sharding; every example exactly once."""
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        if not self.shuffle:
            if self._fixed is None:
                positions = np.arange(len(self._src))
                # np.lexsort: the last key is the primary one.
                order = np.lexsort((positions, self._tgt1, self._src, self._width))
                self._fixed = self._cut(order, self._width)
            return [list(batch) for batch in self._fixed]
        rng = np.random.default_rng([self.seed, epoch])
        tie_break = rng.permutation(len(self._src))
        w = self.bucket_width
        order = np.lexsort((tie_break, self._tgt1 // w, self._src // w, self._bucket))
        batches = self._cut(order, self._bucket_max_width)
        return [batches[i] for i in rng.permutation(len(batches))]

    def _cut(self, order: np.ndarray, width: np.ndarray) -> list[list[int]]:
        """Greedy cut of `order` (N,) into batches with B * max(width) <= max_tokens."""
        batches: list[list[int]] = []
        current: list[int] = []
        current_width = 0
        for index, w in zip(order.tolist(), width[order].tolist(), strict=True):
            new_width = max(current_width, w)
            full = (len(current) + 1) * new_width > self.max_tokens or (
                self.max_sentences is not None and len(current) >= self.max_sentences
            )
            if current and full:
                batches.append(current)
                current, new_width = [], w
            current.append(index)
            current_width = new_width
        if current:
            batches.append(current)
        return batches

    def padding_share(self, epoch: int) -> float:
        """Share of padded positions in the epoch's batches, counted as `collate` pads them
        (B*S + B*T positions per batch, S >= 1). 0.0 for an empty dataset."""
        real = padded = 0
        for batch in self.batches(epoch):
            src = self._src[batch]
            tgt1 = self._tgt1[batch]
            real += int(src.sum() + tgt1.sum())
            padded += len(batch) * (max(1, int(src.max())) + int(tgt1.max()))
        return 1.0 - real / padded if padded else 0.0


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
