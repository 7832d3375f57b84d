"""`attnseq translate` and `Translator`: line order and count (blank lines included),
n-best format, streaming, output files, user errors; and `attnseq eval --beam`."""

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from helpers import eval_result, tiny_config
from torch import Tensor
from typer.testing import CliRunner

import attnseq
from attnseq.cli.app import app
from attnseq.data.tokenizers import TokenizerPair, train_tokenizer
from attnseq.decoding import DecodingConfig
from attnseq.decoding.translate import Translator
from attnseq.models.seq2seq import DecoderState, Seq2Seq, Seq2SeqOutput

runner = CliRunner()
MOSES_LINE = re.compile(r"^(\d+) \|\|\| (.*) \|\|\| (-?\d+\.\d{4})$")


class CopyModel(Seq2Seq):
    """A stub that outputs its source (then EOS): makes every output name its input line."""

    def __init__(self, vocab_size: int, pad_id: int, bos_id: int, eos_id: int) -> None:
        super().__init__(pad_id, bos_id, eos_id)
        self.vocab_size = vocab_size

    def forward(
        self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, need_weights: bool = False
    ) -> Seq2SeqOutput:
        raise AssertionError("translation never runs a teacher-forced pass")

    def start_decoding(self, src: Tensor, src_lengths: Tensor) -> DecoderState:
        return {"src": src, "lengths": src_lengths, "step": torch.zeros_like(src_lengths)}

    def decode_step(
        self, prev_tokens: Tensor, state: DecoderState, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None, DecoderState]:
        step = state["step"]  # (B,)
        index = step.clamp(max=state["src"].size(1) - 1).unsqueeze(1)  # (B, 1)
        wanted = state["src"].gather(1, index).squeeze(1)  # (B,)
        wanted = torch.where(step < state["lengths"], wanted, self.eos_id)
        logits = torch.nn.functional.one_hot(wanted, self.vocab_size).float() * 10  # (B, V)
        return logits, None, {**state, "step": step + 1}


def copy_translator() -> Translator:
    texts = ["abcdefghij klmnop", "qrstuvwxyz 0123456789"]
    char = train_tokenizer("char", texts)
    model = CopyModel(char.vocab_size, char.pad_id, char.bos_id, char.eos_id)
    cfg = tiny_config("decoding.max_output_extra=5")
    return Translator(model, TokenizerPair(char, char), cfg, torch.device("cpu"))


# ------------------------------------------------------------------------------ Translator
def test_outputs_keep_input_order_across_chunks_and_batches() -> None:
    translator = copy_translator()
    lines = ["abc\n", "a\n", "", "zyxw vut\n", "  \n", "q\r\n", "hello world", "ab\n", "x"]
    expected = [line.rstrip("\r\n") if line.strip() else "" for line in lines]
    for beam in (1, 3):
        settings = translator.settings(beam=beam)
        outputs = list(translator.translate(lines, settings, batch_size=2, chunk_size=4))
        assert outputs == expected


def test_nbest_outputs_in_moses_format() -> None:
    translator = copy_translator()
    outputs = list(translator.translate(["ab", "", "cd"], translator.settings(beam=3, nbest=2)))
    assert [len(output) for output in outputs] == [2, 1, 2]
    parsed = [MOSES_LINE.match(line) for output in outputs for line in output]
    assert all(parsed)
    assert [int(m.group(1)) for m in parsed] == [0, 0, 1, 2, 2]
    texts = [m.group(2) for m in parsed]
    assert [texts[0], texts[2], texts[3]] == ["ab", "", "cd"]  # the best entries
    scores = [float(m.group(3)) for m in parsed[:2]]
    assert scores == sorted(scores, reverse=True)


def test_streaming_reads_one_chunk_before_the_first_output() -> None:
    translator = copy_translator()
    consumed = 0

    def lines() -> Iterator[str]:
        nonlocal consumed
        for number in range(10_000):
            consumed += 1
            yield f"line {number % 7}"

    outputs = translator.translate(lines(), DecodingConfig(), chunk_size=50)
    assert next(outputs) == "line 0"
    assert consumed == 50


def test_a_translator_loads_a_checkpoint(trained_rnn_checkpoint: Path) -> None:
    lines = ["March 3, 1998", "", "12/05/2001"]
    settings = DecodingConfig(beam=2, max_output_extra=12)
    translator = attnseq.load(trained_rnn_checkpoint, "cpu").translator
    outputs = list(translator.translate(lines, settings, batch_size=2))
    assert len(outputs) == 3 and outputs[1] == ""
    assert all(isinstance(output, str) for output in outputs)


