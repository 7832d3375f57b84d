"""Forced word alignment (attnseq/alignment/forced.py): the attention and Shift-Att rows on a
hand-made attention matrix, the piece -> word merge, batching that changes nothing, and the map
choice; the AER of stub and tiny models' attention."""

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from helpers import SRC, TGT, eval_result, run_eval, untrained_checkpoint, write_set
from torch import Tensor, nn

from attnseq.alignment.forced import (
    AlignmentCorpus,
    AlignmentMethod,
    align_sentences,
    corpus_alignment_metrics,
    forced_word_attention,
    model_alignment_metrics,
    select_map,
)
from attnseq.alignment.word_links import alignment_error_rate, argmax_alignment, word_attention
from attnseq.attention.additive import AdditiveAttention
from attnseq.config.conversion import config_from_dict
from attnseq.data.batching import Example, encode_pairs
from attnseq.data.file_readers import read_parallel
from attnseq.data.generated import gold_alignments, make_splits
from attnseq.data.tokenizers import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    Tokenizer,
    TokenizerPair,
    train_tokenizer,
)
from attnseq.data.word_alignments import (
    read_gold,
    word_ids,
)
from attnseq.errors import UserError
from attnseq.io.checkpoint import load_checkpoint
from attnseq.models.loading import load_trained_model, model_for
from attnseq.models.rnn import RNNSeq2Seq
from attnseq.models.seq2seq import DecoderState, Seq2Seq, Seq2SeqOutput, Vocabularies
from attnseq.models.transformer import TransformerSeq2Seq

# decoder steps of "x y z" (rows) over the source "a b" (columns): step t has input y_{t-1}
HAND_MADE = torch.tensor(
    [
        [0.9, 0.1],  # input <s>, predicts x
        [0.2, 0.8],  # input x, predicts y
        [0.7, 0.3],  # input y, predicts z
        [0.4, 0.6],  # input z, predicts </s>
    ]
)


class FixedAttention(nn.Module):
    """A stand-in model whose cross-attention is HAND_MADE, whatever the input."""

    pad_id, bos_id, eos_id = 0, 1, 2

    def forward(self, src, src_lengths, tgt_in, need_weights=False):
        assert tgt_in.shape == (1, 4) and need_weights
        return SimpleNamespace(attention=HAND_MADE[None])  # (B, T, S)


def hand_made_links(target_word_ids: list[int], shift: bool) -> tuple[torch.Tensor, set]:
    example = ([5, 6], [7, 8, 9])
    words = ([0, 1], target_word_ids)
    ((index, pooled),) = forced_word_attention(FixedAttention(), [example], [words], shift=shift)
    assert index == 0
    return pooled, argmax_alignment(pooled)


def test_attention_reads_the_row_that_predicts_each_word() -> None:
    pooled, links = hand_made_links([0, 1, 2], shift=False)
    assert torch.equal(pooled, HAND_MADE[:3])  # the </s> row is dropped
    assert links == {(0, 0), (1, 1), (0, 2)}  # x -> a, y -> b, z -> a


def test_shift_att_reads_the_row_whose_input_is_each_word() -> None:
    pooled, links = hand_made_links([0, 1, 2], shift=True)
    assert torch.equal(pooled, HAND_MADE[1:])  # x: row 1, y: row 2, z: the </s> step's row 3
    assert links == {(1, 0), (0, 1), (1, 2)}  # x -> b, y -> a, z -> b


def test_shift_att_merges_a_word_s_pieces() -> None:
    # "x" "y" "z" as pieces of two words, "x" and "yz" (e.g. ▁x ▁y z): the word "yz" takes
    # the mean of the rows whose inputs are y and z: (0.7 + 0.4) / 2, (0.3 + 0.6) / 2
    pooled, links = hand_made_links(word_ids(["▁x", "▁y", "z"], "sentencepiece"), shift=True)
    assert torch.allclose(pooled, torch.tensor([[0.2, 0.8], [0.55, 0.45]]))
    assert links == {(1, 0), (0, 1)}


