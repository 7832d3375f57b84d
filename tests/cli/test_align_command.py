"""`attnseq align`: Pharaoh output, soft matrices, symmetrization with a reverse model, gold
scores equal to `attnseq eval --gold`' for the same map, and one-line errors (exit 2)."""

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import (
    SRC,
    TGT,
    eval_result,
    run_eval,
    toy_transformer,
    untrained_checkpoint,
    write_set,
)
from typer.testing import CliRunner

from attnseq.alignment.forced import AlignmentMethod, align_sentences
from attnseq.alignment.word_links import symmetrize, transpose
from attnseq.cli.align_runner import AlignRequest, run_align
from attnseq.cli.app import app
from attnseq.data.file_readers import read_parallel
from attnseq.data.word_alignments import read_pharaoh
from attnseq.models.loading import load_trained_model


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> tuple[Path, Path, dict[str, Path]]:
    folder = tmp_path_factory.mktemp("align_cli")
    files = write_set(folder / "data")
    pairs = read_parallel(files["src"], files["tgt"])
    forward = toy_transformer(
        folder / "run" / "checkpoints" / "best.pt", folder / "data", "src", "tgt", pairs, 1
    )
    swapped = [(tgt, src) for src, tgt in pairs]
    reverse = toy_transformer(folder / "reverse.pt", folder / "data", "tgt", "src", swapped, 2)
    return forward, reverse, files


def align(*args: str):
    return CliRunner().invoke(app, ["align", *map(str, args)])


@pytest.mark.slow
def test_writes_pharaoh_lines_and_soft_matrices(setup, tmp_path) -> None:
    forward, _, files = setup
    out, soft = tmp_path / "a.pharaoh", tmp_path / "a.npz"
    result = align(
        forward, "--src", files["src"], "--tgt", files["tgt"], "--out", out, "--soft", soft
    )
    assert result.exit_code == 0, result.output
    assert "layer 2, head mean" in result.output and f"wrote {out}" in result.output
    links, _ = read_pharaoh(out)
    expected = align_sentences(load_trained_model(forward), SRC, TGT)
    assert links == expected.links and len(links) == len(SRC)
    for line, src, tgt in zip(links, SRC, TGT, strict=True):
        assert sorted(j for _, j in line) == list(range(len(tgt.split())))  # one per target word
        assert all(i < len(src.split()) for i, _ in line)
    with np.load(soft) as saved:
        assert "layer 2, head mean" in str(saved["method"])
        for n, (src, tgt) in enumerate(zip(SRC, TGT, strict=True)):
            matrix = saved[f"forward_{n}"]
            assert matrix.shape == (len(tgt.split()), len(src.split()))
            assert np.allclose(matrix.sum(1), 1.0, atol=1e-5)  # word tokens: no mass is dropped
            assert np.allclose(matrix, expected.soft[n])
    # standard output holds the Pharaoh lines and nothing else
    plain = align(forward, "--src", files["src"], "--tgt", files["tgt"])
    assert plain.exit_code == 0 and plain.stdout == out.read_text()


@pytest.mark.slow
def test_reverse_model_symmetrized(setup, tmp_path) -> None:
    forward, reverse, files = setup
    sentences = ["--src", files["src"], "--tgt", files["tgt"]]
    fwd = align_sentences(load_trained_model(forward), SRC, TGT, AlignmentMethod("shift-att"))
    rev = align_sentences(load_trained_model(reverse), TGT, SRC, AlignmentMethod("shift-att"))
    for heuristic in ("intersect", "union", "grow-diag-final-and"):
        out = tmp_path / f"{heuristic}.pharaoh"
        result = align(
            forward,
            *sentences,
            "--reverse",
            reverse,
            "--symmetrize",
            heuristic,
            "--method",
            "shift-att",
            "--out",
            out,
        )
        assert result.exit_code == 0, result.output
        expected = [
            symmetrize(f, transpose(r), heuristic)
            for f, r in zip(fwd.links, rev.links, strict=True)
        ]
        assert read_pharaoh(out)[0] == expected, heuristic
    assert expected != fwd.links or expected != [transpose(r) for r in rev.links]


