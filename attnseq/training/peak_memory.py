"""The measured peak memory of one training step, what config/resources.py estimates: one update
in a fresh process, its peak resident set (docs/internals/training.md)."""

import ctypes
import ctypes.util
import gc
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from attnseq.config.conversion import config_from_dict, config_to_dict
from attnseq.config.schema import TrainConfig

STATUS = Path("/proc/self/status")
CLEAR_REFS = Path("/proc/self/clear_refs")
# the special ids of every attnseq tokenizer
PAD, UNK, BOS, EOS = 0, 1, 2, 3
FIRST_WORD = 4
# words that end a sentence in the segmenter of hierarchical models
SENTENCE_ENDS = 4


class PeakMemoryError(RuntimeError):
    """The peak could not be measured (no /proc, or the child process failed)."""


def measure_step_peak(cfg: TrainConfig, vocab: int, timeout: float = 600.0) -> int:
    """Bytes by which one training step of `cfg` (model built with a source and target
    vocabulary of `vocab` tokens) raises the peak resident memory of a fresh process.

    Raises:
        PeakMemoryError: off Linux, or when the child process fails (its last stderr line).
    """
    if not STATUS.exists():
        raise PeakMemoryError("measuring peak memory needs Linux's /proc/self/status")
    spec = json.dumps({"config": config_to_dict(cfg), "vocab": vocab})
    result = subprocess.run(
        [sys.executable, "-m", "attnseq.training.peak_memory"],
        input=spec,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines() or [f"exit status {result.returncode}"]
        raise PeakMemoryError(f"the measuring process failed: {lines[-1]}")
    return int(result.stdout.split()[-1])


def status_bytes(field: str) -> int:
    """A "kB" field of /proc/self/status (VmRSS, VmHWM) in bytes."""
    for line in STATUS.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise PeakMemoryError(f"/proc/self/status has no {field}")


def release_freed_memory() -> None:
    """Collect garbage and hand the C allocator's free memory back to the system (glibc)."""
    gc.collect()
    name = ctypes.util.find_library("c")
    if name is None:
        return
    libc = ctypes.CDLL(name)
    trim = getattr(libc, "malloc_trim", None)
    if trim is not None:
        trim(0)


def reset_peak() -> None:
    """Set VmHWM back to the current resident size."""
    CLEAR_REFS.write_text("5")


def symbol_batch(cfg: TrainConfig, vocab: int, sentences: int, source: int, target: int) -> Any:
    """A collated batch of `sentences` random sentences, sources of `source` tokens and
    targets of `target - 1` (the decoder reads BOS + target: `target` positions); a
    `CopyBatch` (no out-of-vocabulary words) for a copy or coverage model."""
    import torch

    from attnseq.data.batching import CopyBatch, collate

    generator = torch.Generator().manual_seed(0)
    words = torch.randint(FIRST_WORD, vocab, (sentences, max(source, target)), generator=generator)
    examples = [(row[:source].tolist(), row[: max(target - 1, 0)].tolist()) for row in words]
    batch = collate(examples, list(range(sentences)), pad_id=PAD, bos_id=BOS, eos_id=EOS)
    if not (cfg.model.copy or cfg.model.coverage):
        return batch
    return CopyBatch(**vars(batch), src_ext=batch.src.clone(), oovs=[[] for _ in examples])


def segmenter(vocab: int, max_segments: int) -> Any:
    """A source segmenter for hierarchical models whose first `SENTENCE_ENDS` words end a
    sentence, so that random sources have sentences of about (vocab - 4) / 4 words."""
    from attnseq.data.segments import SourceSegmenter

    words = range(FIRST_WORD, vocab)
    surfaces = [f"w{i}. " if i < FIRST_WORD + SENTENCE_ENDS else f"w{i} " for i in words]
    return SourceSegmenter([""] * FIRST_WORD + surfaces, max_segments)


def one_step(cfg: TrainConfig, vocab: int, shape: tuple[int, int, int]) -> None:
    """Build the model of `cfg` and run one update on a batch of `shape` (sentences, source,
    target positions)."""
    import torch

    from attnseq.data.loader import TokenCounts
    from attnseq.models import build_model
    from attnseq.models.seq2seq import Vocabularies
    from attnseq.training.distributed import WorldInfo
    from attnseq.training.optim import build_optimizer
    from attnseq.training.precision import MixedPrecision
    from attnseq.training.train_step import UpdateParts, train_step

    torch.manual_seed(cfg.seed)
    vocabularies = Vocabularies(vocab, vocab, PAD, BOS, EOS, UNK)
    model = build_model(cfg.model, vocabularies, segmenter(vocab, cfg.model.attention.max_segments))
    batch = symbol_batch(cfg, vocab, *shape)
    counts = TokenCounts(
        src=int(batch.src_lengths.sum()),
        tgt=int(batch.tgt_lengths.sum()),
        padded=batch.src.numel() + batch.tgt_in.numel(),
    )
    parts = UpdateParts(
        module=model,
        model=model,
        optimizer=build_optimizer(model, cfg.optim),
        precision=MixedPrecision("fp32", torch.device("cpu")),
        optim=cfg.optim,
        world=WorldInfo(),
    )
    train_step(parts, [(batch, counts)], step=0)


def _main() -> None:
    """The child: read {"config", "vocab"} from stdin, print the measured bytes."""

    from attnseq.config.resources import batch_shape
    from attnseq.config.threads import use_threads

    spec = json.loads(sys.stdin.read())
    cfg = config_from_dict(spec["config"])
    vocab = int(spec["vocab"])
    use_threads(cfg.trainer.threads)  # None, N or auto, as a run sets them
    shape = batch_shape(cfg)
    one_step(cfg, vocab, (1, min(shape.source, 2), min(shape.target, 2)))  # the warm-up
    release_freed_memory()
    reset_peak()
    before = status_bytes("VmRSS")
    one_step(cfg, vocab, (shape.sentences, shape.source, shape.target))
    print(status_bytes("VmHWM") - before)


if __name__ == "__main__":
    _main()
