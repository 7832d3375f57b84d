"""What is wrong with a Hugging Face model folder is one UserError naming it, before any model is
built (attnseq/models/pretrained.py): no config.json, a model type attnseq does not read,
tokenizer files missing or not the model's, weights that do not fit the config, a .bin that is
more than a state dict (nothing in it runs). Each test breaks a copy of a stand-in
(tests/marian_stand_ins.py)."""

import json
import pickle
import shutil
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers", reason="the stand-ins are built with transformers")

from pretrained_checks import refused  # noqa: E402

from attnseq.models.loading import load_trained_model  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


def copy(marian_folders: dict, shape: str, tmp_path: Path) -> Path:
    folder = tmp_path / shape
    shutil.copytree(marian_folders[shape], folder)
    return folder


def edit_json(path: Path, **changes: object) -> None:
    values = json.loads(path.read_text(encoding="utf-8"))
    values.update(changes)
    path.write_text(json.dumps(values), encoding="utf-8")


def test_a_folder_without_config_json(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    message = refused(tmp_path / "model")
    assert "holds no config.json of a Hugging Face model" in message and "hf:ORG/NAME" in message


def test_a_model_type_attnseq_does_not_read(marian_folders: dict, tmp_path: Path) -> None:
    folder = copy(marian_folders, "shared", tmp_path)
    edit_json(folder / "config.json", model_type="bert")
    assert (
        "model_type 'bert'; attnseq reads the model types bart, m2m_100, marian, mbart"
        in refused(folder)
    )
    (folder / "config.json").write_text("{not json", encoding="utf-8")
    assert "is not readable JSON" in refused(folder)


def test_missing_tokenizer_files(marian_folders: dict, tmp_path: Path) -> None:
    folder = copy(marian_folders, "shared", tmp_path)
    (folder / "source.spm").unlink()
    assert "lacks the Marian tokenizer's source.spm" in refused(folder)
    separate = copy(marian_folders, "separate", tmp_path)
    (separate / "target_vocab.json").unlink()
    assert "target_vocab.json (tokenizer_config.json has separate_vocabs)" in refused(separate)


def test_a_vocabulary_that_is_not_the_models(marian_folders: dict, tmp_path: Path) -> None:
    folder = copy(marian_folders, "shared", tmp_path)
    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    vocab["▁extra"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    message = refused(folder)
    assert f"has {len(vocab)} pieces" in message and f"vocab_size={len(vocab) - 1}" in message
    del vocab["▁extra"]
    vocab["<unk>"], vocab["</s>"] = vocab["</s>"], vocab["<unk>"]
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    assert "eos_token_id=0, but the tokenizer's is 1" in refused(folder)


def test_a_config_attnseq_cannot_express(marian_folders: dict, tmp_path: Path) -> None:
    folder = copy(marian_folders, "shared", tmp_path)
    edit_json(folder / "config.json", decoder_attention_heads=2)
    assert "encoder_attention_heads=4 and decoder_attention_heads=2 differ" in refused(folder)
    edit_json(folder / "config.json", decoder_attention_heads=4, activation_function="tanh")
    assert "activation_function 'tanh'" in refused(folder)


def rewrite_weights(folder: Path, change: object) -> None:
    from safetensors.torch import load_file, save_file

    state = load_file(folder / "model.safetensors")
    change(state)  # type: ignore[operator]
    save_file(state, folder / "model.safetensors")


def test_weights_that_do_not_fit_the_config(marian_folders: dict, tmp_path: Path) -> None:
    folder = copy(marian_folders, "shared", tmp_path)
    name = "model.decoder.layers.1.fc2.weight"
    rewrite_weights(folder, lambda state: state.pop(name))
    assert f"missing: {name}" in refused(folder)
    rewrite_weights(folder, lambda state: state.update({name: torch.zeros(32, 64)}))
    rewrite_weights(folder, lambda state: state.update({"model.encoder.extra": torch.zeros(1)}))
    assert "unexpected: model.encoder.extra" in refused(folder)
    rewrite_weights(folder, lambda state: state.pop("model.encoder.extra"))
    rewrite_weights(folder, lambda state: state.update({name: torch.zeros(32, 63)}))
    assert f"wrong shape: {name} (32, 63) (the config needs (32, 64))" in refused(folder)
    (folder / "model.safetensors").unlink()
    assert "holds no weights: neither model.safetensors nor pytorch_model.bin" in refused(folder)


def test_copies_of_tied_and_computed_tensors_must_agree(
    marian_folders: dict, tmp_path: Path
) -> None:
    """An older pytorch_model.bin keeps tied copies and the position tables: they must be what
    the config ties them to and the sinusoids attnseq computes."""
    folder = copy(marian_folders, "untied", tmp_path)
    state = torch.load(folder / "pytorch_model.bin", weights_only=True)
    load_trained_model(folder)  # as built: every copy agrees
    edit_json(folder / "config.json", tie_word_embeddings=True)  # now all are tied copies
    assert "lm_head.weight (tied to model.shared.weight)" in refused(folder)
    edit_json(folder / "config.json", tie_word_embeddings=False)
    positions = "model.encoder.embed_positions.weight"
    torch.save({**state, positions: state[positions] + 0.1}, folder / "pytorch_model.bin")
    assert f"{positions} is not Marian's sinusoidal table" in refused(folder)


class _RunsCode:
    """A pickle that would create a file when unpickled (what a crafted .bin can do)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (Path.touch, (self.marker,))


def test_a_bin_that_is_no_plain_state_dict_runs_nothing(
    marian_folders: dict, tmp_path: Path
) -> None:
    folder = copy(marian_folders, "untied", tmp_path)
    marker = tmp_path / "ran"
    with (folder / "pytorch_model.bin").open("wb") as handle:
        pickle.dump({"model.shared.weight": _RunsCode(marker)}, handle)
    message = refused(folder)
    assert "is not a plain state dict of tensors" in message and "nothing in it was run" in message
    assert not marker.exists()
    torch.save({"final_logits_bias": [1, 2]}, folder / "pytorch_model.bin")
    assert "is not a state dict of tensors" in refused(folder)
