"""Devices as torch spells them, everywhere one is named: the valid forms pass, anything else
(or a device this machine lacks) is one line naming the forms and what the machine has, and a
model moved with `Model.to` says where it is."""

from pathlib import Path

import pytest
import torch
from helpers import assert_refused, attnseq_in_process, train_in_process

import attnseq
from attnseq.config.devices import (
    DEVICE_FORMS,
    available_devices,
    check_device_name,
    gpu_summaries,
    resolve_device,
)
from attnseq.errors import UserError


@pytest.fixture
def two_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine seen as one with two CUDA devices (nothing is allocated on them)."""

    class Properties:
        name, total_memory, major, minor = "Test GPU", 80 * 2**30, 9, 0

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: "Test GPU")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: Properties())
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda index=None: (60 * 2**30, 80 * 2**30))


@pytest.mark.parametrize("name", ["auto", "cpu", "cuda", "cuda:0", "cuda:12", "mps"])
def test_torchs_spellings_are_valid_names(name: str) -> None:
    assert check_device_name(name) == name
    if name != "auto":  # auto is attnseq's word, not torch's
        assert check_device_name(torch.device(name)) == name


@pytest.mark.parametrize("name", ["gpu", "cpu:1", "cuda:-1", "cuda:01", "CUDA", "", "cuda:x"])
def test_other_names_are_one_line_with_the_forms_and_the_machine(name: str) -> None:
    with pytest.raises(UserError) as refusal:
        check_device_name(name, "trainer.device")
    message = str(refusal.value)
    assert f"trainer.device={name!r} is not a device" in message
    assert DEVICE_FORMS in message and "this machine has cpu" in message
    assert "\n" not in message


def test_a_device_that_is_no_string_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="device must be a str or torch.device, not int"):
        resolve_device(0)


def test_the_cpu_and_auto_resolve_on_a_machine_without_cuda() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: auto means cuda here")
    assert resolve_device("auto") == resolve_device("cpu") == torch.device("cpu")
    for missing in ("cuda", "cuda:0", "cuda:7"):
        with pytest.raises(UserError, match=f"device={missing} but this machine has cpu only"):
            resolve_device(missing)


def test_any_cuda_device_of_the_machine_can_be_chosen(two_gpus: None) -> None:
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    assert resolve_device("auto") == torch.device("cuda")
    with pytest.raises(UserError, match=r"cuda:2 but this machine has cpu, cuda:0 \(Test GPU\)"):
        resolve_device("cuda:2")
    assert available_devices() == "cpu, cuda:0 (Test GPU), cuda:1 (Test GPU)"
    assert gpu_summaries()[1] == (
        "cuda:1",
        "Test GPU, 80.0 GiB (60.0 GiB free), compute capability 9.0",
    )


def test_doctor_lists_each_gpu_with_memory_and_capability(two_gpus: None, tmp_path: Path):
    result = attnseq_in_process("doctor", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = [" ".join(line.split()) for line in result.stdout.splitlines()]
    assert "cuda:1: Test GPU, 80.0 GiB (60.0 GiB free), compute capability 9.0" in lines
    assert f"device names: {DEVICE_FORMS}" in lines


@pytest.mark.slow
def test_train_refuses_a_cuda_device_this_machine_lacks(tmp_path: Path) -> None:
    if torch.cuda.device_count() > 7:
        pytest.skip("this machine has a cuda:7")
    code, output = train_in_process(tmp_path, "trainer.device=cuda:7")
    assert_refused(tmp_path, code, output, "trainer.device=cuda:7 but this machine has")
    assert DEVICE_FORMS in output


def test_train_refuses_a_misspelt_device(tmp_path: Path) -> None:
    code, output = train_in_process(tmp_path, "trainer.device=gpu")
    assert_refused(tmp_path, code, output, "trainer.device='gpu' is not a device")


@pytest.mark.parametrize("command", ["translate", "score", "visualize-alignment"])
def test_a_commands_device_option_refuses_before_loading(command: str, tmp_path: Path):
    # the checkpoint does not exist: the device is refused first, without loading anything
    result = attnseq_in_process(command, str(tmp_path / "none.pt"), "--device", "gpu", cwd=tmp_path)
    assert result.returncode == 2
    assert "--device='gpu' is not a device; valid forms: auto, cpu" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("name", ["gpu", "mps:0", "cuda:7"])
def test_load_refuses_what_is_not_a_device_here(rnn_checkpoint: Path, name: str) -> None:
    if torch.cuda.device_count() > 7:
        pytest.skip("this machine has a cuda:7")
    with pytest.raises(attnseq.UserError, match=DEVICE_FORMS):
        attnseq.load(rnn_checkpoint, device=name, threads=1)


def test_model_to_moves_the_model_and_its_device_follows(rnn_checkpoint: Path) -> None:
    model = attnseq.load(rnn_checkpoint, device=torch.device("cpu"), threads=1)
    before = model.translate("June 5, 2001").text
    translator = model.translator
    assert model.to("cpu") is model
    assert model.device == torch.device("cpu")
    assert model.translator is not translator  # rebuilt for the device it is on now
    assert all(p.device == model.device for p in model.module.parameters())
    assert model.translate("June 5, 2001").text == before
    with pytest.raises(attnseq.UserError, match="device='gpu' is not a device"):
        model.to("gpu")
    assert model.device == torch.device("cpu")  # a refused move leaves it where it was
