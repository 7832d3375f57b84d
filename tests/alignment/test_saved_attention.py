"""`attnseq eval --save-attention` and `attnseq visualize-alignment --from-saved`: the .npz file
holds the attention the decoder produced for the output (greedy and beam), and redraws it."""

import io
import re
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import eval_result, invoke, untrained_checkpoint

from attnseq.alignment.saved_attention import (
    AttentionRecord,
    SavedAttention,
    save_attention,
    weights_key,
)
from attnseq.config.conversion import config_from_dict
from attnseq.data.prepare import prepare_data
from attnseq.data.tokenizers import TokenizerPair
from attnseq.errors import UserError
from attnseq.evaluation.evaluator import make_evaluator
from attnseq.io.checkpoint import load_checkpoint, save_checkpoint
from attnseq.models.loading import model_for

# several length-bucketed batches, so the file's order must be restored to the split's
EVAL = ["data.test_size=7", "data.eval_max_tokens=60"]
LAYERS = {"rnn": [], "transformer": ["model.dec_layers=2"]}  # saved (L, H) maps of 2 layers


def load_model(path: Path, beam: int):
    payload = load_checkpoint(path)
    cfg = config_from_dict(payload["config"], [f"decoding.beam={beam}"])
    tokenizers = TokenizerPair.from_state(payload["tokenizers"])
    model = model_for(cfg, tokenizers)
    model.load_state_dict(payload["model"])
    return cfg, tokenizers, model.eval()


def decoded_test_split(path: Path, beam: int, model=None):
    """(evaluator, hypotheses with attention) of the test split, as eval batches it."""
    cfg, tokenizers, loaded = load_model(path, beam)
    data = prepare_data(cfg.data, cfg.seed, tokenizers=tokenizers, splits=["test"])
    evaluator = make_evaluator(cfg, data, "test", torch.device("cpu"))
    return evaluator, evaluator.decode(model or loaded, need_weights=True)


def ends_mixed(hypotheses) -> bool:
    """Some hypotheses end with an EOS row and some stop at the length limit."""
    eos = [h.attention.shape[-2] == len(h.tokens) + 1 for h in hypotheses]
    return any(eos) and not all(eos)


EOS_FACTORS = (1.4, -3.0, 1.2, -3.5, -2.0, -4.0, 1.1, 1.6)


@pytest.fixture(scope="module")
def mixed_ending_checkpoints(tmp_path_factory) -> dict[str, Path]:
    """Untrained mixed_ending_checkpoints. Such models never emit EOS: EOS's (tied) embedding row is
    scaled by the first factor with which the greedy or the beam outputs mix ends with and
    without EOS, so that both kinds of rows are saved and checked."""
    folder = tmp_path_factory.mktemp("saved")
    paths = {}
    for family in ("rnn", "transformer"):
        path = folder / family / "checkpoints" / "best.pt"
        untrained_checkpoint(path, f"model.family={family}", *EVAL, *LAYERS[family])
        payload = load_checkpoint(path)
        _, tokenizers, model = load_model(path, 1)
        # the output projection is tied to the target embedding: (V, d), the last such matrix
        name = [
            name
            for name, weight in model.named_parameters()
            if weight.dim() == 2 and weight.size(0) == tokenizers.tgt.vocab_size
        ][-1]
        original = dict(model.named_parameters())[name][model.eos_id].clone()
        for factor in EOS_FACTORS:
            with torch.no_grad():
                dict(model.named_parameters())[name][model.eos_id] = original * factor
            if any(ends_mixed(decoded_test_split(path, beam, model)[1]) for beam in (1, 3)):
                save_checkpoint(path, {**payload, "model": model.state_dict()})
                break
        paths[family] = path
    return paths