def test_char_pieces_merge_into_whitespace_words(rnn_checkpoint: Path) -> None:
    trained = load_trained_model(rnn_checkpoint)
    src, tgt = "7th of November, 1990", "1990-11-07 x"
    result = align_sentences(trained, [src], [tgt], AlignmentMethod("attention"))
    soft = result.soft[0]
    assert soft.shape == (2, 4)  # target words x source words
    # by hand: a target word's row is the mean over its chars' rows, a source word's column the
    # sum over its chars' columns; spaces belong to no word
    src_ids, tgt_ids = trained.tokenizers.src.encode(src), trained.tokenizers.tgt.encode(tgt)
    with torch.no_grad():
        attention = trained.model(
            torch.tensor([src_ids]),
            torch.tensor([len(src_ids)]),
            torch.tensor([[trained.model.bos_id, *tgt_ids]]),
            need_weights=True,
        ).attention[0]
    expected = np.zeros((2, 4))
    for a, (t_start, t_end) in enumerate([(0, 10), (11, 12)]):
        for b, (s_start, s_end) in enumerate([(0, 3), (4, 6), (7, 16), (17, 21)]):
            expected[a, b] = attention[t_start:t_end, s_start:s_end].sum(1).mean().item()
    assert np.allclose(soft, expected, atol=1e-6)
    assert result.links == [{(int(soft[0].argmax()), 0), (int(soft[1].argmax()), 1)}]
    # every row sums to its mass on words: 1 minus what the chars gave to spaces
    assert np.all(soft.sum(1) <= 1 + 1e-6) and np.all(soft.sum(1) > 0.5)


def test_batches_and_padding_change_nothing(rnn_checkpoint: Path) -> None:
    trained = load_trained_model(rnn_checkpoint)
    src = ["7th of November, 1990", "03 Nov 25", "13-01-2004", "the 3rd of March 1998"]
    tgt = ["1990-11-07", "2025-11-03", "2004-01-13", "1998 03 03"]
    for method in (AlignmentMethod("attention"), AlignmentMethod("shift-att")):
        one = align_sentences(trained, src, tgt, method, batch_size=1)
        all_four = align_sentences(trained, src, tgt, method, batch_size=4)
        assert one.links == all_four.links
        for a, b in zip(one.soft, all_four.soft, strict=True):
            assert np.allclose(a, b, atol=1e-6)
    plain = align_sentences(trained, src, tgt, AlignmentMethod("attention")).soft
    shifted = align_sentences(trained, src, tgt, AlignmentMethod("shift-att")).soft
    assert not np.allclose(shifted[3], plain[3], atol=1e-4)  # shift-att reads other rows


def test_select_map_picks_a_layer_and_head_or_their_mean() -> None:
    pooled = torch.arange(2 * 3 * 2 * 2, dtype=torch.float).reshape(2, 3, 2, 2)  # (L, H, Tw, Sw)
    assert torch.equal(select_map(pooled, AlignmentMethod(layer=1, head=3)), pooled[0, 2])
    assert torch.equal(select_map(pooled, AlignmentMethod()), pooled[1].mean(0))
    assert torch.equal(select_map(pooled[0, 0], AlignmentMethod()), pooled[0, 0])  # an RNN's
    with pytest.raises(ValueError, match="1..3"):
        select_map(pooled, AlignmentMethod(head=4))


def test_library_errors_name_the_problem(rnn_checkpoint: Path) -> None:
    trained = load_trained_model(rnn_checkpoint)
    with pytest.raises(UserError, match=r"^layer must be in 1\.\.1 .*RNN's attention is one"):
        align_sentences(trained, ["a"], ["b"], AlignmentMethod(layer=2))
    options = ("--method", "--layer", "--head")  # a command names its options
    with pytest.raises(UserError, match=r"^--layer must be in 1\.\.1"):
        align_sentences(trained, ["a"], ["b"], AlignmentMethod(layer=2, names=options))
    with pytest.raises(UserError, match="2 source lines but 1 target"):
        align_sentences(trained, ["a", "b"], ["c"])
    with pytest.raises(UserError, match="target line 2 is empty"):
        align_sentences(trained, ["a", "b"], ["c", " "])
    with pytest.raises(UserError, match="^method must be one of attention, shift-att"):
        align_sentences(trained, ["a"], ["b"], AlignmentMethod("best"))


