"""The memory estimate of `attnseq train`'s pre-flight against the measured peak of one real
training step, for every attention kind at three sizes (within `FACTOR` either way), and the
refusal, before any work, of configurations whose estimate does not fit: BigBird blocks padded
far past the sequence among them. Nothing refused here is ever run."""

import re
from pathlib import Path

import pytest
import torch
from helpers import GIB, assert_refused, load_script, train_in_process

from attnseq.config import resources
from attnseq.config.conversion import config_from_dict
from attnseq.config.resources import (
    FACTOR,
    SEARCH_VOCAB_COPIES,
    batch_shape,
    check_inference_memory,
    estimate,
    inference_bytes,
    resource_problems,
)
from attnseq.errors import UserError

BENCHMARK = load_script("benchmarks/benchmark_memory_estimate.py")
# measured in the default run: an RNN and the full transformer (`-m slow`: every kind and size)
DEFAULT_MEASURED = {("rnn_additive", "small"), ("full", "small")}
CASES = [
    pytest.param(kind, size, marks=[] if (kind, size) in DEFAULT_MEASURED else [pytest.mark.slow])
    for kind in BENCHMARK.KINDS
    for size in BENCHMARK.SIZES
]


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's /proc")
@pytest.mark.parametrize(("kind", "size"), CASES)
def test_the_estimate_is_within_the_factor_of_the_measured_peak(kind: str, size: str) -> None:
    row = BENCHMARK.measure(kind, size)
    assert 1 / FACTOR <= row.ratio <= FACTOR, row


@pytest.mark.slow
def test_every_attention_kind_and_rnn_score_is_benchmarked() -> None:
    from attnseq.config.choices import AttentionKind, Score

    configs = [BENCHMARK.config_for(kind, BENCHMARK.SIZES["small"]) for kind in BENCHMARK.KINDS]
    kinds = {cfg.model.attention.kind for cfg in configs if cfg.model.family.name == "transformer"}
    assert kinds == set(AttentionKind)
    rnn = [cfg.model.attention for cfg in configs if cfg.model.family.name == "rnn"]
    assert {"additive", "general", "dot", "location"} <= {a.score.value for a in rnn}
    assert {a.window.value for a in rnn} == {"global", "local_p"}
    assert {a.hierarchy.value for a in rnn} == {"none", "sentence"}
    assert any(cfg.model.copy and cfg.model.family.name == "rnn" for cfg in configs)
    assert set(Score) - {Score.none, Score.concat, Score.scaled_dot} <= {a.score for a in rnn}


def test_the_script_writes_the_docs_table(tmp_path: Path) -> None:
    out = tmp_path / "memory.md"
    rows = [BENCHMARK.Row("full", "small", 10 * 1024**2, 12 * 1024**2)]
    out.write_text(BENCHMARK.markdown(rows))
    text = out.read_text()
    assert "| full | small | 10.0 | 12.0 | 1.20 |" in text
    assert f"within a factor {FACTOR:g}" in text
    with pytest.raises(SystemExit):
        BENCHMARK.parse_args(["--kinds", "sparse"])


# ---------------------------------------------------------------------------- refusals
BIGBIRD = ["model=transformer", "model.attention.kind=bigbird"]
# config_from_dict takes keys, not Hydra's config groups
BIGBIRD_KEYS = ["model.family=transformer", "model.attention.kind=bigbird"]


@pytest.mark.slow
@pytest.mark.parametrize("block", [2048, 100000])
def test_a_bigbird_block_longer_than_the_longest_source_is_refused(
    block: int, tmp_path: Path
) -> None:
    code, output = train_in_process(tmp_path, *BIGBIRD, f"model.attention.block_size={block}")
    assert_refused(tmp_path, code, output, f"model.attention.block_size={block} is longer")
    assert "data.max_src_len=256" in output and "1..256" in output