@pytest.mark.slow
@pytest.mark.parametrize("beam", [1, 3])
@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_saved_attention_is_the_decoders(mixed_ending_checkpoints, family, beam, tmp_path) -> None:
    out = tmp_path / "eval"
    ckpt = str(mixed_ending_checkpoints[family])
    result = invoke("eval", ckpt, "--save-attention", "--beam", str(beam), "--out", str(out))
    assert result.exit_code == 0, result.output
    path = eval_result(out) / "attention.npz"
    assert str(path) in result.output

    # the decoder's own hypotheses, in the same batches as eval
    _, tokenizers, model = load_model(mixed_ending_checkpoints[family], beam)
    evaluator, decoded = decoded_test_split(mixed_ending_checkpoints[family], beam)
    assert len(evaluator.batches) > 1
    hyps_file = (path.parent / "hyps.txt").read_text(encoding="utf-8").splitlines()

    with np.load(path, allow_pickle=False) as saved:
        n = len(decoded)
        assert int(saved["count"]) == n and str(saved["family"]) == family
        assert int(saved["beam"]) == beam and str(saved["split"]) == "test"
        layers, heads = (1, 1) if family == "rnn" else (2, 2)
        assert (int(saved["layers"]), int(saved["heads"])) == (layers, heads)
        src_offsets, hyp_offsets = saved["src_offsets"], saved["hyp_offsets"]
        assert src_offsets.shape == hyp_offsets.shape == (n + 1,)
        assert list(saved["hyp_text"]) == hyps_file
        for i, (hypothesis, (src_ids, _)) in enumerate(
            zip(decoded, evaluator.examples, strict=True)
        ):
            weights = saved[weights_key(i)]
            assert weights.dtype == np.float32
            expected = hypothesis.attention.numpy()
            if family == "rnn":
                expected = expected[None, None]  # (T, S) -> (1, 1, T, S)
            np.testing.assert_array_equal(weights, expected)
            T, S = weights.shape[-2:]
            assert weights.shape == (layers, heads, T, S) and len(src_ids) == S
            # every row is a distribution over the real source positions
            np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
            src = saved["src_tokens"][src_offsets[i] : src_offsets[i + 1]]
            assert list(src) == tokenizers.src.ids_to_pieces(src_ids)
            assert list(saved["src_ids"][src_offsets[i] : src_offsets[i + 1]]) == src_ids
            rows = list(saved["hyp_ids"][hyp_offsets[i] : hyp_offsets[i + 1]])
            tokens = list(saved["hyp_tokens"][hyp_offsets[i] : hyp_offsets[i + 1]])
            assert len(rows) == len(tokens) == T
            if len(hypothesis.tokens) + 1 == T:  # the last row produced EOS
                assert rows == [*hypothesis.tokens, model.eos_id] and tokens[-1] == "</s>"
            else:
                assert rows == hypothesis.tokens and len(hypothesis.tokens) == T

            # ... and it is the attention of that output: teacher-forcing it gives the same
            tgt_in = torch.tensor([[model.bos_id, *hypothesis.tokens]])
            with torch.no_grad():
                forced = model(
                    torch.tensor([src_ids]), torch.tensor([S]), tgt_in, need_weights=True
                ).attention[0]
            forced = forced.numpy()[..., :T, :] if family == "transformer" else forced[:T]
            np.testing.assert_allclose(weights.reshape(forced.shape), forced, atol=1e-5, rtol=1e-4)


def record(T: int, S: int, L: int = 1, H: int = 1, text: str = "x") -> AttentionRecord:
    weights = np.random.default_rng(T * 10 + S).random((L, H, T, S)).astype(np.float32)
    return AttentionRecord(
        weights=weights,
        src_tokens=[f"s{i}" for i in range(S)],
        src_ids=list(range(S)),
        hyp_tokens=[*(f"t{i}" for i in range(T - 1)), "</s>"] if T else [],
        hyp_ids=list(range(T)),
        src_text=text,
        hyp_text="ünïcödé ▁piece",
        ref_text="",
        score=-1.5,
    )