def test_transformer_cross_attention_is_the_forward_s(tmp_path: Path) -> None:
    """The lean pass that alignment runs (no logits, fused encoder) returns the cross-attention
    of the model's forward with need_weights, and one layer's pooling reads that layer."""
    from attnseq.alignment.attribution import transformer_cross_attention
    from attnseq.data.batching import collate

    checkpoint = untrained_checkpoint(
        tmp_path / "t.pt", "model.family=transformer", "model.dec_layers=2", "model.heads=2"
    )
    trained = load_trained_model(checkpoint)
    model = trained.model.eval()
    src = ["7th of November, 1990", "03 Nov 25"]
    tgt = ["1990-11-07", "2025-11-03"]
    examples = [
        (trained.tokenizers.src.encode(s), trained.tokenizers.tgt.encode(t))
        for s, t in zip(src, tgt, strict=True)
    ]
    batch = collate(examples, [0, 1], pad_id=model.pad_id, bos_id=model.bos_id, eos_id=model.eos_id)
    with torch.no_grad():
        lean = transformer_cross_attention(model, batch.src, batch.src_lengths, batch.tgt_in)
        full = model(batch.src, batch.src_lengths, batch.tgt_in, need_weights=True).attention
    torch.testing.assert_close(lean, full, atol=1e-5, rtol=1e-4)
    for layer in (1, 2):
        for head in (None, 2):
            method = AlignmentMethod("attention", layer, head)
            one = align_sentences(trained, src, tgt, method).soft
            words = [
                (
                    word_ids(trained.tokenizers.src.pieces(s), "char"),
                    word_ids(trained.tokenizers.tgt.pieces(t), "char"),
                )
                for s, t in zip(src, tgt, strict=True)
            ]
            pooled = dict(forced_word_attention(model, examples, words))  # every layer
            for i in range(2):
                assert np.allclose(one[i], select_map(pooled[i], method).numpy(), atol=1e-6)


# ------------------------------------------------------------
# `attnseq eval --gold GOLD --gold-src FILE --gold-tgt FILE`: AER, precision and recall
# of a model's teacher-forced attention against gold word links, per layer and head, in
# metrics.json; Pharaoh and NAACL gold files; clear errors for bad files.


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    folder = tmp_path_factory.mktemp("align")
    files = write_set(folder / "data")
    checkpoint = untrained_checkpoint(
        folder / "run" / "checkpoints" / "best.pt",
        "model.family=transformer",
        "model.dec_layers=2",
        "model.heads=2",
        "data.source=local",
        "data.name=toy",
        "data.format=parallel",
        "data.tokenizer=word",
        f"data.root={folder / 'data'}",
        "data.splits.test=set",
        "data.src_lang=src",
        "data.tgt_lang=tgt",
        pairs=read_parallel(files["src"], files["tgt"]),
    )
    return checkpoint, files


def eval_against_gold(checkpoint: Path, files: dict[str, Path], folder: Path, tgt=None):
    """`attnseq eval` of `checkpoint` into FOLDER/eval against the set's gold links, its
    sentences the set's (or `tgt` for the targets)."""
    sentences = ["--gold-src", str(files["src"]), "--gold-tgt", str(tgt or files["tgt"])]
    return run_eval(checkpoint, folder / "eval", "--gold", str(files["gold"]), *sentences)


