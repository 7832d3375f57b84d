"""The attention of compared systems: a transformer's entropy over its outputs, overall as the
row-weighted mean of the length buckets' and as the rows' own mean, its AER as `attnseq align
--gold` gives it; the reasons a system has none."""

import math
from pathlib import Path

import numpy as np
import pytest
from helpers import untrained_checkpoint

from attnseq.alignment.diagnostics import example_entropies
from attnseq.alignment.forced import align_sentences
from attnseq.alignment.word_links import alignment_error_rate
from attnseq.analysis.compared_attention import system_attention
from attnseq.analysis.comparison import split_pairs
from attnseq.models.loading import load_trained_model


@pytest.mark.slow
def test_a_transformers_entropy_by_bucket_and_aer(transformer_checkpoint: Path) -> None:
    pairs = split_pairs(transformer_checkpoint, "test")
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    outputs = [reference[::-1] for reference in references]  # any text: the rows it makes
    members = [np.arange(0, 8), np.arange(8, len(pairs))]
    sure = [{(0, 0)} for _ in pairs]
    possible = [{(0, 0), (1, 0)} for _ in pairs]
    result = system_attention(
        transformer_checkpoint,
        outputs,
        sources,
        references,
        members,
        gold=(sure, possible),
        device="cpu",
    )
    assert result.reason is None and result.aer_reason is None

    trained = load_trained_model(transformer_checkpoint)
    tokenizers = trained.tokenizers
    examples = [
        (tokenizers.src.encode(s), tokenizers.tgt.encode(o))
        for s, o in zip(sources, outputs, strict=True)
    ]
    sums = example_entropies(trained.model, examples)
    assert result.entropy == pytest.approx(sums[:, 0].sum() / sums[:, 1].sum())
    first, second = (sums[inside].sum(axis=0) for inside in members)
    assert result.bucket_entropy == pytest.approx([first[0] / first[1], second[0] / second[1]])
    longest = max(len(e[0]) for e in examples)
    assert 0 < result.entropy < math.log(longest)  # untrained: spread, yet not uniform

    links = align_sentences(trained, sources, references, device="cpu").links
    assert result.aer == pytest.approx(
        {
            k: v
            for k, v in alignment_error_rate(links, sure, possible).items()
            if k in ("aer", "precision", "recall")
        }
    )


def test_the_reasons_for_no_attention(tmp_path: Path, rnn_checkpoint: Path) -> None:
    sources, outputs = ["3 May 2001"], ["2001-05-03"]
    members = [np.arange(1)]

    def reason(checkpoint: Path | None, srcs: list[str] | None = sources) -> str | None:
        return system_attention(checkpoint, outputs, srcs, outputs, members).reason

    assert reason(None) == "no model (a hypothesis file)"
    assert (
        reason(tmp_path / "gone.pt")
        == f"its checkpoint {tmp_path / 'gone.pt'} is not on this machine"
    )
    assert reason(rnn_checkpoint, None) == "no sources to attend over"
    plain = untrained_checkpoint(tmp_path / "none.pt", "model.attention.score=none")
    assert reason(plain) == "no cross-attention (model.attention.score=none)"
    assert reason(rnn_checkpoint) is None
