"""Guided alignment training (Garg et al. 2019): word links -> piece links -> each batch's gold
distribution; the supervised attention and its loss term; the config and file errors (exit
status 2); one short training run with the term on."""

import json
from pathlib import Path

import helpers
import pytest
import torch
from helpers import attnseq_in_process, tiny_config
from typer.testing import CliRunner

from attnseq.cli.app import app
from attnseq.config.checks import validate
from attnseq.data.batching import collate, gold_distribution
from attnseq.data.generated import gold_alignments
from attnseq.data.guided_alignment import piece_links, read_alignment_file, split_piece_links
from attnseq.data.prepare import prepare_data
from attnseq.errors import UserError
from attnseq.models.objective import alignment_term, training_loss
from attnseq.models.seq2seq import AlignmentHead
from attnseq.training.run import run_training

REVERSE = ("data.name=reverse", "data.train_size=60", "data.valid_size=10", "data.test_size=10")


def write_reverse_links(path: Path, train_size: int = 60, *, extra_lines: int = 0) -> Path:
    """The reverse task's gold links of its train split (i <-> n-1-i) as a Pharaoh file."""
    sizes = {"train": train_size, "valid": 10, "test": 10}
    gold = gold_alignments("reverse", sizes, 1, min_len=3, max_len=12, vocab_size=20)
    assert gold is not None
    lines = [" ".join(f"{i}-{j}" for i, j in sorted(links)) for links in gold["train"]]
    path.write_text("\n".join(lines + ["0-0"] * extra_lines) + "\n", encoding="utf-8")
    return path


# ----------------------------------------------------------------------------- piece links
def test_a_word_link_links_every_piece_of_both_words() -> None:
    src = ["▁Der", "▁Hund", "e", "▁bellt"]  # words: Der, Hunde (2 pieces), bellt
    tgt = ["▁The", "▁dog", "s", "▁bark"]
    links = piece_links({(0, 0), (1, 1), (2, 2)}, src, tgt, ("sentencepiece", "sentencepiece"))
    assert links == [(0, 0), (1, 1), (1, 2), (2, 1), (2, 2), (3, 3)]


def test_char_pieces_link_their_letters_and_skip_spaces() -> None:
    src, tgt = list("ab c"), list("c ab")  # words ab, c / c, ab
    links = piece_links({(0, 1), (1, 0)}, src, tgt, ("char", "char"))
    # source word 0 = pieces 0, 1; target word 1 = pieces 2, 3; the spaces (piece 2 / 1) have none
    assert links == [(0, 2), (0, 3), (1, 2), (1, 3), (3, 0)]


def test_a_link_outside_the_words_is_an_error() -> None:
    with pytest.raises(ValueError, match="outside the pair's 2 source and 1 target words"):
        piece_links({(0, 1)}, ["a", "b"], ["c"], ("word", "word"))


def test_gold_rows_are_distributions_over_the_linked_pieces() -> None:
    gold = gold_distribution([[(0, 0), (2, 0), (1, 1)], []], T=3, S=4)
    assert gold.shape == (2, 3, 4)
    assert gold[0, 0].tolist() == [0.5, 0.0, 0.5, 0.0]  # target piece 0: source 0 and 2
    assert gold[0, 1].tolist() == [0.0, 1.0, 0.0, 0.0]
    assert gold[0, 2].sum() == 0 and gold[1].sum() == 0  # EOS and the unlinked example: no row


def test_collate_carries_the_gold_only_when_given() -> None:
    examples = [([5, 6], [7, 8, 9]), ([5], [7])]
    plain = collate(examples, [0, 1], pad_id=0, bos_id=2, eos_id=3)
    assert plain.alignment is None
    batch = collate(
        examples, [0, 1], pad_id=0, bos_id=2, eos_id=3, alignments=[[(1, 0), (0, 2)], [(0, 0)]]
    )
    assert batch.alignment is not None and batch.alignment.shape == (2, 4, 2)  # (B, T+1, S)
    assert batch.alignment[0, 2].tolist() == [1.0, 0.0]  # the step predicting target piece 2
    assert batch.to("cpu").alignment is not None