def direct_scores(checkpoint: Path, files: dict[str, Path]) -> dict[str, float]:
    """The same numbers from alignment.py's functions, one sentence at a time."""
    payload = load_checkpoint(checkpoint)
    cfg = config_from_dict(payload["config"])
    tokenizers = TokenizerPair.from_state(payload["tokenizers"])
    model = model_for(cfg, tokenizers)
    model.load_state_dict(payload["model"])
    model.eval()
    sure, possible = read_gold(files["gold"])
    links: dict[str, list] = {}
    for src, tgt in zip(SRC, TGT, strict=True):
        src_ids, tgt_ids = tokenizers.src.encode(src), tokenizers.tgt.encode(tgt)
        with torch.no_grad():
            attention = model(
                torch.tensor([src_ids]),
                torch.tensor([len(src_ids)]),
                torch.tensor([[model.bos_id, *tgt_ids]]),
                need_weights=True,
            ).attention[0]  # (L, H, T, S)
        words = word_attention(
            attention,
            word_ids(tokenizers.src.pieces(src), "word"),
            word_ids(tokenizers.tgt.pieces(tgt), "word"),
        )  # (L, H, T_words, S_words)
        for layer in range(words.size(0)):
            for head in range(words.size(1)):
                key = f"layer{layer + 1}/head{head + 1}"
                links.setdefault(key, []).append(argmax_alignment(words[layer, head]))
            mean = f"layer{layer + 1}/mean"
            links.setdefault(mean, []).append(argmax_alignment(words[layer].mean(0)))
    scores = {}
    for key, hyp in links.items():
        for name, value in alignment_error_rate(hyp, sure, possible).items():
            if name in ("aer", "precision", "recall"):
                scores[f"align/{name}/{key}"] = value
                if key == "layer2/mean":
                    scores[f"align/{name}"] = value
    return scores


@pytest.mark.slow
def test_metrics_json_holds_aer_precision_recall_per_head(setup, tmp_path) -> None:
    checkpoint, files = setup
    result = eval_against_gold(checkpoint, files, tmp_path)
    assert result.exit_code == 0, result.output
    assert "layer 2, head mean" in result.output and "overall (layer 2 mean)" in result.output
    metrics = json.loads((eval_result(tmp_path / "eval") / "metrics.json").read_text())
    assert "test/bleu" in metrics  # the split's own metrics are still there
    align = {key: value for key, value in metrics.items() if key.startswith("align/")}
    expected = direct_scores(checkpoint, files)
    assert set(align) == set(expected)
    for name in ("aer", "precision", "recall"):
        assert f"align/{name}/layer1/head2" in align
        assert align[f"align/{name}"] == align[f"align/{name}/layer2/mean"]
    for key, value in expected.items():
        assert align[key] == pytest.approx(value, abs=1e-12), key
        assert 0.0 <= value <= 1.0


@pytest.mark.slow
def test_naacl_and_reversed_gold_give_the_same_numbers(setup, tmp_path) -> None:
    checkpoint, files = setup
    sentences = ["--gold-src", str(files["src"]), "--gold-tgt", str(files["tgt"])]
    runs = {
        "pharaoh": ["--gold", str(files["gold"])],
        "naacl": ["--gold", str(files["naacl"])],  # detected from the content
        "naacl_named": ["--gold", str(files["naacl"]), "--gold-format", "naacl"],
        "reversed": ["--gold", str(files["reversed"]), "--gold-order", "tgt-src"],
    }
    results = {}
    for name, args in runs.items():
        result = run_eval(checkpoint, tmp_path / name, *args, *sentences)
        assert result.exit_code == 0, (name, result.output)
        metrics = json.loads((eval_result(tmp_path / name) / "metrics.json").read_text())
        results[name] = {k: v for k, v in metrics.items() if k.startswith("align/")}
    assert results["pharaoh"] == results["naacl"] == results["naacl_named"] == results["reversed"]


