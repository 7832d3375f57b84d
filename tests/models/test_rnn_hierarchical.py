"""The hierarchical RNN (models/rnn_hierarchical.py; Nallapati et al. 2016, section 2.4): the
two-level encoder reads each segment on its own, cached decoding equals the full forward (plain,
Luong, and pointer-generator with coverage), and a checkpoint round trip keeps the outputs. Its
combined weights are tested in tests/attention/test_hierarchical.py."""

import random
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import copy_coverage_run, tiny_config, untrained_checkpoint
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from typer.testing import CliRunner

from attnseq.alignment.saved_attention import SavedAttention
from attnseq.cli.app import app
from attnseq.config import CONFIG_DIR
from attnseq.config.schema import DecodingConfig
from attnseq.data.prepare import train_tokenizers
from attnseq.decoding import greedy_decode
from attnseq.decoding.beam_search import beam_search
from attnseq.models.loading import load_trained_model, model_for
from attnseq.models.rnn_hierarchical import (
    HierarchicalPointerRNN,
    HierarchicalRNNSeq2Seq,
    segment_layout,
)

PAIRS = [
    ("#Person1#: hello there . how are you ? #Person2#: fine thanks . #Person1#: good", "hi"),
    ("#Person1#: where is it ? #Person2#: here .", "place"),
    ("A cat sat. The dog ran! Mr. Smith came.", "animals ran"),
]


def test_segment_layout_packs_each_segment_in_its_own_row() -> None:
    segments = torch.tensor([[0, 0, 0, 1, 1], [0, 1, 2, -1, -1]])
    layout = segment_layout(segments)
    assert layout.counts.tolist() == [[3, 2, 0], [1, 1, 1]]
    assert layout.width == 3
    # row b*N + s, position within the segment: b0 s0 -> 0,1,2; b0 s1 -> 3,4 (row 1 * 3)
    assert layout.flat[0].tolist() == [0, 1, 2, 3, 4]
    assert layout.flat[1, :3].tolist() == [9, 12, 15]  # rows 3, 4, 5 at position 0


def model_and_batch(*overrides: str):
    cfg = tiny_config(
        "data.tokenizer=word", "model.attention.hierarchy=sentence", "model.dropout=0.0", *overrides
    )
    tokenizers = train_tokenizers(cfg.data, PAIRS)
    torch.manual_seed(0)
    model = model_for(cfg, tokenizers).eval()
    ids = [tokenizers.src.encode(src) for src, _ in PAIRS]
    width = max(map(len, ids))
    src = torch.tensor([row + [0] * (width - len(row)) for row in ids])
    lengths = torch.tensor([len(row) for row in ids])
    size = tokenizers.tgt.vocab_size
    copy_inputs = {}
    if cfg.model.copy:  # a source in the target vocabulary (word ids past it read as <unk>)
        copy_inputs = {"src_ext": src.masked_fill(src >= size, 1), "n_oov": 0}
    return model, src, lengths, copy_inputs, size


CASES = [
    ("bahdanau", [], HierarchicalRNNSeq2Seq),
    ("luong-feeding", ["model.decoder=luong"], HierarchicalRNNSeq2Seq),
    (
        "luong-parallel",
        ["model.decoder=luong", "model.input_feeding=false", "model.attention.score=general"],
        HierarchicalRNNSeq2Seq,
    ),
    ("lstm-2-layers", ["model.rnn.cell=lstm", "model.rnn.layers=2"], HierarchicalRNNSeq2Seq),
    ("pointer-coverage", ["model.copy=true", "model.coverage=true"], HierarchicalPointerRNN),
]