# ------------------------------------------------------------------------------ the files
def test_the_links_follow_the_kept_examples(tmp_path: Path) -> None:
    path = write_reverse_links(tmp_path / "train.align")
    cfg = tiny_config(*REVERSE, "data.max_tgt_len=8", f"data.alignments={{train: {path}}}")
    data = prepare_data(cfg.data, cfg.seed, splits=["train"])
    assert data.stats["train"]["dropped_too_long"] > 0  # some pairs (and lines) are left out
    links = split_piece_links(cfg.data, data)
    assert len(links) == len(data.examples["train"])
    for (src, tgt), example_links in zip(data.examples["train"], links, strict=True):
        # reverse, char pieces with spaces between symbols: piece 2k links piece len-1-2k
        assert example_links == sorted((s, len(src) - 1 - s) for s in range(0, len(src), 2))
        assert len(src) == len(tgt)


def test_a_file_with_the_wrong_line_count_is_refused(tmp_path: Path) -> None:
    path = write_reverse_links(tmp_path / "train.align", extra_lines=3)
    cfg = tiny_config(*REVERSE, f"data.alignments={{train: {path}}}")
    with pytest.raises(UserError, match="has 63 lines, but the train split has 60 pairs"):
        read_alignment_file(cfg.data, "train", 60)
    # a file of the whole split serves a run that keeps only the first N pairs
    cut = tiny_config(*REVERSE, "data.max_examples=50", f"data.alignments={{train: {path}}}")
    assert len(read_alignment_file(cut.data, "train", 50)) == 50


def test_a_malformed_link_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "train.align"
    path.write_text("0-0\n1:2\n", encoding="utf-8")
    cfg = tiny_config(f"data.alignments={{train: {path}}}")
    with pytest.raises(UserError, match=r"data.alignments.train .*line 2: cannot parse link"):
        read_alignment_file(cfg.data, "train", 2)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ((), "needs word alignments of the training pairs: data.alignments.train=FILE"),
        (("model.copy=true",), "is not supported with model.copy or model.coverage"),
        (("model.attention.score=none",), "needs attention: model.attention.score=none"),
        (("model.attention.window=local_m",), "needs model.attention.window=global"),
        (("model.family=transformer", "model.alignment_layer=1"), "alignment_layer=1 is not a"),
        (("model.family=transformer", "model.alignment_head=2"), "alignment_head=2 is not a head"),
    ],
)
def test_config_rules(overrides: tuple[str, ...], expected: str) -> None:
    alignments = () if not overrides else ("data.alignments={train: links.txt}",)
    with pytest.raises(UserError, match=expected):  # config_from_dict validates
        tiny_config("optim.alignment_lambda=0.5", *alignments, *overrides)
    validate(tiny_config(*alignments, *overrides))  # without the term, none of them matters


