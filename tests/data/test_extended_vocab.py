"""The extended vocabulary of copy models: source words outside the target vocabulary get ids
V, V+1, ... per example, target labels copy them, batches carry them, and decoding writes them
back as the source's text (word tokenizers with separate vocabularies; a joint sentencepiece
model's unknown characters)."""

import pytest
import torch

from attnseq.data.batching import Batch, CopyBatch, collate
from attnseq.data.extended_vocab import (
    ExtendedExample,
    extend_examples,
    extend_text,
    extended_pieces,
)
from attnseq.data.sentencepiece_tokenizer import train_sentencepiece
from attnseq.data.tokenizers import UNK_ID, WordTokenizer

PAIRS = [
    ("alice meets bob in paris", "alice meets bob"),
    ("bob likes paris", "bob likes it"),
]


@pytest.fixture
def words() -> tuple[WordTokenizer, WordTokenizer]:
    """Separate word vocabularies: the target side never saw "paris" or "in"."""
    src = WordTokenizer.train([src for src, _ in PAIRS])
    tgt = WordTokenizer.train([tgt for _, tgt in PAIRS])
    return src, tgt


def test_source_words_outside_the_target_vocabulary_get_extended_ids(words) -> None:
    src_tok, tgt_tok = words
    V = tgt_tok.vocab_size
    text = "carol meets paris and carol in paris"
    src_ids = src_tok.encode(text)
    src_ext, oovs = extend_text(text, src_ids, src_tok, tgt_tok)
    # "meets" is a target word (its target id, not its source id); "and" is unknown to both
    assert oovs == ["carol", "paris", "and", "in"]
    assert src_ext == [
        V,
        tgt_tok.piece_to_id("meets"),
        V + 1,
        V + 2,
        V,  # the same word, the same id
        V + 3,
        V + 1,
    ]
    assert extended_pieces(tgt_tok, [V + 1, tgt_tok.piece_to_id("meets"), V + 5], oovs) == [
        "paris",
        "meets",
        "<unk>",  # past the example's OOVs
    ]


def test_targets_copy_source_words_and_other_unknowns_stay_unk(words) -> None:
    src_tok, tgt_tok = words
    V = tgt_tok.vocab_size
    pairs = [("bob visits paris", "paris visits bob"), ("bob", "rome")]
    examples = [(src_tok.encode(s), tgt_tok.encode(t)) for s, t in pairs]
    first, second = extend_examples(pairs, examples, src_tok, tgt_tok)
    assert first.oovs == ["visits", "paris"]
    assert first.tgt_ext == [V + 1, V, tgt_tok.piece_to_id("bob")]
    assert second.oovs == [] and second.tgt_ext == [UNK_ID]  # "rome" is nowhere in the source


def test_truncated_examples_keep_their_alignment(words) -> None:
    src_tok, tgt_tok = words
    pairs = [("paris bob paris rome", "rome paris")]
    examples = [(src_tok.encode(pairs[0][0])[:2], tgt_tok.encode(pairs[0][1])[:1])]
    (extended,) = extend_examples(pairs, examples, src_tok, tgt_tok)
    assert len(extended.src_ext) == 2 and extended.oovs == ["paris"]
    assert extended.tgt_ext == [UNK_ID]  # "rome" was cut from the source


def test_decode_extended_writes_the_source_words(words) -> None:
    _, tgt_tok = words
    V = tgt_tok.vocab_size
    ids = [tgt_tok.piece_to_id("bob"), V + 1, 3, V]  # ... EOS ends the output
    assert tgt_tok.decode_extended(ids, ["carol", "paris"]) == "bob paris"
    plain = [tgt_tok.piece_to_id("alice"), tgt_tok.piece_to_id("bob")]
    assert tgt_tok.decode_extended(plain, ["x"]) == tgt_tok.decode(plain) == "alice bob"


def test_joint_sentencepiece_copies_unseen_characters(tmp_path) -> None:
    texts = ["hello world this is a test of words"] * 30 + ["another line with more words"] * 30
    joint = train_sentencepiece(texts, vocab_size=40, cache_dir=tmp_path)
    text = "hello Zürich world"
    ids = joint.encode(text)
    assert UNK_ID in ids
    src_ext, oovs = extend_text(text, ids, joint, joint)
    V = joint.vocab_size
    # known pieces keep their (shared) ids; each unknown piece keeps its surface text
    assert [i for i in src_ext if i < V] == [i for i in ids if i != UNK_ID]
    assert oovs and all(piece != "<unk>" for piece in oovs) and "ü" in "".join(oovs)
    assert joint.decode(ids) != text  # plain decoding loses the unknown characters ...
    assert joint.decode_extended(src_ext, oovs) == text  # ... copying restores them
    # an extended target label for the same surface text
    (example,) = extend_examples([(text, "Zürich")], [(ids, joint.encode("Zürich"))], joint, joint)
    assert joint.decode_extended(example.tgt_ext, example.oovs) == "Zürich"
    assert any(i >= V for i in example.tgt_ext)


def test_collate_with_extended_examples_is_a_copy_batch() -> None:
    examples = [([5, 1, 6], [7, 1]), ([8], [9])]
    extended = [
        ExtendedExample(src_ext=[5, 20, 6], tgt_ext=[7, 20], oovs=["x"]),
        ExtendedExample(src_ext=[8], tgt_ext=[9], oovs=[]),
    ]
    plain = collate(examples, [0, 1], pad_id=0, bos_id=2, eos_id=3)
    batch = collate(examples, [0, 1], pad_id=0, bos_id=2, eos_id=3, extended=extended)
    assert type(plain) is Batch and plain.copy_inputs() == {}
    assert isinstance(batch, CopyBatch)
    assert batch.src_ext.tolist() == [[5, 20, 6], [8, 0, 0]]
    assert batch.tgt_in.tolist() == [[2, 7, 1], [2, 9, 0]]  # inputs stay in the vocabulary
    assert batch.tgt_out.tolist() == [[7, 20, 3], [9, 3, 0]]  # labels copy the OOV word
    assert batch.oovs == [["x"], []] and batch.n_oov == 1
    moved = batch.to(torch.device("cpu"))
    assert isinstance(moved, CopyBatch) and torch.equal(moved.src_ext, batch.src_ext)
    inputs = moved.copy_inputs()
    assert inputs["n_oov"] == 1 and torch.equal(inputs["src_ext"], batch.src_ext)