def test_round_trip_of_ragged_examples(tmp_path) -> None:
    records = [record(3, 4, 2, 3), record(0, 2, 2, 3), record(5, 1, 2, 3, text="")]
    path = save_attention(
        tmp_path / "a.npz",
        records,
        split="valid",
        family="transformer",
        beam=4,
        length_penalty=0.6,
        src_kind="char",
        tgt_kind="sentencepiece",
    )
    assert not list(tmp_path.glob(".*.tmp"))  # the atomic write left no temporary file
    with SavedAttention(path) as saved:
        assert len(saved) == 3 and saved.family == "transformer"
        assert saved.meta["length_penalty"] == 0.6 and saved.meta["tgt_kind"] == "sentencepiece"
        for index, original in enumerate(records):
            example = saved.example(index)
            np.testing.assert_array_equal(example.weights, original.weights)
            assert example.src_tokens == original.src_tokens
            assert example.hyp_tokens == original.hyp_tokens
            assert example.hyp_ids == original.hyp_ids and example.src_ids == original.src_ids
            assert (example.src_text, example.hyp_text) == (original.src_text, "ünïcödé ▁piece")
            assert example.score == -1.5
        with pytest.raises(UserError, match=r"^index 3 is out of range: .* 3 examples \(0..2\)"):
            saved.example(3)
        with pytest.raises(UserError, match=r"^--index -1 is out of range"):
            saved.example(-1, "--index")  # a command names its option
    with pytest.raises(ValueError, match="one \\(L, H\\)"):
        save_attention(
            tmp_path / "b.npz",
            [record(2, 2, 1, 1), record(2, 2, 2, 1)],
            split="t",
            family="transformer",
            beam=1,
            length_penalty=1.0,
            src_kind="char",
            tgt_kind="char",
        )


def test_malformed_files_are_user_errors(tmp_path) -> None:
    def write(name: str, **arrays) -> Path:
        path = tmp_path / name
        np.savez(path, **arrays)
        return path

    with pytest.raises(UserError, match="not found"):
        SavedAttention(tmp_path / "missing.npz")
    (tmp_path / "text.npz").write_text("hello")
    with pytest.raises(UserError, match="not a NumPy .npz archive"):
        SavedAttention(tmp_path / "text.npz")
    with pytest.raises(UserError, match="no 'format' entry"):
        SavedAttention(write("other.npz", x=np.zeros(3)))
    arrays = _good_arrays(tmp_path, [record(2, 3)])
    with pytest.raises(UserError, match="version 7"):
        SavedAttention(write("v7.npz", **{**arrays, "version": np.array(7)}))
    with pytest.raises(UserError, match="src_offsets do not index"):
        SavedAttention(write("off.npz", **{**arrays, "src_offsets": np.array([0, 9])}))
    # object arrays need pickle, which is never allowed
    with pytest.raises(UserError, match="cannot be read"):
        SavedAttention(write("obj.npz", **{**arrays, "src_text": np.array([{}], dtype=object)}))
    broken = {key: value for key, value in arrays.items() if key != weights_key(0)}
    saved = SavedAttention(write("noweights.npz", **broken))
    with saved, pytest.raises(UserError, match="no 'weights_000000' entry"):
        saved.example(0)
    assert zipfile.is_zipfile(tmp_path / "good.npz")


@pytest.fixture(scope="module")
def saved_files(mixed_ending_checkpoints, tmp_path_factory) -> dict[str, Path]:
    files = {}
    for family, ckpt in mixed_ending_checkpoints.items():
        out = tmp_path_factory.mktemp(f"eval_{family}")
        result = invoke("eval", str(ckpt), "--save-attention", "--out", str(out))
        assert result.exit_code == 0, result.output
        files[family] = eval_result(out) / "attention.npz"
    return files


@pytest.mark.slow
@pytest.mark.parametrize(
    ("family", "args"),
    [
        ("rnn", []),
        ("rnn", ["--words"]),
        ("transformer", []),
        ("transformer", ["--all-heads"]),
        ("transformer", ["--layer", "1", "--head", "2", "--words"]),
    ],
)
def test_from_saved_draws_a_figure(saved_files, family, args, tmp_path) -> None:
    out = tmp_path / "a.png"
    result = invoke(
        "visualize-alignment",
        "--from-saved",
        str(saved_files[family]),
        "--index",
        "4",
        "--out",
        str(out),
        *args,
    )
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--index", "7"], "--index 7 is out of range"),
        (["--index", "-1"], "out of range"),
        ([], "needs --index"),
        (["--index", "0", "--src", "x"], "--src cannot be used with --from-saved"),
        (["--index", "0", "--layer", "3"], "--layer must be in 1..2"),
    ],
)
def test_from_saved_user_errors_exit_2(saved_files, args, message) -> None:
    result = invoke("visualize-alignment", "--from-saved", str(saved_files["transformer"]), *args)
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_from_saved_needs_exactly_one_source(
    mixed_ending_checkpoints, saved_files, tmp_path
) -> None:
    result = invoke("visualize-alignment")
    assert result.exit_code == 2 and "give a CHECKPOINT" in result.output
    both = [
        str(mixed_ending_checkpoints["rnn"]),
        "--from-saved",
        str(saved_files["rnn"]),
        "--index",
        "0",
    ]
    result = invoke("visualize-alignment", *both)
    assert result.exit_code == 2 and "not both" in result.output
    (tmp_path / "bad.npz").write_bytes(b"PK\x03\x04 truncated")
    result = invoke(
        "visualize-alignment", "--from-saved", str(tmp_path / "bad.npz"), "--index", "0"
    )
    assert result.exit_code == 2 and "bad.npz" in result.output


