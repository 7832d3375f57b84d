"""attnseq/data/multilingual_tokenizer.py: the tokenizers of Hugging Face M2M100, NLLB and
mBART-50 folders give the token ids, pieces, words and decoded texts of transformers' own, in
the folder's languages and in others; they rebuild from their state alone; and
`use_language_codes` chooses their languages from data.src_lang_code and data.tgt_lang_code.
The folders are the random-weight stand-ins of tests/multilingual_stand_ins.py
(`multilingual_folders`)."""

import pickle
import shutil
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="the stand-ins are built with transformers")

from marian_stand_ins import UNKNOWN_CHARACTERS  # noqa: E402
from multilingual_checks import OTHER_LANGUAGES, SOURCES, hf_tokenizer  # noqa: E402
from multilingual_stand_ins import imported, tokenizer_texts  # noqa: E402
from pretrained_checks import refused  # noqa: E402

from attnseq.config.schema import TrainConfig  # noqa: E402
from attnseq.data.multilingual_tokenizer import (  # noqa: E402
    LanguageCodeTokenizer,
    use_language_codes,
)
from attnseq.data.tokenizers import TokenizerPair, load_tokenizer  # noqa: E402
from attnseq.data.word_alignments import word_ids  # noqa: E402
from attnseq.errors import UserError  # noqa: E402
from attnseq.models.loading import load_trained_model  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")

KINDS = ["m2m100", "nllb", "mbart50"]  # the stand-ins named after their tokenizer kinds


def pair_in(folder: Path, languages: tuple[str, str] | None) -> TokenizerPair:
    """A fresh copy of the folder's tokenizers, in `languages` if given."""
    pair = TokenizerPair.from_state(imported(folder).tokenizers.state())
    if languages is not None:
        pair.src.set_language(languages[0])
        pair.tgt.set_language(languages[1])
    return pair


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("other", [False, True], ids=["own languages", "other languages"])
def test_token_ids_are_transformers(multilingual_folders: dict, kind: str, other: bool) -> None:
    folder = multilingual_folders[kind]
    pair = pair_in(folder, OTHER_LANGUAGES[kind] if other else None)
    tokenizer = hf_tokenizer(folder, (pair.src.language, pair.tgt.language))
    texts = tokenizer_texts()
    sources, targets = tokenizer(texts)["input_ids"], tokenizer(text_target=texts)["input_ids"]
    assert all(ids[0] == pair.src.language_id() for ids in sources)
    assert all(ids[0] == pair.tgt.language_id() for ids in targets)
    assert pair.src.encode_batch(texts) == sources  # every text, batched
    assert [[*ids, pair.tgt.eos_id] for ids in pair.tgt.encode_batch(texts)] == targets
    for index in range(0, len(texts), 10):  # one at a time
        assert pair.src.encode(texts[index]) == sources[index]
        assert [*pair.tgt.encode(texts[index]), pair.tgt.eos_id] == targets[index]
    for text in texts[::50]:  # one piece per id (heatmap labels, word boundaries)
        assert len(pair.src.pieces(text)) == len(pair.src.encode(text))
        assert len(pair.tgt.pieces(text)) == len(pair.tgt.encode(text))
    # decoding stops at the first EOS and skips the code (M2M100's decode keeps it)
    outputs = [ids[1 : ids.index(pair.tgt.eos_id)] for ids in targets[::4]]
    expected = [tokenizer.decode(ids, skip_special_tokens=True) for ids in outputs]
    assert [pair.tgt.decode(ids) for ids in targets[::4]] == expected


@pytest.mark.parametrize("kind", KINDS)
def test_words_of_pieces_leave_out_the_code(multilingual_folders: dict, kind: str) -> None:
    """`word_ids` of a language-prefixed kind: the code and </s> are in no word, a piece after
    sentencepiece's "▁" starts one."""
    pair = imported(multilingual_folders[kind]).tokenizers
    text = "Zwei Hunde spielen über ☃ Schnee."
    for tokenizer in (pair.src, pair.tgt):
        pieces = tokenizer.pieces(text)
        words = word_ids(pieces, tokenizer.kind)
        assert words[0] == -1 and pieces[0] == tokenizer.ids_to_pieces([tokenizer.language_id()])[0]
        assert max(words) + 1 == len(text.split())
    assert pieces[-1] != "</s>" and pair.src.pieces(text)[-1] == "</s>"


