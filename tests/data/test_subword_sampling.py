"""Subword regularization: sampled training segmentations vary and decode back to the text,
evaluation keeps the one best segmentation, the loader resamples per epoch, invalid settings
exit 2, and a resumed run sees the segmentations of an uninterrupted one."""

import math
import random
import re
from collections import Counter
from pathlib import Path

import pytest
import torch
from helpers import tiny_config

from attnseq.config.checks import validate
from attnseq.data.loader import BatchLoader
from attnseq.data.sentencepiece_tokenizer import train_sentencepiece
from attnseq.data.subword_sampling import SampledSegmentation
from attnseq.errors import UserError
from attnseq.io.checkpoint import load_checkpoint
from attnseq.training.run import run_training

WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "seven",
    "wizards",
    "quietly",
    "hum",
]
TEXTS = [" ".join(WORDS[(i * 3 + k) % len(WORDS)] for k in range(2 + i % 6)) for i in range(300)]


pytestmark = pytest.mark.usefixtures("cache")  # conftest.py's: a cache of its own


def segmentation(model_type: str, alpha: float) -> SampledSegmentation:
    tokenizer = train_sentencepiece(TEXTS, vocab_size=60, model_type=model_type)
    pairs = [(text, text) for text in TEXTS]
    examples = [(tokenizer.encode(src), tokenizer.encode(tgt)) for src, tgt in pairs]
    return SampledSegmentation(tokenizer, tokenizer, pairs, examples, alpha, 3, 256, 256)


@pytest.mark.parametrize(("model_type", "alpha"), [("unigram", 0.05), ("bpe", 0.3)])
def test_sampled_segmentations_vary_decode_back_and_repeat_per_epoch(model_type, alpha):
    sampled = segmentation(model_type, alpha)
    tokenizer, index = sampled.src, 7
    text = TEXTS[index]
    best = tokenizer.encode(text)
    draws = [sampled.example(epoch, index)[0] for epoch in range(20)]
    assert len({tuple(ids) for ids in draws}) >= 3  # epochs see different segmentations
    assert any(ids != best for ids in draws)
    for ids in draws:
        assert tokenizer.decode(ids) == text  # every one is a segmentation of the text
    # a pure function of (seed, epoch, index): asked again, the same draws
    assert [sampled.example(epoch, index)[0] for epoch in range(20)] == draws
    # source and target of one pair draw independently
    assert any(sampled.example(e, index)[0] != sampled.example(e, index)[1] for e in range(20))
    # the deterministic encoding (evaluation, translate) is unaffected by sampling
    assert [tokenizer.encode(text) for _ in range(5)] == [best] * 5
    growth, _ = sampled.length_growth(100)
    assert growth > 1.0  # sampled segmentations use more, shorter pieces


def test_unigram_draws_follow_the_smoothed_segmentation_probabilities() -> None:
    """P(x) = p(x)^alpha / sum over all segmentations x' of p(x')^alpha, with the
    segmentations and their log-probabilities enumerated by sentencepiece's n-best."""
    tokenizer = train_sentencepiece(TEXTS, vocab_size=60, model_type="unigram")
    text, alpha, draws = "quick fox", 0.3, 3000
    nbest = tokenizer._sp.nbest_encode(text, nbest_size=512, return_type="proto").nbests
    scores = {tuple(piece.id for piece in path.pieces): path.score for path in nbest}
    assert 3 <= len(scores) < 512  # every segmentation is enumerated
    total = sum(math.exp(alpha * score) for score in scores.values())
    rng = random.Random(0)
    counts = Counter(tuple(tokenizer.encode_sampled(text, alpha, rng)) for _ in range(draws))
    assert set(counts) <= set(scores)  # only segmentations of the text
    for path, score in scores.items():
        expected = math.exp(alpha * score) / total
        assert counts[path] / draws == pytest.approx(expected, abs=0.025)


def test_without_dropout_or_with_a_sharp_alpha_the_samplers_give_the_best_segmentation():
    """BPE-dropout with p = 0 is sentencepiece's own BPE (same merges, same order); unigram
    sampling with a large alpha concentrates on the Viterbi segmentation."""
    texts = [*TEXTS[:100], "the quick zebra ü", "dog  over   the"]  # unknown characters, spaces
    bpe = train_sentencepiece(TEXTS, vocab_size=60, model_type="bpe")
    unigram = train_sentencepiece(TEXTS, vocab_size=60, model_type="unigram")
    rng = random.Random(0)
    assert [bpe.encode_sampled(text, 0.0, rng) for text in texts] == bpe.encode_batch(texts)
    sharp = [unigram.encode_sampled(text, 50.0, rng) for text in texts[:100]]
    assert sharp == unigram.encode_batch(texts[:100])


