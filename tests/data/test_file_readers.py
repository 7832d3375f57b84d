"""The readers of data files (attnseq/data/file_readers.py): a split streamed in blocks and read
side by side."""

from pathlib import Path

import pytest

from attnseq.errors import UserError


def test_a_streamed_split_in_blocks_and_by_side(tmp_path: Path) -> None:
    """A parallel stream reads the same pairs a pair, a block or a side at a time, across
    shards and with a limit; a count mismatch inside a later block still names both counts."""
    from attnseq.data.file_readers import ParallelStream

    texts = {"a.de": "1\n 2\n3\n", "b.de": "4\n5 \n", "a.en": "i\nii\niii\n", "b.en": "iv\nv\n"}
    texts |= {"long.de": "".join(f"{i}\n" for i in range(7))}
    texts |= {"short.en": "".join(f"{i}\n" for i in range(4))}
    for name, text in texts.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    src, tgt = [tmp_path / "a.de", tmp_path / "b.de"], [tmp_path / "a.en", tmp_path / "b.en"]
    pairs = [("1", "i"), ("2", "ii"), ("3", "iii"), ("4", "iv"), ("5", "v")]
    for limit in (None, 4, 2):
        stream = ParallelStream(src, tgt, limit)
        wanted = pairs[:limit]
        assert list(stream) == wanted
        blocks = list(stream.blocks(2))
        assert max(len(block_src) for block_src, _ in blocks) <= 2
        assert [pair for s, t in blocks for pair in zip(s, t, strict=True)] == wanted
        assert list(stream.side(0)) == [s for s, _ in wanted]
        assert list(stream.side(1)) == [t for _, t in wanted]
    uneven = ParallelStream([tmp_path / "long.de"], [tmp_path / "short.en"])
    with pytest.raises(UserError, match="long.de has 7 lines but .*short.en has 4"):
        list(uneven.blocks(3))
