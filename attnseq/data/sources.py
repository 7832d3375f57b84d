"""Where the (source, target) text pairs of each split come from.

Generated tasks (attnseq/data/generated.py) are built from the seed, so any run or checkpoint
can rebuild exactly the same splits without files or network.
"""

from attnseq.config import DataConfig, DataSource
from attnseq.data.generated import TASKS, make_splits
from attnseq.errors import UserError

Pairs = list[tuple[str, str]]


def load_splits(cfg: DataConfig, seed: int) -> dict[str, Pairs]:
    """{"train": pairs, "valid": pairs, "test": pairs} for the configured dataset."""
    if cfg.source is DataSource.generated:
        if cfg.name not in TASKS:
            raise UserError(
                f"data.name={cfg.name!r} is not a generated task; valid: {', '.join(TASKS)}"
            )
        sizes = {"train": cfg.train_size, "valid": cfg.valid_size, "test": cfg.test_size}
        try:
            return make_splits(
                cfg.name,
                sizes,
                seed,
                min_len=cfg.min_len,
                max_len=cfg.max_len,
                vocab_size=cfg.vocab_size,
            )
        except ValueError as error:
            raise UserError(f"cannot generate data.name={cfg.name}: {error}") from None
    raise UserError(f"unsupported data.source={cfg.source.name}")