def test_a_sampled_side_over_the_length_limit_falls_back_to_the_best_one() -> None:
    sampled = segmentation("unigram", 1.0)
    index = max(range(len(TEXTS)), key=lambda i: len(sampled.examples[i][0]))
    sampled.max_src_len = len(sampled.examples[index][0])  # the best segmentation just fits
    draws = [sampled.example(epoch, index)[0] for epoch in range(30)]
    assert all(len(ids) <= sampled.max_src_len for ids in draws)
    assert sampled.examples[index][0] in draws  # longer draws were replaced by the best one


def test_the_loader_resamples_each_epoch_the_same_with_workers() -> None:
    sampled = segmentation("unigram", 0.3)
    kwargs = dict(pad_id=0, bos_id=2, eos_id=3, device=torch.device("cpu"))
    batches = [[0, 5, 9], [1, 2], [40, 41, 42, 43]]
    loader = BatchLoader(sampled.examples, num_workers=0, **kwargs)
    fixed = [batch.src for batch, _ in loader(batches, 0)]
    loader.resample_each_epoch(sampled)
    workers = BatchLoader(sampled.examples, num_workers=1, **kwargs)
    workers.resample_each_epoch(sampled)
    by_epoch = {}
    for epoch in (0, 1):
        inline = [batch.src for batch, _ in loader(batches, epoch)]
        for a, b in zip(inline, [b.src for b, _ in workers(batches, epoch)], strict=True):
            assert torch.equal(a, b)
        expected = [[sampled.example(epoch, i)[0] for i in indices] for indices in batches]
        for tensor, rows in zip(inline, expected, strict=True):
            for row, ids in zip(tensor.tolist(), rows, strict=True):
                assert row[: len(ids)] == ids and all(v == 0 for v in row[len(ids) :])
        by_epoch[epoch] = inline
    assert any(
        a.shape != b.shape or not torch.equal(a, b)
        for a, b in zip(by_epoch[0], by_epoch[1], strict=True)
    )
    assert any(
        a.shape != b.shape or not torch.equal(a, b) for a, b in zip(fixed, by_epoch[0], strict=True)
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["data.spm_sampling_alpha=0.1"], "data.tokenizer=char has only one segmentation"),
        (
            ["data.tokenizer=sentencepiece", "data.spm_model_type=unigram", "data.bpe_dropout=0.1"],
            "data.bpe_dropout=0.1 needs data.spm_model_type=bpe",
        ),
        (
            ["data.tokenizer=sentencepiece", "data.spm_sampling_alpha=0.1"],
            "data.spm_sampling_alpha=0.1 needs data.spm_model_type=unigram",
        ),
        (
            ["data.tokenizer=sentencepiece", "data.bpe_dropout=0.1", "model.copy=true"],
            "cannot be combined with model.copy=true",
        ),
    ],
)
def test_invalid_combinations_are_user_errors(overrides: list[str], message: str) -> None:
    with pytest.raises(UserError, match=re.escape(message)):  # the CLI's exit status 2
        validate(tiny_config("data.tokenizer=char", *overrides))


SAMPLED_RUN = [
    "model=transformer",
    "data.name=toy_translation",
    "data.tokenizer=sentencepiece",
    "data.spm_model_type=unigram",
    "data.spm_vocab_size=60",
    "data.train_size=60",
    "data.valid_size=8",
    "data.test_size=8",
    "data.max_tokens=1000",
    "model.dropout=0.0",
    "trainer.validate_every=4",
    "trainer.num_heatmaps=0",
]


@pytest.mark.slow
def test_a_resumed_sampled_run_ends_with_the_weights_of_a_straight_one(tmp_path: Path) -> None:
    """Stop at 3 steps, resume to 7 (across an epoch boundary): the same weights as 7 steps
    straight, and different from a run without sampling."""
    sampled = [*SAMPLED_RUN, "data.spm_sampling_alpha=0.3"]
    straight, split, plain = tmp_path / "straight", tmp_path / "split", tmp_path / "plain"
    run_training(tiny_config(*sampled, "trainer.max_steps=7"), straight)
    run_training(tiny_config(*sampled, "trainer.max_steps=3"), split)
    run_training(tiny_config(*sampled, "trainer.max_steps=7", "resume=auto"), split)
    run_training(tiny_config(*SAMPLED_RUN, "trainer.max_steps=7"), plain)
    a, b, c = (load_checkpoint(run / "checkpoints" / "last.pt") for run in (straight, split, plain))
    assert a["progress"]["epoch"] >= 1
    torch.testing.assert_close(a["model"], b["model"], rtol=1e-6, atol=1e-7)
    assert any(not torch.equal(a["model"][k], c["model"][k]) for k in a["model"])


@pytest.mark.slow
def test_attnseq_train_exits_2_before_any_work(tmp_path: Path) -> None:
    from helpers import attnseq_in_process

    result = attnseq_in_process("train", "data.bpe_dropout=0.1", cwd=tmp_path)
    assert result.returncode == 2
    assert "data.bpe_dropout=0.1 resamples sentencepiece segmentations" in result.stderr
    assert not (tmp_path / "outputs").exists()
