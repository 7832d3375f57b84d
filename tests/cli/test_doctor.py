"""`attnseq doctor`: what a bug report needs, read from a fake data root and cache folder."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnseq.cli import doctor
from attnseq.cli.app import app


@pytest.fixture
def fake_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A data root holding multi30k (parallel files) and nothing else; a cache of 3000 bytes."""
    root = tmp_path / "data"
    for prefix in ("train", "val", "test_2016_flickr"):
        for lang in ("de", "en"):
            path = root / "multi30k" / f"{prefix}.{lang}"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("ein Satz\n" if lang == "de" else "a sentence\n")
    cache = tmp_path / "cache"
    (cache / "spm").mkdir(parents=True)
    (cache / "spm" / "model").write_bytes(b"x" * 1000)
    (cache / "prepared.bin").write_bytes(b"y" * 2000)
    monkeypatch.setenv("ATTNSEQ_DATA", str(root))
    monkeypatch.setenv("ATTNSEQ_CACHE", str(cache))
    return tmp_path


def rows(title: str) -> dict[str, str]:
    sections = dict(doctor.report())
    return dict(sections[title])


def test_data_section_says_which_local_corpora_are_found(fake_data: Path) -> None:
    data = rows("data")
    assert data["ATTNSEQ_DATA"] == str(fake_data / "data")
    assert data["data=multi30k"] == "found (train, valid, test)"
    missing = fake_data / "data" / "tatoeba" / "eng-fra.txt"
    assert data["data=tatoeba_en_fr"] == f"missing {missing}"
    assert data["data=aeslc"].startswith("missing ")
    # generated and hub corpora need no local files: they are not listed
    assert "data=dates" not in data and "data=multi30k_hub" not in data


def test_unset_data_root_is_reported(fake_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ATTNSEQ_DATA")
    monkeypatch.chdir(fake_data)  # ./data is the fallback root: it exists here
    data = rows("data")
    assert data["ATTNSEQ_DATA"] == "not set: ./data is used"
    assert data["data=multi30k"].startswith("found")


@pytest.mark.slow
def test_cache_versions_devices_and_plugins(fake_data: Path) -> None:
    assert rows("cache") == {"folder": str(fake_data / "cache"), "size": "2.9 KiB"}
    versions = rows("versions")
    assert versions["attnseq"] == doctor.metadata.version("attnseq")
    assert versions["torch"] == doctor.metadata.version("torch")
    assert set(versions) == {"attnseq", "torch", "hydra-core", "python", "platform"}
    devices = rows("devices")
    assert devices["cuda available"] in ("True", "False")
    assert int(devices["torch threads"].split()[0]) >= 1
    assert int(devices["default threads"].split()[0]) >= 1  # what a command takes now
    plugins = rows("hydra plugins")
    assert "basic" in plugins["hydra/launcher"].split(", ")
    assert "basic" in plugins["hydra/sweeper"].split(", ")


def test_human_size() -> None:
    assert doctor.human_size(0) == "0 B"
    assert doctor.human_size(1536) == "1.5 KiB"
    assert doctor.human_size(5 * 1024**3) == "5.0 GiB"


def test_doctor_command_prints_every_section(fake_data: Path) -> None:
    result = CliRunner().invoke(app, ["doctor"])
    assert result.exit_code == 0, result.output
    for title in ("versions:", "devices:", "data:", "hydra plugins:", "cache:"):
        assert title in result.output.splitlines()
    assert "data=multi30k:" in result.output and "found (train, valid, test)" in result.output


@pytest.mark.parametrize("kind", ["file", "loop", "prepared a file"])
def test_a_cache_folder_that_cannot_be_one_is_reported_not_a_traceback(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    if kind == "file":
        cache.write_text("x", encoding="utf-8")
        said = f"unusable: {cache} is a regular file, not a folder"
    elif kind == "loop":
        cache.symlink_to(cache)
        said = f"unusable: {cache} cannot be looked at (Too many levels of symbolic links)"
    else:
        cache.mkdir()
        (cache / "prepared").write_text("x", encoding="utf-8")
        said = f"unusable: {cache / 'prepared'} is a regular file, not a folder"
    monkeypatch.setenv("ATTNSEQ_CACHE", str(cache))
    plain = CliRunner().invoke(app, ["doctor"])
    assert plain.exit_code == 0 and said in plain.output, plain.output
    verified = CliRunner().invoke(app, ["doctor", "--verify-cache"])
    assert verified.exit_code == 1, verified.output
    assert f"error: the cache is {said}: point the ATTNSEQ_CACHE" in verified.output