@pytest.mark.slow
def test_eval_spells_the_gold_options_as_align_does_and_keeps_its_old_names_hidden(
    setup, tmp_path
) -> None:
    from typer.testing import CliRunner

    from attnseq.cli.app import app

    checkpoint, files = setup
    values = [str(files["gold"]), str(files["src"]), str(files["tgt"]), "shift-att"]
    spellings = {
        "old": ["--alignments", "--align-src", "--align-tgt", "--align-method"],
        "new": ["--gold", "--gold-src", "--gold-tgt", "--method"],
    }
    results = {}
    for name, options in spellings.items():
        args = [item for pair in zip(options, values, strict=True) for item in pair]
        result = run_eval(checkpoint, tmp_path / name, *args)
        assert result.exit_code == 0, (name, result.output)
        metrics = json.loads((eval_result(tmp_path / name) / "metrics.json").read_text())
        results[name] = {k: v for k, v in metrics.items() if k.startswith("align/")}
    assert results["old"] == results["new"] and results["new"]
    shown = CliRunner().invoke(app, ["eval", "--help"], env={"COLUMNS": "200"}).output
    assert "--gold-src" in shown and "--method" in shown
    assert "--alignments" not in shown and "--align-src" not in shown


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"gold": "missing.txt"}, "--gold file not found"),
        ({"gold_text": "0-0 1:1\n"}, "cannot parse link '1:1'"),
        ({"gold_text": "0-0\n1-1\n"}, "2 lines of Pharaoh links for 4 sentences"),
        (
            {"gold_text": "0-0\n\n\n9-0\n"},
            "line 4: link 9-0 (source word, target word) is outside sentence 4",
        ),
        ({"gold_text": "1 1 1 X\n"}, "expected 'sentence_no i j [S|P]"),
        ({"src": "missing.src"}, "--gold-src file not found"),
        ({"tgt_text": "le\n"}, "has 4 lines but --gold-tgt"),
        ({"drop": "--gold-tgt"}, "--gold needs --gold-tgt"),
        ({"format": "xml"}, "unknown gold format 'xml'"),
        ({"order": "left-right"}, "--gold-order must be one of src-tgt, tgt-src"),
        ({"method": "viterbi"}, "--method must be one of attention, shift-att"),
        ({"method": "shift-att", "drop_gold": True}, "--method goes with --gold"),
    ],
)
def test_bad_gold_sets_exit_2(setup, tmp_path, change, message) -> None:
    checkpoint, files = setup
    gold, src, tgt = files["gold"], files["src"], files["tgt"]
    if "gold" in change:
        gold = tmp_path / change["gold"]
    if "gold_text" in change:
        gold = tmp_path / "gold"
        gold.write_text(change["gold_text"], encoding="utf-8")
    if "src" in change:
        src = tmp_path / change["src"]
    if "tgt_text" in change:
        tgt = tmp_path / "tgt"
        tgt.write_text(change["tgt_text"], encoding="utf-8")
    args = {"--gold": str(gold), "--gold-src": str(src), "--gold-tgt": str(tgt)}
    if "format" in change:
        args["--gold-format"] = change["format"]
    if "order" in change:
        args["--gold-order"] = change["order"]
    if "method" in change:
        args["--method"] = change["method"]
    args.pop(change.get("drop", ""), None)
    if change.get("drop_gold"):
        args = {"--method": change["method"]}
    result = run_eval(checkpoint, tmp_path / "eval", *[x for kv in args.items() for x in kv])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert not list((tmp_path / "eval").rglob("metrics.json"))


def test_empty_sentence_is_an_error(setup, tmp_path) -> None:
    checkpoint, files = setup
    tgt = tmp_path / "tgt"
    tgt.write_text("".join(line + "\n" for line in [TGT[0], "", *TGT[2:]]), encoding="utf-8")
    result = eval_against_gold(checkpoint, files, tmp_path, tgt)
    assert result.exit_code == 2 and "line 2 is empty" in result.output