@pytest.mark.slow
@pytest.mark.parametrize(
    "method, layer, head, key",
    [
        ("attention", None, None, ""),
        ("attention", 1, 2, "/layer1/head2"),
        ("shift-att", None, None, ""),
        ("shift-att", 2, 1, "/layer2/head1"),
    ],
)
def test_aer_equals_eval_alignments(setup, tmp_path, method, layer, head, key) -> None:
    forward, _, files = setup
    gold = ["--gold", files["gold"], "--gold-src", files["src"], "--gold-tgt", files["tgt"]]
    gold += ["--method", method]
    assert run_eval(forward, tmp_path / "eval", *map(str, gold)).exit_code == 0
    folder = eval_result(tmp_path / "eval")
    assert folder.name.endswith("-shift-att") == (method == "shift-att"), folder.name
    metrics = json.loads((folder / "metrics.json").read_text())
    request = AlignRequest(
        forward,
        files["src"],
        files["tgt"],
        AlignmentMethod(method, layer, head),
        gold=files["gold"],
        device="cpu",
        batch_size=3,
    )
    scores = run_align(request).scores
    assert scores is not None
    for name in ("aer", "precision", "recall"):
        assert scores[name] == metrics[f"align/{name}{key}"], name
    # reversed gold with --gold-order tgt-src: the same numbers, printed by the command
    args = ["--src", files["src"], "--tgt", files["tgt"], "--gold", files["reversed"]]
    options = [*args, "--gold-order", "tgt-src", "--out", tmp_path / "x.pharaoh"]
    options += ["--method", method]
    if layer is not None:
        options += ["--layer", str(layer), "--head", str(head)]
    result = align(forward, *options)
    assert result.exit_code == 0, result.output
    assert f"AER {scores['aer']:.4f}  precision {scores['precision']:.4f}" in result.stdout


@pytest.mark.slow
def test_mistakes_end_with_one_message_and_exit_2(setup, tmp_path) -> None:
    forward, _, files = setup
    short = tmp_path / "short.txt"
    short.write_text("the dog\n")
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    rnn_none = untrained_checkpoint(tmp_path / "none.pt", "model.attention.score=none")
    both = ["--src", files["src"], "--tgt", files["tgt"]]
    cases = {
        "--tgt file not found": [forward, "--src", files["src"], "--tgt", tmp_path / "nope"],
        "has 4 lines but --tgt": [forward, "--src", files["src"], "--tgt", short],
        "is empty": [forward, "--src", empty, "--tgt", empty],
        "--layer must be in 1..2": [forward, *both, "--layer", "3"],
        "--head must be in 1..2": [forward, *both, "--head", "0"],
        "--method must be one of": [forward, *both, "--method", "best"],
        "Did you mean 'smoothgrad'?": [forward, *both, "--method", "smoothgrd"],
        "--layer choose an attention map; --method smoothgrad reads none": [
            forward,
            *both,
            "--method",
            "saliency",
            "--layer",
            "1",
        ],
        "--method rollout needs a transformer's self-attention": [
            rnn_none,
            *both,
            "--method",
            "rollout",
        ],
        "--ig-steps must be at least 1": [forward, *both, "--ig-steps", "0"],
        "has no attention": [rnn_none, *both],
        "--symmetrize needs --reverse": [forward, *both, "--symmetrize", "union"],
        "give --src FILE and --tgt FILE": [forward, "--src", files["src"]],
        "unknown format '.txt'": [forward, *both, "--soft", tmp_path / "soft.txt"],
    }
    for message, args in cases.items():
        result = align(*args)
        assert result.exit_code == 2, (message, result.output)
        assert result.stderr.startswith("error:") and message in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "soft.txt").exists()


@pytest.mark.parametrize("method", ["rollout", "integrated-gradients", "saliency"])
def test_every_attribution_method_aligns_through_the_same_path(setup, tmp_path, method) -> None:
    """The links of --method M are the argmax of attribute()'s maps pooled to words, and the
    gold is scored as for attention."""
    from attnseq.alignment.attribution import attribute
    from attnseq.alignment.word_links import argmax_alignment, word_attention
    from attnseq.data.word_alignments import word_ids

    forward, _, files = setup
    out = tmp_path / "a.pharaoh"
    options = ["--method", method, "--ig-steps", "8", "--smoothgrad-samples", "4"]
    result = align(
        forward,
        "--src",
        files["src"],
        "--tgt",
        files["tgt"],
        "--gold",
        files["gold"],
        "--out",
        out,
        *options,
    )
    assert result.exit_code == 0, result.output
    assert "AER" in result.stdout
    trained = load_trained_model(forward)
    maps = attribute(
        trained, list(zip(SRC, TGT, strict=True)), method, ig_steps=8, smoothgrad_samples=4
    )
    expected = [
        argmax_alignment(
            word_attention(
                m.source, word_ids(m.source_pieces, "word"), word_ids(m.target_pieces, "word")
            )
        )
        for m in maps
    ]
    assert read_pharaoh(out)[0] == expected
