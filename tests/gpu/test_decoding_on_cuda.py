"""Decoding on the device under test: greedy and beam search give the CPU's outputs for trained
tiny reverse models (an RNN and a transformer, tests/gpu/conftest.py), and the same through
`attnseq translate --device`.

Both run float32 arithmetic (TF32 off): the comparison is of one computation in two kernel
libraries, whose sums differ in the last bits only. TF32 would round every matmul input to a
10-bit mantissa, enough to flip a near-tie between two tokens of a trained model.
"""

import copy
from pathlib import Path

import pytest
import torch

from attnseq.data.batching import collate
from attnseq.data.prepare import prepare_data
from attnseq.decoding import DecodingConfig, decode
from attnseq.models.loading import load_trained_model

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("float32_arithmetic")]

SEARCHES = {"greedy": DecodingConfig(beam=1), "beam5": DecodingConfig(beam=5)}


def held_out(trained) -> tuple[list[tuple[str, str]], list[tuple[list[int], list[int]]]]:
    """The test split's (source, target) texts and (source ids, target ids)."""
    cfg = trained.cfg
    data = prepare_data(cfg.data, cfg.seed, tokenizers=trained.tokenizers, splits=["test"])
    return data.pairs["test"], data.examples["test"]


@pytest.mark.parametrize("search", list(SEARCHES))
@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_search_gives_the_cpu_outputs(
    family: str, search: str, reverse_models, device: torch.device
) -> None:
    trained = load_trained_model(reverse_models[family].checkpoint)
    pairs, examples = held_out(trained)
    model = trained.model.eval()
    batch = collate(
        examples,
        list(range(len(examples))),
        pad_id=model.pad_id,
        bos_id=model.bos_id,
        eos_id=model.eos_id,
    )
    settings = SEARCHES[search]
    with torch.no_grad():
        on_cpu = decode(model, batch.src, batch.src_lengths, settings)
        moved = copy.deepcopy(model).to(device)
        on_device = decode(moved, batch.src.to(device), batch.src_lengths.to(device), settings)
    assert len(on_cpu) == len(on_device) == len(examples) == 100
    for row, (cpu_nbest, device_nbest) in enumerate(zip(on_cpu, on_device, strict=True)):
        assert [h.tokens for h in device_nbest] == [h.tokens for h in cpu_nbest], row
        assert [h.score for h in device_nbest] == pytest.approx(
            [h.score for h in cpu_nbest], rel=1e-4, abs=1e-4
        ), row
    # the model is trained: it reverses many test sources exactly (the outputs mean something)
    texts = [trained.tokenizers.tgt.decode(nbest[0].tokens) for nbest in on_device]
    exact = sum(text == tgt for text, (_, tgt) in zip(texts, pairs, strict=True))
    assert exact / len(pairs) > 0.2, texts[:5]


def test_translate_command_on_the_device_writes_the_cpu_lines(
    reverse_models, device: torch.device, tmp_path: Path
) -> None:
    """`attnseq translate --device DEVICE`, greedy and beam 4, both families."""
    from typer.testing import CliRunner

    from attnseq.cli.app import app

    runner = CliRunner()
    for family, model in reverse_models.items():
        pairs, _ = held_out(load_trained_model(model.checkpoint))
        inputs = tmp_path / f"{family}.txt"
        inputs.write_text("".join(src + "\n" for src, _ in pairs[:40]), encoding="utf-8")
        for beam in ("1", "4"):
            lines = {}
            for name in ("cpu", str(device)):
                flags = ["-i", str(inputs), "--beam", beam, "--device", name]
                result = runner.invoke(app, ["translate", str(model.checkpoint), *flags])
                assert result.exit_code == 0, result.output
                lines[name] = result.stdout.splitlines()
            assert len(lines["cpu"]) == 40
            assert lines[str(device)] == lines["cpu"], (family, beam)


def test_ctranslate2_export_translates_on_the_device(
    reverse_models, device: torch.device, tmp_path: Path
) -> None:
    """`attnseq export --to ctranslate2`, then `attnseq translate --engine ctranslate2
    --device DEVICE` writes what attnseq's own search writes on the CPU (greedy and beam 4,
    length penalty 0: both rank by log P)."""
    from typer.testing import CliRunner

    from attnseq.cli.app import app

    ctranslate2 = pytest.importorskip(
        "ctranslate2", reason="ctranslate2 is not importable (attnseq[ct2])"
    )
    runner = CliRunner()
    model = reverse_models["transformer"]
    folder = tmp_path / "ct2"
    exported = runner.invoke(
        app, ["export", str(model.checkpoint), "--to", "ctranslate2", str(folder)]
    )
    assert exported.exit_code == 0, exported.output
    if device.type == "cuda":
        if ctranslate2.get_cuda_device_count() == 0:
            pytest.skip("this ctranslate2 build has no CUDA support (it sees no CUDA device)")
        try:  # the CUDA build loads cuBLAS of the CUDA version it was built for on first use
            probe = ctranslate2.Translator(str(folder), device="cuda")
            probe.translate_batch([["<unk>"]], max_decoding_length=1)
        except RuntimeError as error:
            pytest.skip(f"ctranslate2 cannot run on CUDA here: {error}")
    pairs, _ = held_out(load_trained_model(model.checkpoint))
    inputs = tmp_path / "test.txt"
    inputs.write_text("".join(src + "\n" for src, _ in pairs[:40]), encoding="utf-8")
    for beam in ("1", "4"):
        flags = ["-i", str(inputs), "--beam", beam, "--length-penalty", "0"]
        ours = runner.invoke(app, ["translate", str(model.checkpoint), *flags, "--device", "cpu"])
        theirs = runner.invoke(
            app,
            ["translate", "--engine", "ctranslate2", str(folder), *flags, "--device", str(device)],
        )
        assert ours.exit_code == theirs.exit_code == 0, theirs.output
        assert len(ours.stdout.splitlines()) == 40
        assert theirs.stdout == ours.stdout, beam