# ------------------------------------------------------------------------------------- CLI
@pytest.mark.slow
def test_cli_translate_keeps_line_count_and_blank_lines(
    trained_rnn_checkpoint: Path, tmp_path: Path
) -> None:
    text = "March 3, 1998\n\n12/05/2001\n   \nthe 3rd of May 2020\n"
    result = runner.invoke(
        app,
        [
            "translate",
            str(trained_rnn_checkpoint),
            "--beam",
            "3",
            "--batch-size",
            "2",
            "--device",
            "cpu",
        ],
        input=text,
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.split("\n")
    assert lines[-1] == "" and len(lines) == 6  # five outputs, each ending in a newline
    assert lines[1] == "" and lines[3] == ""
    # each line alone gives the same output as in the batch
    for number, line in enumerate(text.splitlines()):
        if line.strip():
            alone = runner.invoke(
                app, ["translate", str(trained_rnn_checkpoint), "--beam", "3"], input=line
            )
            assert alone.stdout == lines[number] + "\n"

    source = tmp_path / "in.txt"
    source.write_text(text, encoding="utf-8")
    target = tmp_path / "out" / "hyp.txt"
    result = runner.invoke(
        app,
        [
            "translate",
            str(trained_rnn_checkpoint),
            "--beam",
            "3",
            "-i",
            str(source),
            "-o",
            str(target),
        ],
    )
    assert result.exit_code == 0, result.output
    assert target.read_text(encoding="utf-8") == "\n".join(lines)


def test_cli_translate_nbest(trained_rnn_checkpoint: Path) -> None:
    result = runner.invoke(
        app,
        [
            "translate",
            str(trained_rnn_checkpoint),
            "--beam",
            "4",
            "--nbest",
            "3",
            "--length-penalty",
            "0",
        ],
        input="March 3, 1998\n\n1.2.03\n",
    )
    assert result.exit_code == 0, result.output
    matches = [MOSES_LINE.match(line) for line in result.stdout.splitlines()]
    assert all(matches), result.stdout
    assert [int(m.group(1)) for m in matches] == [0, 0, 0, 1, 2, 2, 2]


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        ([], "", "no input"),
        (["--nbest", "6"], "a\n", "nbest=6 is more than beam=1"),
        (["--input", "missing.txt"], "", "input file not found"),
    ],
)
def test_cli_translate_user_errors(
    trained_rnn_checkpoint: Path, args: list[str], stdin: str, message: str, tmp_path: Path
) -> None:
    target = tmp_path / "out.txt"
    result = runner.invoke(
        app, ["translate", str(trained_rnn_checkpoint), "-o", str(target), *args], stdin
    )
    assert result.exit_code == 2
    assert message in result.stderr
    assert "Traceback" not in result.output
    assert not target.exists()  # nothing half-written


def test_cli_translate_missing_checkpoint(tmp_path: Path) -> None:
    result = runner.invoke(app, ["translate", str(tmp_path / "nope.pt")], input="a\n")
    assert result.exit_code == 2
    assert "checkpoint not found" in result.stderr


def test_cli_eval_with_beam(trained_rnn_checkpoint: Path, tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "eval",
            str(trained_rnn_checkpoint),
            "--beam",
            "2",
            "--out",
            str(tmp_path),
            "--device",
            "cpu",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "test/exact_match" in result.stdout
    assert (eval_result(tmp_path) / "hyps.txt").is_file()


# The same bytes through stdin and --input: a lone \r stays inside its line, CRLF loses its \r.
SAME_BYTES = b"3 March 1998\r\nMarch 4th,\r1999\n\n12/05/2001\n"


def test_cli_translate_reads_stdin_and_input_files_alike(
    trained_rnn_checkpoint: Path, tmp_path: Path
) -> None:
    source = tmp_path / "in.txt"
    source.write_bytes(SAME_BYTES)
    piped = runner.invoke(app, ["translate", str(trained_rnn_checkpoint)], input=SAME_BYTES)
    from_file = runner.invoke(
        app, ["translate", str(trained_rnn_checkpoint), "--input", str(source)]
    )
    assert piped.exit_code == 0 and from_file.exit_code == 0, piped.output + from_file.output
    assert piped.stdout == from_file.stdout
    assert len(piped.stdout.splitlines()) == 4  # split at \n only: four lines, one of them blank


@pytest.mark.parametrize("through", ["stdin", "--input"])
def test_cli_translate_names_the_line_that_is_not_utf8(
    trained_rnn_checkpoint: Path, tmp_path: Path, through: str
) -> None:
    data = b"3 March 1998\ncaf\xe9 1999\n"
    source = tmp_path / "in.txt"
    source.write_bytes(data)
    args = ["translate", str(trained_rnn_checkpoint), "-o", str(tmp_path / "out.txt")]
    if through == "stdin":
        result = runner.invoke(app, args, input=data)
    else:
        result = runner.invoke(app, [*args, "--input", str(source)])
    assert result.exit_code == 2
    assert "line 2 is not UTF-8 text" in result.stderr
    assert "Traceback" not in result.output and not (tmp_path / "out.txt").exists()


def test_cli_translate_reads_a_fifo(trained_rnn_checkpoint: Path, tmp_path: Path) -> None:
    """--input accepts a named pipe (and so process substitution, /dev/fd/N)."""
    import os
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(SAME_BYTES))
    writer.start()
    result = runner.invoke(app, ["translate", str(trained_rnn_checkpoint), "--input", str(fifo)])
    writer.join(timeout=30)
    assert result.exit_code == 0, result.output
    assert len(result.stdout.splitlines()) == 4


def test_cli_translate_refuses_a_folder_as_input(
    trained_rnn_checkpoint: Path, tmp_path: Path
) -> None:
    result = runner.invoke(
        app, ["translate", str(trained_rnn_checkpoint), "--input", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert f"--input file {tmp_path} is a folder, not a text file" in result.stderr