@pytest.mark.parametrize("kind", KINDS)
def test_the_tokenizer_state_holds_its_files_and_language(
    multilingual_folders: dict, kind: str, tmp_path: Path
) -> None:
    """A tokenizer rebuilds from its state alone (JSON, pickle) in the language it was set to,
    over the model's vocabulary size: the folder it was read from is not needed."""
    target = pair_in(multilingual_folders[kind], OTHER_LANGUAGES[kind]).tgt
    assert isinstance(target, LanguageCodeTokenizer)
    target.save(tmp_path / "target.json")
    rebuilt = load_tokenizer(tmp_path / "target.json")
    unpickled = pickle.loads(pickle.dumps(target))
    text = f"Two dogs {UNKNOWN_CHARACTERS} play."
    for other in (rebuilt, unpickled):
        assert other == target and other.encode(text) == target.encode(text)
        assert other.language == OTHER_LANGUAGES[kind][1]
        assert other.vocab_size == target.vocab_size
        assert (other.pad_id, other.eos_id, other.bos_id) == (1, 2, 2)  # </s> starts


# ------------------------------------------------------------------ choosing the languages
def test_use_language_codes_sets_the_tokenizers_and_the_forced_token(
    multilingual_folders: dict,
) -> None:
    pair = pair_in(multilingual_folders["nllb"], None)
    cfg = TrainConfig()
    cfg.data.tgt_lang_code = "deu_Latn"
    use_language_codes(cfg, pair)
    assert (pair.src.language, pair.tgt.language) == ("eng_Latn", "deu_Latn")
    assert cfg.decoding.forced_first_token == pair.tgt.codes["deu_Latn"]


@pytest.mark.slow
def test_a_target_language_is_needed(multilingual_folders: dict, tmp_path: Path) -> None:
    """A folder that names no target language (tokenizer_config.json without tgt_lang, no
    forced first token) decodes once one is chosen."""
    folder = tmp_path / "model"
    shutil.copytree(multilingual_folders["nllb"], folder)
    (folder / "generation_config.json").unlink()
    assert "names no target language" in refused(folder)
    assert "choose one with data.tgt_lang_code" in refused(folder)
    trained = load_trained_model(folder, ["data.tgt_lang_code=fra_Latn"])
    assert trained.cfg.decoding.forced_first_token == trained.tokenizers.tgt.codes["fra_Latn"]


@pytest.mark.slow
def test_an_unknown_language_code_is_refused(multilingual_folders: dict) -> None:
    message = refused(multilingual_folders["m2m100"], ["data.tgt_lang_code=xx"])
    assert "unknown language code 'xx' of the model's M2M100 tokenizer" in message
    assert "knows 100 codes: af, am, ar" in message
    message = refused(multilingual_folders["mbart50"], ["data.src_lang_code=eng_Latn"])
    assert "knows 52 codes: ar_AR, cs_CZ" in message


def test_a_code_for_a_model_without_codes_is_refused(bart_folders: dict) -> None:
    message = refused(bart_folders["tied"], ["data.tgt_lang_code=de"])
    assert message == (
        "data.tgt_lang_code=de: the model's bart tokenizer has no language codes (M2M100, "
        "NLLB and mBART-50 models have them)"
    )


@pytest.mark.slow
def test_a_saved_import_keeps_its_languages(multilingual_folders: dict, tmp_path: Path) -> None:
    """A saved import rebuilds without its folder or the network, in the languages it was
    loaded with."""
    import attnseq

    folder = tmp_path / "model"
    shutil.copytree(multilingual_folders["m2m100"], folder)
    model = attnseq.load(folder, "cpu", overrides=["data.tgt_lang_code=fr"])
    expected = model.translate(SOURCES, beam=2, nbest=2)
    saved = model.save(tmp_path / "saved.pt")
    shutil.rmtree(folder)
    again = attnseq.load(saved, "cpu")
    assert again.tokenizers.tgt.language == "fr"
    assert again.translate(SOURCES, beam=2, nbest=2) == expected
    with pytest.raises(UserError):
        attnseq.load(saved, "cpu", overrides=["data.tgt_lang_code=eng_Latn"])
