"""Evaluators for the splits of a config's data, as training (valid, test) and `attnseq eval`
build them: the decoding settings of the config, the gold word alignments of a generated task,
the extended vocabulary of a copy model."""

import torch

from attnseq.config.choices import DataSource
from attnseq.config.schema import TrainConfig
from attnseq.data.extended_vocab import ExtendedExample, extend_examples
from attnseq.data.generated import gold_alignments
from attnseq.data.prepare import PreparedData
from attnseq.data.tokenizers import TokenizerPair
from attnseq.decoding import DecodingSettings
from attnseq.evaluation.evaluator import AlignmentGold, Evaluator


def make_evaluator(
    cfg: TrainConfig,
    data: PreparedData,
    split: str,
    device: torch.device,
    gold: AlignmentGold | None = None,
) -> Evaluator:
    """The evaluator of one prepared split (`gold`: score the attention against it too)."""
    return Evaluator(
        data.examples[split],
        [tgt for _, tgt in data.pairs[split]],
        data.tokenizers.tgt,
        device,
        max_tokens=cfg.data.eval_max_tokens,
        decoding=DecodingSettings.from_trainer(cfg.trainer),
        task=cfg.data.task.value,
        gold=gold,
        extended=extended_split(cfg, data, split),
        label=split,
    )


def extended_split(
    cfg: TrainConfig, data: PreparedData, split: str
) -> list[ExtendedExample] | None:
    """A copy model's extended-vocabulary view of a split's examples (None without copy)."""
    if not cfg.model.copy:
        return None
    tokenizers = data.tokenizers
    return extend_examples(data.pairs[split], data.examples[split], tokenizers.src, tokenizers.tgt)


def split_gold(cfg: TrainConfig, split: str, tokenizers: TokenizerPair) -> AlignmentGold | None:
    """Gold word alignments of a generated split, when the task has them."""
    if cfg.data.source is not DataSource.generated:
        return None
    sizes = {"train": cfg.data.train_size, "valid": cfg.data.valid_size, "test": cfg.data.test_size}
    gold = gold_alignments(
        cfg.data.name,
        sizes,
        cfg.seed,
        min_len=cfg.data.min_len,
        max_len=cfg.data.max_len,
        vocab_size=cfg.data.vocab_size,
    )
    if gold is None or split not in gold:
        return None
    links = gold[split]
    return AlignmentGold(
        sure=links,
        possible=links,
        src_tokenizer=tokenizers.src,
        src_kind=type(tokenizers.src).kind,
        tgt_kind=type(tokenizers.tgt).kind,
    )