def test_a_model_without_attention_has_nothing_to_save(tmp_path) -> None:
    ckpt = untrained_checkpoint(
        tmp_path / "run" / "checkpoints" / "best.pt", "model.attention.score=none", *EVAL
    )
    result = invoke("eval", str(ckpt), "--save-attention")
    assert result.exit_code == 2, result.output
    assert "--save-attention: this model has no attention" in result.output
    assert not (tmp_path / "run" / "eval").exists()


def _good_arrays(tmp_path: Path, records: list[AttentionRecord]) -> dict[str, np.ndarray]:
    """The arrays of tmp_path/good.npz, a valid file of `records` of an RNN."""
    good = save_attention(
        tmp_path / "good.npz",
        records,
        split="test",
        family="rnn",
        beam=1,
        length_penalty=1.0,
        src_kind="char",
        tgt_kind="char",
    )
    with np.load(good, allow_pickle=False) as npz:
        return {key: npz[key] for key in npz.files}


def _huge_header_archive(path: Path, arrays: dict[str, np.ndarray]) -> Path:
    """A valid archive whose weights_000000 header declares ~149 GiB but holds a few bytes."""
    np.savez(path, **arrays)
    with zipfile.ZipFile(path) as archive:
        members = {info.filename: archive.read(info) for info in archive.infolist()}
    data = members["weights_000000.npy"]
    header = np.lib.format.header_data_from_array_1_0(np.zeros((1, 1, 2, 3), np.float32))
    header["shape"] = (1, 1, 200_000, 200_000)
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, header)
    members["weights_000000.npy"] = buffer.getvalue() + data[-24:]
    with zipfile.ZipFile(path, "w") as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    return path


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("count=-1", "count, layers or heads out of range"),
        ("string version", "version is a <U1 array"),
        ("huge header", "declares 160,000,000,000 bytes of data but holds 24"),
        ("matrix offsets", "src_offsets has shape"),
    ],
)
def test_crafted_archives_are_refused_from_their_headers(tmp_path, case, message) -> None:
    arrays = _good_arrays(tmp_path, [record(2, 3), record(1, 2)])
    path = tmp_path / "crafted.npz"
    if case == "count=-1":
        np.savez(path, **{**arrays, "count": np.array(-1)})
    elif case == "string version":
        np.savez(path, **{**arrays, "version": np.array("1")})
    elif case == "matrix offsets":
        np.savez(path, **{**arrays, "src_offsets": arrays["src_offsets"].reshape(1, -1)})
    else:
        _huge_header_archive(path, arrays)
    with pytest.raises(UserError, match=re.escape(message)), SavedAttention(path) as saved:
        saved.example(0)


def test_a_zero_row_example_reads_but_draws_nothing(tmp_path) -> None:
    """An empty output (an empty source line) is kept in the file; drawing it is a user error."""
    from attnseq.analysis.alignment_view import saved_attention_map

    arrays = _good_arrays(tmp_path, [record(2, 3), record(1, 2)])
    offsets = arrays["hyp_offsets"].copy()
    offsets[1] = offsets[0]  # example 0 keeps no rows; example 1 takes them over
    path = tmp_path / "zero.npz"
    np.savez(
        path,
        **{
            **arrays,
            "hyp_offsets": offsets,
            "weights_000000": np.zeros((1, 1, 0, 3), np.float32),
            "weights_000001": np.zeros((1, 1, int(offsets[2] - offsets[1]), 2), np.float32),
        },
    )
    with SavedAttention(path) as saved:
        assert saved.example(0).weights.shape == (1, 1, 0, 3)
    with pytest.raises(UserError, match="example 0 of .* has no attention to draw"):
        saved_attention_map(path, 0)
