"""Whether a `--reverse` checkpoint of `attnseq align` translates the other way (target ->
source), from what the two checkpoints record; a model of the same direction fed the swapped
pairs would read every word as <unk> and its links would describe no word.

Two records can show it, and only these; where neither does, nothing is assumed (the
unknown-token warning of align still reports a model that cannot read the text):

- the names of the two sides in the data config: the file suffixes of parallel files
  (`data.src_lang`/`data.tgt_lang`, e.g. de/en) or the fields of JSON lines and hub datasets
  (`data.src_field`/`data.tgt_field`, e.g. translation.de). The default names "src"/"tgt"
  name a side of the files only, so they count when both checkpoints read the same files;
- the tokenizers: a reverse model whose source and target vocabularies are the forward model's
  source and target vocabularies, in that order, reads the same language as its source.
"""

from pathlib import Path
from typing import TYPE_CHECKING

from attnseq.config.choices import DataSource, FileFormat
from attnseq.config.schema import DataConfig
from attnseq.errors import UserError

if TYPE_CHECKING:
    from attnseq.models.loading import TrainedModel

# The side names a data config has when nobody named the languages.
_PLACEHOLDERS = frozenset(
    (DataConfig.src_lang, DataConfig.tgt_lang, DataConfig.src_field, DataConfig.tgt_field)
)


def check_reverse_direction(forward: "TrainedModel", reverse: "TrainedModel", path: Path) -> None:
    """UserError when the checkpoints record that `reverse` (loaded from `path`) translates
    in the same direction as `forward` (module docstring)."""
    evidence = _same_direction(forward, reverse)
    if evidence is not None:
        raise UserError(
            f"--reverse {path} translates in the same direction as the checkpoint ({evidence}); "
            "--reverse takes a target -> source model, trained on the swapped pairs"
        )


def _same_direction(forward: "TrainedModel", reverse: "TrainedModel") -> str | None:
    """What shows that both models translate the same way, or None when nothing does."""
    sides, reverse_sides = side_names(forward.cfg.data), side_names(reverse.cfg.data)
    if sides is not None and sides == reverse_sides and sides[0] != sides[1]:
        same_files = _dataset(forward.cfg.data) == _dataset(reverse.cfg.data)
        if same_files or not _PLACEHOLDERS & set(sides):
            return f"both read {sides[0]} and write {sides[1]}, by their data configs"
    tokenizers, reverse_tokenizers = forward.payload["tokenizers"], reverse.payload["tokenizers"]
    if tokenizers["src"] != tokenizers["tgt"] and tokenizers == reverse_tokenizers:
        return "both have the same source and the same target vocabulary"
    return None


def side_names(data: DataConfig) -> tuple[str, str] | None:
    """(source, target) as the data config names them, or None where it names no side:
    generated data, and the columns of TSV files (positions, not languages)."""
    if data.source is DataSource.generated:
        return None
    if data.source is DataSource.local and data.format is FileFormat.parallel:
        return data.src_lang, data.tgt_lang
    if data.source is DataSource.hub or data.format is FileFormat.jsonl:
        return data.src_field, data.tgt_field
    return None


def _dataset(data: DataConfig) -> tuple[object, ...]:
    """What identifies the files a data config reads (its sides aside)."""
    splits = tuple(sorted(data.splits.items()))
    return (data.source, data.format, data.root, data.name, splits, data.hub_name, data.hub_config)