@pytest.mark.slow
def test_wpt03_trial_set_with_a_sentencepiece_model(shared_data, tmp_path, monkeypatch) -> None:
    """The shared WPT 2003 en-fr gold set: Pharaoh sure + possible files and the NAACL file
    give the same numbers for an en->fr model with sentencepiece pieces."""
    monkeypatch.setenv("ATTNSEQ_CACHE", str(tmp_path / "cache"))
    folder = shared_data / "alignments" / "wpt03_enfr"
    checkpoint = untrained_checkpoint(
        tmp_path / "run" / "checkpoints" / "best.pt",
        "model.family=transformer",
        "model.dec_layers=2",
        "data.source=local",
        "data.name=wpt",
        "data.format=parallel",
        "data.tokenizer=sentencepiece",
        "data.spm_vocab_size=300",
        f"data.root={shared_data}",
        "data.splits.test=alignments/wpt03_enfr/trial",
        "data.src_lang=en",
        "data.tgt_lang=fr",
        "decoding.max_output_extra=2",
        "decoding.max_output_ratio=0.2",
        pairs=read_parallel(folder / "trial.en", folder / "trial.fr"),
    )
    sentences = ["--gold-src", str(folder / "trial.en"), "--gold-tgt", str(folder / "trial.fr")]
    pharaoh = ["--gold", str(folder / "trial.sure.pharaoh")]
    pharaoh += ["--gold-possible", str(folder / "trial.possible.pharaoh")]
    naacl = ["--gold", str(folder / "trial.wa.nonullalign")]
    results = []
    for name, args in (("pharaoh", pharaoh), ("naacl", naacl)):
        result = run_eval(checkpoint, tmp_path / name, *args, *sentences)
        assert result.exit_code == 0, result.output
        metrics = json.loads((eval_result(tmp_path / name) / "metrics.json").read_text())
        results.append({k: v for k, v in metrics.items() if k.startswith("align/")})
    assert results[0] == results[1]
    assert {"align/aer", "align/precision", "align/recall", "align/aer/layer2/head2"} <= set(
        results[0]
    )
    assert all(0.0 <= value <= 1.0 for value in results[0].values())
    # an fr->en reading of the same gold (English first) needs --gold-order tgt-src
    swapped = ["--gold-src", str(folder / "trial.fr"), "--gold-tgt", str(folder / "trial.en")]
    result = run_eval(checkpoint, tmp_path / "swapped", *naacl, *swapped)
    assert result.exit_code == 2 and "--gold-order src-tgt" in result.output


# ------------------------------------------------------- the AER of a model's attention
class StubModel(Seq2Seq):
    """Attention fixed by source position: row t puts all its weight on one column, t
    ("diagonal"), length - 1 - t ("anti") or 0 ("first").

    `heads` is None for RNN-shaped (B, T, S) weights, else a (L, H) grid of patterns for
    (B, L, H, T, S) weights. The EOS row and padding rows attend uniformly.
    """

    def __init__(self, heads: list[list[str]] | None = None, pattern: str = "anti") -> None:
        super().__init__(PAD_ID, BOS_ID, EOS_ID)
        self.heads = heads
        self.pattern = pattern

    @staticmethod
    def _weights(pattern: str, src_lengths: Tensor, T: int, S: int) -> Tensor:
        weights = torch.full((len(src_lengths), T, S), 1.0 / S)
        for b, length in enumerate(src_lengths.tolist()):
            for t in range(min(T, length)):
                weights[b, t] = 0.0
                column = {"anti": length - 1 - t, "diagonal": t, "first": 0}[pattern]
                weights[b, t, column] = 1.0
        return weights  # (B, T, S)

    def forward(
        self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, need_weights: bool = False
    ) -> Seq2SeqOutput:
        B, T = tgt_in.shape
        S = src.size(1)
        if self.heads is None:
            attention = self._weights(self.pattern, src_lengths, T, S)
        else:
            attention = torch.stack(
                [
                    torch.stack([self._weights(p, src_lengths, T, S) for p in layer], dim=1)
                    for layer in self.heads
                ],
                dim=1,
            )  # (B, L, H, T, S)
        return Seq2SeqOutput(logits=torch.zeros(B, T, 8), attention=attention)

    def start_decoding(self, src: Tensor, src_lengths: Tensor) -> DecoderState:
        return {"src_lengths": src_lengths}

    def decode_step(
        self, prev_tokens: Tensor, state: DecoderState, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None, DecoderState]:
        return torch.zeros(prev_tokens.size(0), 8), None, state


