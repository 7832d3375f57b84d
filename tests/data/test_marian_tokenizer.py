"""attnseq/data/marian_tokenizer.py: the tokenizers of a Hugging Face Marian folder give the
token ids, pieces and decoded texts of transformers' MarianTokenizer, and rebuild from their
state alone. The folders are the random-weight stand-ins of tests/marian_stand_ins.py
(`marian_folders`)."""

import pickle
from pathlib import Path

import pytest
from marian_stand_ins import UNKNOWN_CHARACTERS, imported, reference, tokenizer_texts

from attnseq.data.marian_tokenizer import MarianTokenizer
from attnseq.data.tokenizers import load_tokenizer

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


@pytest.mark.parametrize("shape", ["shared", "separate"])
def test_token_ids_are_marian_tokenizers(marian_folders: dict, shape: str) -> None:
    folder = marian_folders[shape]
    _, tokenizer = reference(folder)
    pair = imported(folder).tokenizers
    texts = tokenizer_texts()
    assert [pair.src.encode(text) for text in texts] == tokenizer(texts)["input_ids"]
    targets = tokenizer(text_target=texts)["input_ids"]
    assert [[*pair.tgt.encode(text), pair.tgt.eos_id] for text in texts] == targets
    for text in texts[::50]:  # one piece per id (heatmap labels, word boundaries)
        assert len(pair.src.pieces(text)) == len(pair.src.encode(text))
        assert len(pair.tgt.pieces(text)) == len(pair.tgt.encode(text))
    # decoding stops at the first EOS (a literal </s> in a text is one, as in MarianTokenizer)
    outputs = [ids[: ids.index(pair.tgt.eos_id)] for ids in targets]
    expected = [tokenizer.decode(ids, skip_special_tokens=True) for ids in outputs]
    assert [pair.tgt.decode(ids) for ids in targets] == expected
    unknown = pair.src.encode(UNKNOWN_CHARACTERS)
    assert unknown.count(pair.src.unk_id) == len(UNKNOWN_CHARACTERS.split())


def test_the_tokenizer_state_holds_its_files(marian_folders: dict, tmp_path: Path) -> None:
    """A Marian tokenizer rebuilds from its state alone (JSON, pickle): the folder it was read
    from is not needed."""
    source = imported(marian_folders["separate"]).tokenizers.src
    assert isinstance(source, MarianTokenizer)
    source.save(tmp_path / "source.json")
    rebuilt = load_tokenizer(tmp_path / "source.json")
    unpickled = pickle.loads(pickle.dumps(source))
    text = f"Zwei Hunde {UNKNOWN_CHARACTERS} spielen."
    for other in (rebuilt, unpickled):
        assert other == source and other.encode(text) == source.encode(text)
        assert (other.pad_id, other.eos_id, other.bos_id) == (source.pad_id, source.eos_id, 2)
