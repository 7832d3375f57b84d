"""The memory estimate of `attnseq train`'s pre-flight against the measured peak of one real
training step, for every attention kind at three sizes (within `FACTOR` either way), and the
refusal, before any work, of configurations whose estimate does not fit: BigBird blocks padded
far past the sequence among them. Nothing refused here is ever run."""

import re
from pathlib import Path

import pytest
from helpers import GIB, assert_refused, load_script, train_in_process

from attnseq.config.conversion import config_from_dict
from attnseq.config.resources import FACTOR, batch_shape, estimate, resource_problems

BENCHMARK = load_script("benchmarks/benchmark_memory_estimate.py")
# measured in the default run: an RNN and the full transformer (`-m slow`: every kind and size)
DEFAULT_MEASURED = {("rnn_additive", "small"), ("full", "small")}
CASES = [
    pytest.param(kind, size, marks=[] if (kind, size) in DEFAULT_MEASURED else [pytest.mark.slow])
    for kind in BENCHMARK.KINDS
    for size in BENCHMARK.SIZES
]


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's /proc")
@pytest.mark.parametrize(("kind", "size"), CASES)
def test_the_estimate_is_within_the_factor_of_the_measured_peak(kind: str, size: str) -> None:
    row = BENCHMARK.measure(kind, size)
    assert 1 / FACTOR <= row.ratio <= FACTOR, row


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
