"""The measured peak memory of one training step (attnseq/training/peak_memory.py): what it reads
of /proc, and the batch of the shape it measures. The measurement against the estimate:
tests/config/test_resources.py."""

from pathlib import Path

import pytest
from helpers import tiny_config

from attnseq.data.batching import CopyBatch
from attnseq.training.peak_memory import PeakMemoryError, status_bytes, symbol_batch


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux's /proc")
def test_status_fields_are_read_in_bytes() -> None:
    resident = status_bytes("VmRSS")
    assert resident > 0 and resident % 1024 == 0
    with pytest.raises(PeakMemoryError, match="/proc/self/status has no VmNothing"):
        status_bytes("VmNothing")


def test_the_batch_has_the_shape_measured() -> None:
    batch = symbol_batch(tiny_config(), 20, 3, 5, 4)
    assert batch.src.shape == (3, 5) and batch.tgt_in.shape == (3, 4)
    assert not isinstance(batch, CopyBatch)
    copy = symbol_batch(tiny_config("model.copy=true"), 20, 3, 5, 4)
    assert isinstance(copy, CopyBatch) and copy.src_ext.equal(copy.src)