@pytest.mark.parametrize(("name", "overrides", "kind"), CASES, ids=[c[0] for c in CASES])
def test_cached_decoding_equals_the_full_forward(name, overrides, kind) -> None:
    model, src, lengths, copy_inputs, size = model_and_batch(*overrides)
    assert isinstance(model, kind)
    tgt_in = torch.tensor([[2, 4, 5, 6], [2, size - 1, 4, 0], [2, 5, 5, 5]])
    with torch.no_grad():
        full = model(src, lengths, tgt_in, need_weights=True, **copy_inputs)
        state = model.start_decoding(src, lengths, **copy_inputs)
        steps, weights, betas = [], [], []
        for t in range(tgt_in.size(1)):
            logits, step_weights, state = model.decode_step(tgt_in[:, t], state, need_weights=True)
            steps.append(logits)
            weights.append(step_weights)
            betas.append(state["segment_weights"])
    torch.testing.assert_close(torch.stack(steps, 1), full.logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torch.stack(weights, 1), full.attention, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(torch.stack(betas, 1), full.segment_attention.weights)
    assert full.segment_attention.segments.tolist()[1][:9] == [0, 0, 0, 0, 0, 1, 1, 1, -1]
    torch.testing.assert_close(full.attention.sum(-1), torch.ones(3, 4))
    beta = full.segment_attention.weights
    assert beta.shape == (3, 4, 3)
    assert (beta[1, :, 2] == 0).all()  # the second source has two segments
    torch.testing.assert_close(beta.sum(-1), torch.ones(3, 4))


@pytest.mark.parametrize("overrides", [[], ["model.copy=true", "model.coverage=true"]])
def test_greedy_and_beam_attention_match_the_forward(overrides) -> None:
    model, src, lengths, copy_inputs, _ = model_and_batch(*overrides)
    limits = torch.full((3,), 6)
    settings = DecodingConfig(beam=3, length_penalty=0.0)
    beams = beam_search(model, src, lengths, limits, settings, True, **copy_inputs)
    for hypotheses in (
        greedy_decode(model, src, lengths, limits, True, **copy_inputs),
        [nbest[0] for nbest in beams],
    ):
        for row, hypothesis in enumerate(hypotheses):
            rows, length = hypothesis.attention.shape[0], int(lengths[row])
            tgt_in = torch.tensor([[model.bos_id, *hypothesis.tokens][:rows]])
            one = {
                k: v[row : row + 1, :length] if torch.is_tensor(v) else v
                for k, v in copy_inputs.items()
            }
            with torch.no_grad():
                full = model(
                    src[row : row + 1, :length],
                    lengths[row : row + 1],
                    tgt_in,
                    need_weights=True,
                    **one,
                )
            torch.testing.assert_close(
                full.attention[0], hypothesis.attention, atol=1e-5, rtol=1e-4
            )


def test_a_checkpoint_round_trip_keeps_the_outputs(tmp_path) -> None:
    path = untrained_checkpoint(
        tmp_path / "h.pt",
        "data.tokenizer=word",
        "model.attention.hierarchy=sentence",
        "model.attention.max_segments=2",
        pairs=PAIRS,
    )
    trained = load_trained_model(path)
    assert isinstance(trained.model, HierarchicalRNNSeq2Seq)
    assert trained.model.segmenter.max_segments == 2
    src = torch.tensor([trained.tokenizers.src.encode(PAIRS[0][0])])
    lengths = torch.tensor([src.size(1)])
    tgt_in = torch.tensor([[2, 4, 4]])
    again = load_trained_model(path).model
    with torch.no_grad():
        first = trained.model(src, lengths, tgt_in, need_weights=True)
        second = again(src, lengths, tgt_in, need_weights=True)
    torch.testing.assert_close(first.logits, second.logits)
    assert first.segment_attention.weights.shape == (1, 3, 2)  # three turns, capped at two


def test_without_a_segmenter_the_model_says_what_it_needs() -> None:
    from attnseq.models import build_model
    from attnseq.models.seq2seq import Vocabularies

    cfg = tiny_config("model.attention.hierarchy=sentence")
    model = build_model(cfg.model, Vocabularies(10, 10, 0, 2, 3))
    with pytest.raises(ValueError, match="segmenter"):
        model(torch.tensor([[5, 6]]), torch.tensor([2]), torch.tensor([[2, 5]]))


# ------------------------------------------------------------
# Hierarchical attention end to end: invalid combinations exit 2 before a run directory exists;
# a short training of a hierarchical pointer-generator with coverage on a generated dialogue task
# through train, eval --save-attention and visualize-alignment (both levels); the experiment
# config composes with the sizes of its flat counterpart.

runner = CliRunner()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model=transformer"], "hierarchy=sentence is an RNN setting"),
        (["model.attention.score=none"], "needs a content score"),
        (["model.attention.score=location"], "needs a content score"),
        (["model=rnn_luong", "model.attention.window=local_p"], "needs model.attention.window"),
    ],
)
def test_invalid_combinations_exit_2(tmp_path: Path, overrides, message) -> None:
    run_dir = tmp_path / "run"
    result = runner.invoke(
        app,
        ["train", "model.attention.hierarchy=sentence", *overrides, f"hydra.run.dir={run_dir}"],
    )
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and message in result.output, result.output
    assert not run_dir.exists()


