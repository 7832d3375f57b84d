"""`data.*`: what to train on (the dataset, its files and fields, tokenization and lengths)."""

from dataclasses import dataclass

from attnseq.config.choices import (
    DataSource,
    FileFormat,
    SentencePieceModel,
    TaskType,
    TokenizerKind,
)
from attnseq.config.fields import option


@dataclass
class DataConfig:
    """What to train on (the data/ group)."""

    name: str = option("dates", "generated: dates|reverse|copy|sort|toy_translation; else a label")
    source: DataSource = option(
        DataSource.generated, "where the data comes from: generated, local files or the hub"
    )
    task: TaskType = option(
        TaskType.translation, "translation (BLEU, chrF) or summarization (ROUGE)"
    )
    tokenizer: TokenizerKind = option(TokenizerKind.char, "char, word or sentencepiece")
    # --- generated tasks
    train_size: int = option(20000, "examples per split", ge=1)
    valid_size: int = option(500, "validation examples (generated tasks)", ge=1)
    test_size: int = option(500, "test examples (generated tasks)", ge=1)
    min_len: int = option(3, "symbol tasks: sequence length range", ge=1)
    max_len: int = option(12, "symbol tasks: longest sequence", ge=1)
    vocab_size: int = option(20, "symbol tasks: alphabet size", ge=1)
    # --- real corpora (source=local or hub)
    root: str | None = option(
        None, "local files resolve against this; None = $ATTNSEQ_DATA or ./data"
    )
    format: FileFormat = option(FileFormat.parallel, "local files: parallel, tsv or jsonl")
    splits: dict[str, str] = option(
        help="split -> path prefix / file / hub split", default_factory=dict
    )
    alignments: dict[str, str] = option(
        help="guided alignment: split -> Pharaoh file of word links (i-j, 0-based, source word"
        " first), one line per pair of the split as loaded (after held-out valid/test and"
        " max_examples); relative paths resolve like data.splits; needs at least train",
        default_factory=dict,
    )
    src_lang: str = option("src", "parallel files: suffix of the source file (train.de)")
    tgt_lang: str = option("tgt", "parallel files: suffix of the target file (train.en)")
    src_field: str = option("src", "jsonl/hub: field names (dotted for nested: translation.de)")
    tgt_field: str = option("tgt", "jsonl/hub: the target field")
    hub_name: str | None = option(None, "e.g. bentrevett/multi30k")
    hub_config: str | None = option(None, "the hub dataset's configuration name, if it has several")
    max_src_len: int = option(
        256, "tokens; longer sources: truncated (summarization) or dropped", ge=1
    )
    max_tgt_len: int = option(256, "tokens; longer targets are dropped", ge=1)
    max_examples: int | None = option(None, "use only the first N training examples", ge=1)
    # --- sentencepiece (tokenizer=sentencepiece)
    spm_vocab_size: int = option(8000, "sentencepiece vocabulary size", ge=8)
    spm_model_type: SentencePieceModel = option(
        SentencePieceModel.bpe, "sentencepiece model: bpe or unigram"
    )
    spm_character_coverage: float = option(
        1.0, "share of characters the sentencepiece model covers (0.98 to 1)", ge=0.98, le=1.0
    )
    spm_joint: bool = option(True, "one model for source and target")
    spm_sampling_alpha: float = option(
        0.0,
        "unigram models: subword regularization, training split resegmented every epoch "
        "(smoothing alpha over all segmentations; 0: off, 0.2 to 0.5 typical)",
        ge=0.0,
        le=1.0,
    )
    bpe_dropout: float = option(
        0.0,
        "bpe models: BPE-dropout, the probability of dropping each merge when the training "
        "split is resegmented every epoch (0: off, 0.1 typical)",
        ge=0.0,
        lt=1.0,
    )
    # --- batching
    max_tokens: int = option(4096, "batch budget in padded tokens (length-bucketed batches)", ge=1)
    max_sentences: int | None = option(None, "optional cap on sentences per batch", ge=1)
    eval_max_tokens: int = option(8192, "batch budget for validation/test decoding", ge=1)