def test_blocks_padded_past_short_sources_are_counted() -> None:
    """Dates have at most 40 characters; without global blocks a block of 2048 still pads each
    one to 2048 x 2048 scores per head: tens of GiB, refused on a 24 GiB machine."""
    keys = [*BIGBIRD_KEYS, "model.attention.global_blocks=0", "data.max_src_len=4096"]
    cfg = config_from_dict({}, [*keys, "model.attention.block_size=2048"])
    shape = batch_shape(cfg)
    assert shape.source == 40 and shape.sentences == cfg.data.max_tokens // 40
    need = estimate(cfg)
    heads_blocks = shape.sentences * cfg.model.heads * 2048 * 2048 * 4  # one float matrix
    assert need.activation_bytes > cfg.model.enc_layers * heads_blocks
    problems = resource_problems(cfg, ram=24 * GIB, gpu=None, cores=2)
    assert len(problems) == 1 and "the model does not fit" in problems[0]
    assert "block_size=2048" in problems[0] and "sentences of 40 source" in problems[0]
    # a block that fits the sources, or global blocks over the whole sequence, fit
    small = config_from_dict({}, [*keys, "model.attention.block_size=8"])
    assert resource_problems(small, ram=24 * GIB, gpu=None, cores=2) == []
    covered = config_from_dict(
        {}, [*BIGBIRD_KEYS, "data.max_src_len=4096", "model.attention.block_size=2048"]
    )
    assert estimate(covered).activation_bytes < need.activation_bytes / 100


@pytest.mark.slow
@pytest.mark.parametrize("block", [2048, 100000])
def test_a_bigbird_config_that_cannot_fit_exits_2_before_the_run(
    block: int, tmp_path: Path
) -> None:
    code, output = train_in_process(
        tmp_path,
        *BIGBIRD,
        "model.attention.global_blocks=0",
        f"data.max_src_len={block}",
        "data.max_tokens=262144",
        f"model.attention.block_size={block}",
    )
    assert_refused(tmp_path, code, output, "the model does not fit: transformer")
    assert f"block_size={block}" in output
    assert re.search(r"about [0-9.]+ [TPE]iB of activations", output), output


# ------------------------------------------------------------------- pretrained sizes
# NLLB-200-distilled-600M's shape: pre-norm with final norms, sinusoidal positions, one
# embedding matrix for source, target and output over its 256,206 tokens
NLLB = [
    "model.family=transformer",
    "model.d_model=1024",
    "model.heads=16",
    "model.enc_layers=12",
    "model.dec_layers=12",
    "model.ff_dim=4096",
    "model.norm=pre",
    "model.positions=sinusoidal",
    "model.share_src_tgt_embeddings=true",
    "model.tie_embeddings=true",
    "data.max_tokens=4096",
]
NLLB_VOCAB = 256_206


def nllb_parameters() -> int:
    """NLLB-600M's parameters counted by hand: q, k, v and output projections with biases per
    attention, two FFN matrices with biases, two norms per encoder layer and three per decoder
    layer, the shared embedding and the two final norms."""
    d, ff, vocab = 1024, 4096, NLLB_VOCAB
    attention = 4 * (d * d + d)
    feed_forward = d * ff + ff + ff * d + d
    norm = 2 * d
    encoder = 12 * (attention + feed_forward + 2 * norm)
    decoder = 12 * (2 * attention + feed_forward + 3 * norm)
    return encoder + decoder + vocab * d + 2 * norm


def test_an_nllb_600m_shape_is_estimated_from_its_vocabulary() -> None:
    """The parameters within 1% of the count by hand (615M, the published size), four copies
    of them to train, and without the vocabulary (a config alone) a quarter billion fewer."""
    cfg = config_from_dict({}, NLLB)
    need = estimate(cfg, (NLLB_VOCAB, NLLB_VOCAB))
    expected = nllb_parameters()
    assert 610e6 < expected < 620e6
    assert need.parameters == pytest.approx(expected, rel=0.01)
    assert need.training_bytes == pytest.approx(16 * expected, rel=0.01)  # weights, grads, Adam
    # the logits of a 4,096-token batch over the vocabulary: 4 copies of 4 bytes per position
    logits = batch_shape(cfg).sentences * batch_shape(cfg).target * NLLB_VOCAB * 4 * 4
    assert logits <= need.activation_bytes <= FACTOR * (logits + need.activation_bytes - logits)
    assert estimate(cfg).parameters < expected - 0.9 * NLLB_VOCAB * 1024


