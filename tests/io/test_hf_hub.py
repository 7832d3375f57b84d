"""hf:ORG/NAME[@REVISION] through huggingface_hub's cache (attnseq/io/hf_hub.py): read offline
from a cache laid out as huggingface_hub lays it out, and one UserError, saying where the cache
is and how to fill it, for a model that is not in it."""

import shutil
from pathlib import Path

import pytest

pytest.importorskip("huggingface_hub", reason="hf: ids are read through huggingface_hub")

from attnseq.errors import UserError  # noqa: E402
from attnseq.io.hf_hub import hub_folder, is_hub_id, parse_hub_id  # noqa: E402

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def offline_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty huggingface_hub cache in tmp_path, the hub offline (HF_HUB_OFFLINE=1)."""
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def cache_model(cache: Path, repo: str, files: Path, revision: str = "main") -> Path:
    """`files` as the snapshot of `repo` at `revision` in a huggingface_hub cache: the ref file
    naming the commit, the snapshot folder of that commit."""
    storage = cache / f"models--{repo.replace('/', '--')}"
    (storage / "refs").mkdir(parents=True, exist_ok=True)
    (storage / "refs" / revision).write_text(COMMIT)
    snapshot = storage / "snapshots" / COMMIT
    shutil.copytree(files, snapshot, dirs_exist_ok=True)
    return snapshot


def test_ids_are_spelled_hf_org_name_at_revision() -> None:
    assert is_hub_id("hf:Helsinki-NLP/opus-mt-de-en") and not is_hub_id("opus-mt-de-en")
    assert parse_hub_id("hf:Helsinki-NLP/opus-mt-de-en") == ("Helsinki-NLP/opus-mt-de-en", None)
    assert parse_hub_id(Path("hf:t5-small@v1.0")) == ("t5-small", "v1.0")
    for wrong in ("hf:", "hf:a/b/c", "hf:a/b@", "hf:../x", "hf:a b"):
        with pytest.raises(UserError, match="is not a Hugging Face model id"):
            parse_hub_id(wrong)


def test_a_cached_model_is_read_offline(offline_cache: Path, tmp_path: Path) -> None:
    files = tmp_path / "files"
    files.mkdir()
    (files / "config.json").write_text('{"model_type": "marian"}')
    snapshot = cache_model(offline_cache, "org/name", files)
    assert hub_folder("hf:org/name") == snapshot
    assert hub_folder("hf:org/name@main") == snapshot


def test_an_uncached_model_offline_says_where_the_cache_is(offline_cache: Path) -> None:
    with pytest.raises(UserError) as error:
        hub_folder("hf:Helsinki-NLP/opus-mt-de-en")
    message = str(error.value)
    assert "hf:Helsinki-NLP/opus-mt-de-en is not in the Hugging Face cache" in message
    assert str(offline_cache) in message and "HF_HOME or HF_HUB_CACHE" in message
    assert "huggingface-cli download Helsinki-NLP/opus-mt-de-en" in message
    assert "\n" not in message
