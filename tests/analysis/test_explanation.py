"""What `attnseq explain` gathers (attnseq/analysis/explanation.py), on tiny untrained
checkpoints of both families: the outputs of a beam search or a forced target, every attention
map with its shape, the log-probabilities, the methods' weights, and the refusals."""

from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import DATE_PAIRS, SHORT_POSITIONS, untrained_checkpoint

import attnseq
from attnseq.alignment.attribution import ATTRIBUTION_METHODS, attribute
from attnseq.analysis.explanation import check_request, explain
from attnseq.errors import UserError
from attnseq.models.loading import load_trained_model

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")

SOURCE = "4 May 2001"
TARGET = "2001-05-04"
FAMILIES = {
    "rnn": ("model.family=rnn",),
    "transformer": ("model.family=transformer", "model.enc_layers=2", "model.dec_layers=2"),
}


@pytest.fixture(scope="module")
def untrained_without_dropout(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("explain")
    return {
        family: untrained_checkpoint(folder / f"{family}.pt", *overrides, "model.dropout=0.0")
        for family, overrides in FAMILIES.items()
    }


@pytest.mark.slow
def test_forced_target_of_a_transformer_has_every_map(untrained_without_dropout) -> None:
    trained = load_trained_model(untrained_without_dropout["transformer"])
    explanation = explain(trained, SOURCE, TARGET)
    assert explanation.forced and len(explanation.outputs) == 1
    S = len(SOURCE)  # char tokenizer: one piece per character
    T = len(TARGET)
    assert explanation.source_pieces == list(SOURCE)
    output = explanation.outputs[0]
    assert output.pieces == list(TARGET) and output.text == TARGET
    assert output.cross.weights.shape == (2, 2, T + 1, S)
    assert output.cross.rows == [*TARGET, "</s>"] and output.cross.columns == list(SOURCE)
    assert explanation.encoder is not None and explanation.encoder.weights.shape == (2, 2, S, S)
    assert output.decoder is not None and output.decoder.weights.shape == (2, 2, T + 1, T + 1)
    assert output.decoder.rows == ["<s>", *TARGET]
    # decoder self-attention is causal: nothing above the diagonal; every row is a distribution
    assert np.abs(np.triu(output.decoder.weights, k=1)).max() == 0
    for maps in (output.cross, explanation.encoder, output.decoder):
        np.testing.assert_allclose(maps.weights.sum(-1), 1.0, atol=1e-5)
    assert list(output.methods) == list(ATTRIBUTION_METHODS)  # a transformer has them all
    for name, weights in output.methods.items():
        assert weights.source.shape == (T + 1, S), name
        np.testing.assert_allclose(weights.source.sum(-1), 1.0, atol=1e-5)
        if weights.prefix is not None:
            assert weights.prefix.shape == (T + 1, T + 1), name
            assert np.abs(np.triu(weights.prefix, k=1)).max() == 0, name


@pytest.mark.slow
def test_the_methods_are_attributes_for_each_output(untrained_without_dropout) -> None:
    trained = load_trained_model(untrained_without_dropout["rnn"])
    chosen = check_request(trained, SOURCE, None, ["saliency", "attention", "smoothgrad"])
    assert chosen == ["smoothgrad", "attention"]  # the alias resolved, each method once
    explanation = explain(trained, SOURCE, beam=2, methods=["gradient-x-input", "attention"])
    assert explanation.methods == ["gradient-x-input", "attention"]
    assert "rollout" not in explain(trained, SOURCE, TARGET).methods  # an RNN has none
    pairs = [(SOURCE, output.text) for output in explanation.outputs]
    for name in explanation.methods:  # all outputs in one call, as SmoothGrad needs
        expected = attribute(trained, pairs, name)
        for output, attribution in zip(explanation.outputs, expected, strict=True):
            np.testing.assert_allclose(output.methods[name].source, attribution.source.numpy())


@pytest.mark.parametrize("family", FAMILIES)
def test_log_probabilities_are_those_of_scoring(untrained_without_dropout, family) -> None:
    model = attnseq.load(untrained_without_dropout[family], "cpu")
    explanation = explain(model.trained, SOURCE, TARGET, methods=["attention"])
    output = explanation.outputs[0]
    assert output.token_log_probs.shape == (len(TARGET) + 1,)
    expected = model.score(SOURCE, TARGET).log_prob
    assert output.log_prob == pytest.approx(expected, abs=1e-4)
    assert output.score == pytest.approx(expected / (len(TARGET) + 1), abs=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_each_beam_hypothesis_is_explained_with_its_score(
    untrained_without_dropout, family
) -> None:
    model = attnseq.load(untrained_without_dropout[family], "cpu")
    explanation = explain(model.trained, SOURCE, beam=3, methods=["attention"])
    translation = model.translate(SOURCE, beam=3, nbest=3)
    decoded = [h for h in translation.hypotheses if h.text.strip()]
    assert [o.text for o in explanation.outputs] == [h.text for h in decoded]
    assert [o.score for o in explanation.outputs] == pytest.approx([h.score for h in decoded])
    assert explanation.decoding["beam"] == "3" and explanation.decoding["n-best"] == "3"
    for output in explanation.outputs:
        assert output.cross.weights.shape[-2:] == (len(output.pieces) + 1, len(SOURCE))
    if family == "rnn":
        assert explanation.encoder is None and explanation.outputs[0].decoder is None
        assert explanation.outputs[0].cross.weights.shape[:2] == (1, 1)


def test_the_attention_method_reads_the_chosen_map(untrained_without_dropout) -> None:
    trained = load_trained_model(untrained_without_dropout["transformer"])
    output = explain(trained, SOURCE, TARGET, layer=1, head=2).outputs[0]
    np.testing.assert_allclose(
        output.methods["attention"].source, output.cross.weights[0, 1], atol=1e-5
    )
    mean = explain(trained, SOURCE, TARGET, methods=["attention", "gradient-x-input"])
    np.testing.assert_allclose(
        mean.outputs[0].methods["attention"].source,
        mean.outputs[0].cross.weights[-1].mean(0),
        atol=1e-5,
    )


def test_header_names_the_model_and_the_decoding(untrained_without_dropout) -> None:
    trained = load_trained_model(untrained_without_dropout["transformer"])
    explanation = explain(trained, SOURCE, beam=2, checkpoint="tf.pt", methods=["attention"])
    assert explanation.checkpoint == "tf.pt"
    assert explanation.model["family"] == "transformer"
    assert explanation.model["heads"] == "2"
    parameters = sum(p.numel() for p in trained.model.parameters())
    assert explanation.model["parameters"] == f"{parameters:,}"
    assert explanation.decoding["length penalty"] == f"{trained.cfg.decoding.length_penalty:g}"
    assert explanation.decoding["max length"].startswith(
        str(
            int(len(SOURCE) * trained.cfg.decoding.max_output_ratio)
            + trained.cfg.decoding.max_output_extra
        )
    )
    assert explanation.version == attnseq.__version__


@pytest.mark.parametrize(
    ("src", "tgt", "methods", "message"),
    [
        ("  ", None, None, "empty source"),
        (SOURCE, " ", None, "empty target"),
        (SOURCE, None, ["attention", "magic"], "^methods must be one of .* got 'magic'"),
        (SOURCE, None, [], "no method given"),
        (SOURCE, None, ["rollout"], "^methods rollout needs a transformer"),
        ("4 May 2001 " * 30, None, None, "this model reads at most 256"),
    ],
)
def test_refusals(untrained_without_dropout, src, tgt, methods, message) -> None:
    trained = load_trained_model(untrained_without_dropout["rnn"])
    with pytest.raises(UserError, match=message):
        explain(trained, src, tgt, methods=methods)
    with pytest.raises(UserError, match="^layer must be in 1..1 for this model"):
        explain(trained, SOURCE, layer=2)


def test_a_command_names_its_options_in_the_refusals(untrained_without_dropout) -> None:
    trained = load_trained_model(untrained_without_dropout["rnn"])
    options = ("--methods", "--layer", "--head")
    with pytest.raises(UserError, match="^--methods must be one of .* got 'magic'"):
        check_request(trained, SOURCE, None, ["magic"], names=options)
    with pytest.raises(UserError, match="^--methods rollout needs a transformer"):
        check_request(trained, SOURCE, None, ["rollout"], names=options)
    with pytest.raises(UserError, match="^--head must be in 1..1 for this model"):
        check_request(trained, SOURCE, None, None, head=2, names=options)


def test_a_target_longer_than_the_positions_is_refused(tmp_path) -> None:
    path = untrained_checkpoint(tmp_path / "learned.pt", *SHORT_POSITIONS, pairs=DATE_PAIRS)
    trained = load_trained_model(path)
    with pytest.raises(UserError, match="has 10 positions, so it scores targets of at most 9"):
        explain(trained, "4 May", "2001-05-04")
    assert explain(trained, "4 May", "2001-05").outputs[0].pieces == list("2001-05")


def test_explaining_leaves_the_model_in_eval_mode_without_gradients(
    untrained_without_dropout,
) -> None:
    trained = load_trained_model(untrained_without_dropout["rnn"])
    explain(trained, SOURCE, TARGET)
    assert not trained.model.training
    assert all(p.grad is None for p in trained.model.parameters())
    assert torch.is_grad_enabled()


def test_a_pointer_generator_shows_p_gen_and_its_copied_words(tmp_path) -> None:
    from helpers import SOURCE_ONLY, copy_only_checkpoint

    model = attnseq.load(copy_only_checkpoint(tmp_path / "copy.pt"), "cpu")
    trained = model.trained
    source, target = f"alpha {SOURCE_ONLY} gamma", f"{SOURCE_ONLY} alpha"
    explanation = explain(trained, source, target)
    assert explanation.source_pieces == ["alpha", SOURCE_ONLY, "gamma"]
    output = explanation.outputs[0]
    assert output.pieces == [SOURCE_ONLY, "alpha"]
    assert output.p_gen is not None and output.p_gen.shape == (3,)
    np.testing.assert_allclose(output.p_gen, 1 / (1 + np.exp(2.0)), atol=1e-4)  # fixed bias -2
    for weights in output.methods.values():
        assert weights.source.shape == (3, 3)
    # the copied word is scored as a copy, as `attnseq score` scores it, not as <unk>
    assert output.log_prob == pytest.approx(model.score(source, target).log_prob, abs=1e-4)
    assert output.token_log_probs[0] > -5


def test_kernel_self_attention_in_the_encoder_leaves_no_encoder_map(tmp_path) -> None:
    path = untrained_checkpoint(
        tmp_path / "linear.pt", "model.family=transformer", "model.attention.kind=linear"
    )
    explanation = explain(load_trained_model(path), SOURCE, TARGET, methods=["attention"])
    output = explanation.outputs[0]
    assert explanation.encoder is None  # phi(Q) (phi(K)^T V) forms no weights
    assert output.decoder is not None  # the decoder's self-attention stays full
    assert output.cross.weights.shape == (1, 2, len(TARGET) + 1, len(SOURCE))