def test_beam_times_vocabulary_times_batch_is_counted_per_step() -> None:
    """32 sentences x beam 4 over 256,206 tokens: at least three float (rows, V) buffers of a
    step (logits, log-probabilities, the candidates' sums), 393 MB, and within a factor 1.5 of
    them with the cross-attention states and caches of 30 source and 25 output positions."""
    model = config_from_dict({}, NLLB).model
    rows = 32 * 4
    step_buffers = rows * 3 * NLLB_VOCAB * 4
    states = rows * (30 + 25) * 2 * 1024 * 12 * 4  # keys and values per decoder layer
    need = inference_bytes(model, NLLB_VOCAB, rows, 30, 25)
    assert step_buffers + states <= need <= 1.5 * (step_buffers + states)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's /proc")
def test_a_search_step_holds_at_least_the_counted_vocabulary_buffers() -> None:
    """Measured over 64,000 tokens, beam 4: at least `SEARCH_VOCAB_COPIES` (rows, V) float
    tensors at the peak, and within a factor 2 of them."""
    copies = BENCHMARK.search_step_copies(64_000, 4)
    assert SEARCH_VOCAB_COPIES <= copies <= 2 * SEARCH_VOCAB_COPIES, copies


def test_a_beam_over_the_nllb_vocabulary_that_cannot_fit_is_refused_in_one_line() -> None:
    model = config_from_dict({}, NLLB).model
    need = inference_bytes(model, NLLB_VOCAB, 64 * 1000, 30, 25)  # batch 64, beam 1000
    with pytest.raises(UserError) as refusal:
        check_inference_memory(need, torch.device("cpu"), "decoding with beam=1000", "beam")
    message = str(refusal.value)
    assert "\n" not in message and message.startswith("decoding with beam=1000 needs at least")
    assert "GiB" in message and message.endswith("lower beam")


def test_an_nllb_600m_fine_tuning_that_cannot_fit_is_refused_in_one_line() -> None:
    cfg = config_from_dict({}, NLLB)
    problems = resource_problems(cfg, 8 * GIB, None, 2, (NLLB_VOCAB, NLLB_VOCAB))
    assert len(problems) == 1 and "\n" not in problems[0]
    assert problems[0].startswith("the model does not fit: transformer (d_model=1024")
    assert f"at least {estimate(cfg, (NLLB_VOCAB,) * 2).parameters:,} parameters" in problems[0]
    assert resource_problems(cfg, 64 * GIB, None, 2, (NLLB_VOCAB, NLLB_VOCAB)) == []


@pytest.mark.slow
def test_fine_tuning_an_imported_model_counts_its_vocabularies_before_any_work(
    marian_folders: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """model.init_from=FOLDER: the check counts the folder's vocabularies (separate source and
    target ones here) and its architecture, not the run's data config, before the run starts:
    the parameters in the refusal are those of the imported model."""
    from attnseq.models.loading import load_trained_model
    from attnseq.training.initialization import pretrained_vocabularies

    folder = marian_folders["separate"]
    imported = load_trained_model(folder)
    sizes = (imported.tokenizers.src.vocab_size, imported.tokenizers.tgt.vocab_size)
    assert pretrained_vocabularies(str(folder)) == sizes and sizes[0] != sizes[1]
    counted = estimate(imported.cfg, sizes).parameters
    actual = sum(p.numel() for p in imported.model.parameters())
    assert 0.9 * actual <= counted <= actual
    monkeypatch.setattr(resources, "available_ram", lambda: 2**20)  # 1 MiB
    lengths = ["data.max_src_len=40", "data.max_tgt_len=40", "decoding.max_output_ratio=1"]
    lengths.append("decoding.max_output_extra=10")  # within the stand-in's 96 positions
    overrides = ["model=transformer", f"model.init_from={folder}", "data.train_size=50"]
    overrides += ["data.valid_size=20", "data.test_size=20"]
    code, output = train_in_process(tmp_path, *overrides, *lengths)
    assert_refused(tmp_path, code, output, "the model does not fit: transformer (d_model=24")
    assert f"at least {counted:,} parameters" in output


def test_an_attnseq_checkpoints_vocabularies_are_read_without_its_weights(
    trained_transformer_checkpoint: Path,
) -> None:
    from attnseq.models.loading import load_trained_model
    from attnseq.training.initialization import pretrained_vocabularies

    tokenizers = load_trained_model(trained_transformer_checkpoint).tokenizers
    sizes = (tokenizers.src.vocab_size, tokenizers.tgt.vocab_size)
    assert pretrained_vocabularies(str(trained_transformer_checkpoint)) == sizes