@pytest.mark.slow
def test_cli_errors_exit_with_status_2(tmp_path: Path) -> None:
    small = [*REVERSE, "trainer.max_steps=1", "trainer.device=cpu", "trainer.progress=false"]
    args = ["train", *small, "optim.alignment_lambda=1", f"hydra.run.dir={tmp_path / 'run'}"]
    result = CliRunner().invoke(app, args)  # refused before Hydra starts
    assert result.exit_code == 2 and "needs word alignments" in result.output, result.output
    short = tmp_path / "short.align"
    short.write_text("0-0\n", encoding="utf-8")
    done = attnseq_in_process(*args, f"+data.alignments.train={short}", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "has 1 lines, but the train split has 60 pairs" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_missing_file_is_a_user_error(tmp_path: Path) -> None:
    cfg = tiny_config(*REVERSE, "optim.alignment_lambda=1", "data.alignments={train: none.txt}")
    with pytest.raises(UserError, match=r"data.alignments.train=none.txt: no such file"):
        run_training(cfg, tmp_path / "run")


# ------------------------------------------------------------------- attention and loss
def aligning_model(family: str) -> torch.nn.Module:
    """helpers.tiny_model to align with: a transformer of two decoder layers (a layer other than
    the last to pick), an RNN as it is (it has one map)."""
    layers = {"dec_layers": 2} if family == "transformer" else {}
    return helpers.tiny_model(family, **layers)


SRC = torch.tensor([[4, 5, 6, 7], [8, 9, 10, 0]])  # (B, S), the second source padded
LENGTHS = torch.tensor([4, 3])
TGT_IN = torch.tensor([[2, 4, 5], [2, 6, 7]])  # (B, T)


def test_the_transformer_returns_the_chosen_head_without_changing_the_logits() -> None:
    model = aligning_model("transformer").eval()
    plain = model(SRC, LENGTHS, TGT_IN)
    assert plain.alignment_attention is None
    full = model(SRC, LENGTHS, TGT_IN, need_weights=True).attention  # (B, L, H, T, S)
    for head in (None, 1):
        out = model(SRC, LENGTHS, TGT_IN, alignment=AlignmentHead(layer=-2, head=head))
        torch.testing.assert_close(out.logits, plain.logits)
        expected = full[:, 0].mean(dim=1) if head is None else full[:, 0, head]
        torch.testing.assert_close(out.alignment_attention, expected)
        assert out.attention is None


def test_the_rnn_returns_its_attention() -> None:
    model = aligning_model("rnn").eval()
    out = model(SRC, LENGTHS, TGT_IN, alignment=AlignmentHead())
    weights = model(SRC, LENGTHS, TGT_IN, need_weights=True).attention
    torch.testing.assert_close(out.alignment_attention, weights)


def test_the_term_is_the_cross_entropy_with_the_gold_rows() -> None:
    attention = torch.tensor([[[0.5, 0.25, 0.25], [0.1, 0.9, 0.0]]])  # (1, 2, 3)
    gold = torch.tensor([[[0.5, 0.5, 0.0], [0.0, 0.0, 0.0]]])  # second step unlinked
    term = alignment_term(attention, gold, weight=2.0)
    expected = 2.0 * -(0.5 * torch.log(torch.tensor(0.5)) + 0.5 * torch.log(torch.tensor(0.25)))
    torch.testing.assert_close(term, expected)
    # a zero weight on a padded (gold 0) position stays finite
    assert torch.isfinite(alignment_term(torch.zeros(1, 1, 2), torch.zeros(1, 1, 2), 1.0))


@pytest.mark.parametrize("family", ["transformer", "rnn"])
def test_the_gradient_pulls_the_supervised_attention_to_the_gold_link(family: str) -> None:
    model = aligning_model(family).train()
    cfg = tiny_config("optim.alignment_lambda=1.0", "data.alignments={train: links.txt}")
    # every target step of both examples linked to source position 2
    gold = gold_distribution([[(2, t) for t in range(3)], [(2, t) for t in range(3)]], 3, 4)
    head = AlignmentHead(layer=-1, head=0)
    targets = torch.tensor([[4, 5, 3], [6, 7, 3]])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)

    def gold_mass() -> float:
        with torch.no_grad():
            attention = model.eval()(SRC, LENGTHS, TGT_IN, alignment=head).alignment_attention
        model.train()
        return float(attention[..., 2].mean())

    before = gold_mass()
    for step in range(5):
        output = model(SRC, LENGTHS, TGT_IN, alignment=head)
        optimizer.zero_grad()
        training_loss(output, targets, 0, cfg.optim, step, gold).loss.backward()
        optimizer.step()
    after = gold_mass()
    # about 0.25 (uniform over 3-4 positions) before, nearly all of it after
    assert before < 0.4 and after > 0.8, (before, after)


def test_without_gold_the_loss_is_the_plain_one() -> None:
    model = aligning_model("transformer").eval()
    cfg = tiny_config("optim.alignment_lambda=1.0", "data.alignments={train: links.txt}")
    targets = torch.tensor([[4, 5, 3], [6, 7, 3]])
    output = model(SRC, LENGTHS, TGT_IN, alignment=AlignmentHead())
    plain = training_loss(model(SRC, LENGTHS, TGT_IN), targets, 0, cfg.optim, 0).loss
    torch.testing.assert_close(training_loss(output, targets, 0, cfg.optim, 0).loss, plain)
    gold = gold_distribution([[(0, 0)], [(1, 1)]], 3, 4)
    assert training_loss(output, targets, 0, cfg.optim, 0, gold).loss > plain


# ------------------------------------------------------------------------------ a short run
@pytest.mark.slow
def test_a_short_guided_run(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write_reverse_links(tmp_path / "train.align")
    cfg = tiny_config(
        *REVERSE,
        "model.family=transformer",
        "optim.alignment_lambda=1.0",
        "trainer.max_steps=3",
        f"data.alignments={{train: {path}}}",
    )
    with caplog.at_level("INFO", logger="attnseq"):
        results = run_training(cfg, tmp_path / "run")
    assert "guided alignment: 60 of 60 training pairs have links" in caplog.text
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["skipped_steps"] == 0 and 0 <= results["test/aer"] <= 1