Encoded = tuple[
    list[Example],
    list[list[str]],
    list[list[str]],
    list[set[tuple[int, int]]],
    Tokenizer,
    Tokenizer,
]


def encoded(task: str, kind: str, size: int = 12) -> Encoded:
    """Examples, pieces, gold links and tokenizers of a generated task's valid split."""
    sizes = {"valid": size}
    pairs = make_splits(task, sizes, seed=0, min_len=3, max_len=7, vocab_size=10)["valid"]
    gold = gold_alignments(task, sizes, seed=0, min_len=3, max_len=7, vocab_size=10)
    assert gold is not None
    src_tok = train_tokenizer(kind, [src for src, _ in pairs])
    tgt_tok = train_tokenizer(kind, [tgt for _, tgt in pairs])
    examples = encode_pairs(pairs, src_tok, tgt_tok)
    src_pieces = [src_tok.pieces(src) for src, _ in pairs]
    tgt_pieces = [tgt_tok.pieces(tgt) for _, tgt in pairs]
    return examples, src_pieces, tgt_pieces, gold["valid"], src_tok, tgt_tok


def test_oracle_attention_scores_zero_aer() -> None:
    # reverse task, word level: an anti-diagonal model is exactly the gold alignment.
    examples, src_p, tgt_p, gold, _, _ = encoded("reverse", "word")
    args: dict[str, Any] = {"src_kind": "word", "tgt_kind": "word", "batch_size": 5}
    metrics = model_alignment_metrics(
        StubModel(pattern="anti"), examples, src_p, tgt_p, gold, **args
    )
    assert metrics == {"aer": 0.0, "precision": 1.0, "recall": 1.0}
    # the diagonal is wrong except at the middle word of odd-length sentences
    metrics = model_alignment_metrics(
        StubModel(pattern="diagonal"), examples, src_p, tgt_p, gold, **args
    )
    assert metrics["aer"] > 0.6
    # link order: attending to source word 0 everywhere gives (0, t) links, i.e. (t, 0) when
    # src_first=False; each order only matches the gold written in that order.
    n_tgt = [len(pieces) for pieces in tgt_p]
    src_first_gold = [{(0, t) for t in range(n)} for n in n_tgt]
    tgt_first_gold = [{(t, 0) for t in range(n)} for n in n_tgt]
    first = StubModel(pattern="first")
    for gold_links, src_first in ((src_first_gold, True), (tgt_first_gold, False)):
        metrics = model_alignment_metrics(
            first, examples, src_p, tgt_p, gold_links, src_first=src_first, **args
        )
        assert metrics["aer"] == 0.0
    metrics = model_alignment_metrics(first, examples, src_p, tgt_p, tgt_first_gold, **args)
    assert metrics["aer"] > 0.6


def test_char_pieces_pool_to_words() -> None:
    # copy task at character level: the diagonal over characters is the identity over words,
    # spaces (word id -1) drop out.
    examples, src_p, tgt_p, gold, _, _ = encoded("copy", "char")
    assert " " in src_p[0]
    metrics = model_alignment_metrics(
        StubModel(pattern="diagonal"),
        examples,
        src_p,
        tgt_p,
        gold,
        src_kind="char",
        tgt_kind="char",
        batch_size=4,
    )
    assert metrics["aer"] == 0.0


