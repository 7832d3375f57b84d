"""Batches of example positions -> padded `Batch`es on the training device, in this process or
in DataLoader workers (pinned memory, non-blocking copies on CUDA); the sampler alone chooses
the batches, so workers never change them. Shapes: as in batching.py."""

from collections.abc import Iterable, Iterator, Sequence
from functools import partial
from typing import Any, NamedTuple

import torch
from torch.utils.data import DataLoader, Dataset

from attnseq.data.batching import Batch, Example, PieceLinks, collate
from attnseq.data.extended_vocab import ExtendedExample
from attnseq.data.mapped_split import watch_in_worker
from attnseq.data.subword_sampling import SampledSegmentation


class TokenCounts(NamedTuple):
    """Real source tokens, real target positions (EOS included: what the loss is taken over)
    and padded positions B*S + B*T of one batch."""

    src: int
    tgt: int
    padded: int


IndexedExample = tuple[int, Example, ExtendedExample | None, PieceLinks | None]


class _IndexedExamples(Dataset):
    """Position i -> (i, example i, its extended view or None, its gold piece links or None):
    collate needs each example's dataset position, copy models its extended-vocabulary view,
    guided alignment its links. With subword sampling the key is (epoch, i) and example i is
    that epoch's sampled segmentation.

    `__getitems__` (which DataLoader calls with a whole batch of keys) gathers a batch's
    examples at once: from a memory-mapped split (data/mapped_split.py) that is one lookup
    for all rows, in the worker that builds the batch.
    """

    def __init__(
        self,
        examples: Sequence[Example],
        extended: Sequence[ExtendedExample] | None,
        alignments: Sequence[PieceLinks] | None,
    ) -> None:
        self.examples = examples
        self.extended = extended
        self.alignments = alignments
        self.sampling: SampledSegmentation | None = None

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, key: int | tuple[int, int]) -> IndexedExample:
        if isinstance(key, tuple):
            epoch, index = key
            assert self.sampling is not None
            return index, self.sampling.example(epoch, index), None, None
        index = key
        extended = None if self.extended is None else self.extended[index]
        links = None if self.alignments is None else self.alignments[index]
        return index, self.examples[index], extended, links

    def __getitems__(self, keys: Sequence[Any]) -> list[IndexedExample]:
        take = getattr(self.examples, "take", None)
        if self.sampling is not None or take is None or not len(keys):
            return [self[key] for key in keys]
        indices = [int(index) for index in keys]
        return [
            (
                index,
                example,
                None if self.extended is None else self.extended[index],
                None if self.alignments is None else self.alignments[index],
            )
            for index, example in zip(indices, take(indices), strict=True)
        ]


def _collate_indexed(items: list[IndexedExample], pad_id: int, bos_id: int, eos_id: int):
    has_extended, has_links = items[0][2] is not None, items[0][3] is not None
    return collate(
        [item[1] for item in items],
        [item[0] for item in items],
        pad_id=pad_id,
        bos_id=bos_id,
        eos_id=eos_id,
        extended=[item[2] for item in items] if has_extended else None,
        alignments=[item[3] for item in items] if has_links else None,
    )


class BatchLoader:
    """Collates batches of `examples` and moves them to `device`.

    Args:
        examples: the encoded (source ids, target ids) pairs, without BOS/EOS.
        pad_id, bos_id, eos_id: the special ids `collate` puts in place.
        device: where the batches go.
        num_workers: DataLoader worker processes collating ahead of the training loop (0: the
            training process collates each batch when it is needed).
        pin_memory: on CUDA, collate into page-locked memory so that the copy to the GPU is
            asynchronous (`non_blocking=True`); ignored on the CPU.
        extended: copy models: each example's extended-vocabulary view (aligned with
            `examples`); the batches are then `CopyBatch`es.
        alignments: guided alignment: each example's gold piece links (aligned with
            `examples`); the batches then carry their gold distribution (`Batch.alignment`).
    """

    def __init__(
        self,
        examples: Sequence[Example],
        *,
        pad_id: int,
        bos_id: int,
        eos_id: int,
        device: torch.device,
        num_workers: int = 0,
        pin_memory: bool = True,
        extended: Sequence[ExtendedExample] | None = None,
        alignments: Sequence[PieceLinks] | None = None,
    ) -> None:
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        for name, given in (("extended views", extended), ("alignments", alignments)):
            if given is not None and len(given) != len(examples):
                raise ValueError(f"{len(examples)} examples but {len(given)} {name}")
        self.dataset = _IndexedExamples(examples, extended, alignments)
        self.device = device
        self.num_workers = num_workers
        self.pin = pin_memory and device.type == "cuda"
        self._collate = partial(_collate_indexed, pad_id=pad_id, bos_id=bos_id, eos_id=eos_id)

    def resample_each_epoch(self, segmentation: SampledSegmentation) -> None:
        """Subword regularization (data/subword_sampling.py): every epoch's batches hold that
        epoch's sampled segmentation of the examples instead of the fixed one."""
        if len(segmentation) != len(self.dataset):
            raise ValueError(f"{len(self.dataset)} examples but {len(segmentation)} sampled")
        if self.dataset.extended is not None or self.dataset.alignments is not None:
            raise ValueError("sampled segmentations have no extended views or piece links")
        self.dataset.sampling = segmentation

    def __call__(
        self, batches: Sequence[Sequence[int]], epoch: int = 0
    ) -> Iterator[tuple[Batch, TokenCounts]]:
        """The batches of `epoch` in the given order: each as a `Batch` on the device, with
        its token counts read on the host (reading them from a GPU tensor would wait for the
        GPU)."""
        self.check_unchanged()
        keys: Sequence[Sequence[Any]] = batches
        if self.dataset.sampling is not None:
            keys = [[(epoch, int(index)) for index in indices] for indices in batches]
        if self.num_workers == 0:
            host_batches: Iterable[Batch] = (
                self._collate(self.dataset.__getitems__(indices)) for indices in keys
            )
        elif not keys:
            return
        else:
            host_batches = DataLoader(
                self.dataset,
                batch_sampler=list(keys),
                collate_fn=self._collate,
                num_workers=self.num_workers,
                pin_memory=self.pin,  # DataLoader's pin thread calls Batch.pin_memory
                # Workers' seeds come from this generator, not the global one: drawing from
                # torch's RNG here would shift the training run's dropout masks.
                generator=torch.Generator(),
                worker_init_fn=_worker_started,
            )
        try:
            for batch in host_batches:
                counts = TokenCounts(batch.n_src_tokens, batch.n_tgt_tokens, batch.n_padded_tokens)
                if self.pin and self.num_workers == 0:
                    batch = batch.pin_memory()
                yield batch.to(self.device, non_blocking=self.pin), counts
        except Exception:
            # A worker that faulted on a truncated cache file ended: DataLoader then fails with
            # "worker exited unexpectedly" or a reset connection; the file says what happened.
            self.check_unchanged()
            raise

    def check_unchanged(self) -> None:
        """CacheFileChanged when the file the examples are mapped from changed since it was
        mapped (nothing for examples in memory)."""
        check = getattr(self.dataset.examples, "check_unchanged", None)
        if check is not None:
            check()


def _worker_started(worker_id: int) -> None:
    watch_in_worker()