def dialogue_dataset(folder: Path, seed: int = 0) -> None:
    """Dialogues of 2-4 turns; one turn says "i want ITEM", the summary is "PERSON wants ITEM"."""
    rng = random.Random(seed)
    items = ["tea", "cake", "soup", "rice", "milk", "bread", "fish", "jam"]
    filler = ["hello there .", "ok .", "how are you ?", "fine thanks .", "see you ."]
    for split, count in (("train", 240), ("valid", 16), ("test", 16)):
        lines = []
        for _ in range(count):
            turns = [rng.choice(filler) for _ in range(rng.randint(2, 4))]
            key, item = rng.randrange(len(turns)), rng.choice(items)
            turns[key] = f"i want {item} ."
            dialogue = " ".join(f"#Person{t % 2 + 1}#: {text}" for t, text in enumerate(turns))
            lines.append(f"{dialogue}\t#Person{key % 2 + 1}# wants {item}")
        (folder / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def hierarchical_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, Path]:
    return copy_coverage_run(
        tmp_path_factory,
        "dialogues",
        dialogue_dataset,
        "data.max_tokens=600",
        "model.attention.hierarchy=sentence",
        "trainer.max_steps=40",
        "trainer.validate_every=20",
        "trainer.max_epochs=100",
        "trainer.early_stopping_metric=rouge_l",
        "trainer.num_heatmaps=1",
    )


@pytest.mark.slow
def test_a_short_training_runs_and_learns(hierarchical_run) -> None:
    run_dir, metrics, _ = hierarchical_run
    assert (run_dir / "checkpoints" / "best.pt").is_file()
    # "PERSON wants ITEM" needs the right turn and its item: copied from the source
    assert metrics["test/rouge_l"] >= 80.0, metrics
    events = EventAccumulator(str(run_dir / "tb"), size_guidance={"images": 0})
    images = events.Reload().Tags()["images"]
    assert {"attention/example_0", "attention/example_0/segments"} <= set(images), images


@pytest.mark.slow
def test_saved_attention_and_figures_have_both_levels(hierarchical_run, tmp_path: Path) -> None:
    run_dir, _, data = hierarchical_run
    checkpoint = run_dir / "checkpoints" / "best.pt"
    out = tmp_path / "eval"
    args = [str(checkpoint), "--save-attention", "--out", str(out), f"data.root={data}"]
    result = runner.invoke(app, ["eval", *args])
    assert result.exit_code == 0, result.output
    saved_file = next(out.rglob("attention.npz"))
    with SavedAttention(saved_file) as saved:
        example = saved.example(0)
    assert example.segments is not None and example.segment_weights is not None
    turns = example.src_text.count("#Person")
    assert max(example.segments) + 1 == turns
    assert example.segment_weights.shape == (example.weights.shape[-2], turns)
    np.testing.assert_allclose(example.segment_weights.sum(-1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(example.weights.sum(-1), 1.0, rtol=1e-5)
    for kind in ("segment", "cross"):
        figure = tmp_path / f"{kind}.png"
        args = ["--from-saved", str(saved_file), "--index", "0", "--kind", kind]
        result = runner.invoke(app, ["visualize-alignment", *args, "--out", str(figure)])
        assert result.exit_code == 0, result.output
        assert figure.is_file()
    # from the checkpoint: the same segment map as the saved one for the same output
    from attnseq.analysis.alignment_view import AlignmentViewer

    viewer = AlignmentViewer(checkpoint)
    attention = viewer.attention(example.src_text, kind="segment")
    assert attention.columns[0].startswith("1: #Person1#:")
    if attention.output == example.hyp_text:
        np.testing.assert_allclose(attention.weights, example.segment_weights, atol=1e-5)


def test_kind_segment_of_a_flat_model_is_a_user_error(tmp_path: Path) -> None:
    from helpers import untrained_checkpoint

    checkpoint = untrained_checkpoint(
        tmp_path / "flat.pt", "data.tokenizer=word", pairs=[("a b", "b a")]
    )
    result = runner.invoke(
        app, ["visualize-alignment", str(checkpoint), "--src", "a b", "--kind", "segment"]
    )
    assert result.exit_code == 2 and "model.attention.hierarchy=sentence" in result.output


def test_the_experiment_matches_its_flat_counterpart() -> None:
    folder = Path(CONFIG_DIR) / "experiment"
    flat = OmegaConf.load(folder / "dialogsum_rnn_attention.yaml")
    hierarchical = OmegaConf.load(folder / "dialogsum_hierarchical.yaml")
    assert hierarchical.model.attention.hierarchy == "sentence"
    for key in ("data", "optim", "trainer"):
        assert hierarchical[key] == flat[key], key
    for key in ("emb_dim", "hidden", "dropout"):
        assert hierarchical.model[key] == flat.model[key], key
    assert hierarchical.model.attention.attn_dim == flat.model.attention.attn_dim