def test_transformer_shaped_attention_overall_is_last_layer_head_mean() -> None:
    examples, src_p, tgt_p, gold, _, _ = encoded("reverse", "word")
    model = StubModel(heads=[["diagonal", "diagonal"], ["anti", "anti"]])
    metrics = model_alignment_metrics(
        model, examples, src_p, tgt_p, gold, src_kind="word", tgt_kind="word"
    )
    assert list(metrics) == [
        "aer",
        "precision",
        "recall",
        "aer/layer1/head1",
        "aer/layer1/head2",
        "aer/layer1/mean",
        "aer/layer2/head1",
        "aer/layer2/head2",
        "aer/layer2/mean",
    ]
    assert metrics["aer"] == metrics["aer/layer2/mean"] == metrics["aer/layer2/head1"] == 0.0
    assert metrics["aer/layer1/mean"] == metrics["aer/layer1/head1"] > 0.6


def test_gold_outside_the_words_is_a_clear_error() -> None:
    examples, src_p, tgt_p, gold, _, _ = encoded("reverse", "word", size=2)
    bad = [gold[0] | {(50, 0)}, gold[1]]
    with pytest.raises(ValueError, match=r"link \(50, 0\) of example 0 is outside"):
        model_alignment_metrics(
            StubModel(), examples, src_p, tgt_p, bad, src_kind="word", tgt_kind="word"
        )
    with pytest.raises(ValueError, match="2 examples but 1 tgt_pieces"):
        model_alignment_metrics(
            StubModel(), examples, src_p, tgt_p[:1], gold, src_kind="word", tgt_kind="word"
        )


def test_tiny_untrained_rnn_and_transformer() -> None:
    torch.manual_seed(0)
    examples, src_p, tgt_p, gold, src_tok, tgt_tok = encoded("toy_translation", "word", size=8)
    V_src, V_tgt = src_tok.vocab_size, tgt_tok.vocab_size
    vocab = Vocabularies(V_src, V_tgt, PAD_ID, BOS_ID, EOS_ID)
    rnn = RNNSeq2Seq(
        vocab,
        attention=AdditiveAttention(16, 16, 8),
        emb_dim=8,
        enc_hidden=8,
        hidden=16,
    )
    rnn.train()
    metrics = model_alignment_metrics(
        rnn, examples, src_p, tgt_p, gold, gold, src_kind="word", tgt_kind="word", batch_size=3
    )
    assert set(metrics) == {"aer", "precision", "recall"}
    assert all(0.0 <= value <= 1.0 for value in metrics.values())
    assert rnn.training  # mode restored

    transformer = TransformerSeq2Seq(
        vocab,
        d_model=16,
        heads=2,
        enc_layers=1,
        dec_layers=3,
        ff_dim=32,
    )
    metrics = model_alignment_metrics(
        transformer, examples, src_p, tgt_p, gold, src_kind="word", tgt_kind="word", batch_size=3
    )
    expected = {"aer", "precision", "recall"}
    for layer in (1, 2, 3):
        expected |= {f"aer/layer{layer}/head1", f"aer/layer{layer}/head2", f"aer/layer{layer}/mean"}
    assert set(metrics) == expected
    assert metrics["aer"] == metrics["aer/layer3/mean"]
    assert all(0.0 <= value <= 1.0 for value in metrics.values())


def test_corpus_alignment_metrics_is_model_alignment_metrics_on_a_corpus() -> None:
    # the two entry points, argument lists and `AlignmentCorpus`, give the same numbers
    examples, src_p, tgt_p, gold, _, _ = encoded("reverse", "word")
    model = StubModel(heads=[["diagonal", "anti"], ["anti", "first"]])
    corpus = AlignmentCorpus(examples, src_p, tgt_p, gold, None, "word", "word")
    by_corpus = corpus_alignment_metrics(model, corpus, batch_size=5, per_map_scores=("recall",))
    by_lists = model_alignment_metrics(
        model,
        examples,
        src_p,
        tgt_p,
        gold,
        src_kind="word",
        tgt_kind="word",
        batch_size=5,
        per_map_scores=("recall",),
    )
    assert by_corpus == by_lists
    assert "recall/layer1/head2" in by_corpus and "aer/layer1/head2" not in by_corpus
