"""`attnseq export` to CTranslate2 (attnseq/models/ctranslate2_export.py): what it refuses to
export, and how it writes its folder: never over the checkpoint's own, with --force only over an
earlier export's files, nothing partial after a failed write or move, through a symlink too.
Decoding with the export: tests/decoding/test_ctranslate2_engine.py."""

import errno
import os
import stat
from pathlib import Path

import pytest
from helpers import one_line_exit_2, untrained_checkpoint
from typer.testing import CliRunner

from attnseq.cli.app import app
from attnseq.models.ctranslate2_export import export_ctranslate2

runner = CliRunner()
TRANSFORMER = ["model.family=transformer", "model.enc_layers=2", "model.dec_layers=2"]


pytestmark = pytest.mark.usefixtures("cache")  # conftest.py's: a cache of its own


@pytest.mark.slow
def test_an_rnn_or_efficient_attention_checkpoint_is_refused(tmp_path: Path) -> None:
    rnn = untrained_checkpoint(tmp_path / "rnn.pt")
    result = runner.invoke(app, ["export", str(rnn), "--to", "ctranslate2", str(tmp_path / "a")])
    assert result.exit_code == 2
    assert "model.family=rnn" in result.output
    local = untrained_checkpoint(
        tmp_path / "local.pt", "model.family=transformer", "model.attention.kind=local"
    )
    result = runner.invoke(app, ["export", str(local), str(tmp_path / "b")])
    assert result.exit_code == 2
    assert "model.attention.kind=local" in result.output


def digest(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (symlinks not followed), relative name -> bytes."""
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and not path.is_symlink()
    }


@pytest.fixture
def run_folder(tmp_path: Path) -> Path:
    """A run folder: a transformer checkpoint and the run's metrics.json."""
    run = tmp_path / "run"
    untrained_checkpoint(run / "model.pt", *TRANSFORMER)
    (run / "metrics.json").write_text('{"test/bleu": 12.5}\n', encoding="utf-8")
    return run


def test_force_never_replaces_a_folder_holding_the_checkpoint(run_folder: Path) -> None:
    before = digest(run_folder)
    (run_folder.parent / "link").symlink_to(run_folder)
    spellings = [run_folder, run_folder / ".." / "run", run_folder.parent / "link"]
    for out in spellings:
        for force in ([], ["--force"]):
            result = runner.invoke(app, ["export", str(run_folder / "model.pt"), str(out), *force])
            one_line_exit_2(result, "holds the input CHECKPOINT")
    assert digest(run_folder) == before
    assert sorted(path.name for path in run_folder.parent.iterdir()) == ["link", "run"]


def test_the_checkpoint_itself_is_refused_as_out_dir(run_folder: Path) -> None:
    checkpoint = run_folder / "model.pt"
    before = checkpoint.read_bytes()
    (run_folder / "alias.pt").symlink_to(checkpoint)
    for out in (checkpoint, run_folder / "alias.pt"):
        result = runner.invoke(app, ["export", str(checkpoint), str(out), "--force"])
        one_line_exit_2(result, "is the input CHECKPOINT")
    assert checkpoint.read_bytes() == before and (run_folder / "alias.pt").is_symlink()


@pytest.mark.slow
def test_force_over_an_earlier_export_replaces_its_files_only(
    ctranslate2, run_folder: Path, tmp_path: Path
) -> None:
    out = tmp_path / "ct2"
    assert runner.invoke(app, ["export", str(run_folder / "model.pt"), str(out)]).exit_code == 0
    (out / "notes.txt").write_text("my notes\n", encoding="utf-8")
    (out / "source.model").write_bytes(b"a tokenizer an earlier export wrote")
    earlier = digest(out)
    other = untrained_checkpoint(tmp_path / "other.pt", *TRANSFORMER, "seed=7")
    one_line_exit_2(
        runner.invoke(app, ["export", str(other), str(out)]), "earlier export", "--force"
    )
    assert digest(out) == earlier
    assert runner.invoke(app, ["export", str(other), str(out), "--force"]).exit_code == 0
    fresh = export_ctranslate2(other, tmp_path / "fresh")
    replaced = digest(out)
    assert replaced.pop("notes.txt") == b"my notes\n"  # not the export's: it stays
    assert replaced == digest(fresh)  # the other checkpoint's export, the stale tokenizer gone
    assert replaced["model.bin"] != earlier["model.bin"]


def test_a_folder_of_other_files_is_refused_even_with_force(run_folder, tmp_path) -> None:
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "hyp.txt").write_text("a hypothesis\n", encoding="utf-8")
    (folder / "model.bin").write_bytes(b"not an attnseq export")
    before = digest(folder)
    for force in ([], ["--force"]):
        result = runner.invoke(app, ["export", str(run_folder / "model.pt"), str(folder), *force])
        one_line_exit_2(result, "not an attnseq export", "hyp.txt")
    assert digest(folder) == before


def honest_access(monkeypatch: pytest.MonkeyPatch) -> None:
    """os.access that honours the owner's write bit for root too (root's access(2) ignores
    mode bits), so a chmod 555 folder reads as read-only as it does for any other user."""
    real = os.access

    def access(path, mode, *args, **kwargs) -> bool:
        if mode & os.W_OK and not os.stat(path).st_mode & stat.S_IWUSR:
            return False
        return real(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "access", access)


def test_a_read_only_folder_is_refused_before_the_work(
    run_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    honest_access(monkeypatch)
    empty, parent = tmp_path / "empty", tmp_path / "locked"
    empty.mkdir()
    parent.mkdir()
    for folder in (empty, parent):
        folder.chmod(0o555)
    try:
        for out in (empty, parent / "ct2"):
            result = runner.invoke(app, ["export", str(run_folder / "model.pt"), str(out)])
            one_line_exit_2(result, "cannot write into", "read-only")
    finally:
        for folder in (empty, parent):
            folder.chmod(0o755)
    assert list(empty.iterdir()) == list(parent.iterdir()) == []


def fail_writing_model_bin(code: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """CTranslate2's writer of model.bin writes half a file, then fails with OSError(code)."""
    from ctranslate2.specs.model_spec import ModelSpec

    def serialize(self, path: str) -> None:
        with open(path, "wb") as handle:
            handle.write(b"\0" * 4096)
        raise OSError(code, os.strerror(code), path)

    monkeypatch.setattr(ModelSpec, "_serialize", serialize)


@pytest.mark.slow
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS])
def test_a_failed_write_leaves_nothing_partial(
    ctranslate2, run_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    """A full disk or a file system turned read-only while model.bin is written: one line,
    no new folder and no staging folder; an earlier export stays byte for byte."""
    earlier = tmp_path / "exports" / "earlier"
    export_ctranslate2(run_folder / "model.pt", earlier)
    (earlier / "notes.txt").write_text("my notes\n", encoding="utf-8")
    before = digest(earlier)
    fail_writing_model_bin(code, monkeypatch)
    checkpoint = str(run_folder / "model.pt")
    new = tmp_path / "exports" / "new"
    one_line_exit_2(runner.invoke(app, ["export", checkpoint, str(new)]), os.strerror(code))
    result = runner.invoke(app, ["export", checkpoint, str(earlier), "--force"])
    one_line_exit_2(result, f"cannot write {earlier}", os.strerror(code))
    assert sorted(path.name for path in earlier.parent.iterdir()) == ["earlier"]
    assert sorted(path.name for path in earlier.iterdir()) == sorted(before)
    assert digest(earlier) == before


@pytest.mark.slow
def test_a_failed_move_into_place_keeps_the_earlier_export(
    ctranslate2, run_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import attnseq.io.atomic

    earlier = tmp_path / "earlier"
    export_ctranslate2(run_folder / "model.pt", earlier)
    before = digest(earlier)

    def replace(source, target) -> None:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(target))

    monkeypatch.setattr(attnseq.io.atomic.os, "replace", replace)
    result = runner.invoke(app, ["export", str(run_folder / "model.pt"), str(earlier), "--force"])
    monkeypatch.undo()
    one_line_exit_2(result, "Read-only file system")
    assert sorted(path.name for path in earlier.iterdir()) == sorted(before)
    assert digest(earlier) == before


@pytest.mark.slow
def test_an_export_through_a_symlinked_folder(
    ctranslate2, run_folder: Path, tmp_path: Path
) -> None:
    """OUT_DIR a symlink to an empty folder or to an earlier export: the files land in the
    folder it points to and the link stays a link; a link to nothing is one line."""
    checkpoint = str(run_folder / "model.pt")
    fresh = digest(export_ctranslate2(run_folder / "model.pt", tmp_path / "fresh"))
    for name in ("empty", "earlier"):
        target = tmp_path / "targets" / name
        target.mkdir(parents=True)
        if name == "earlier":
            export_ctranslate2(run_folder / "model.pt", target)
            (target / "target.model").write_bytes(b"a stale tokenizer")
        link = tmp_path / f"link-{name}"
        link.symlink_to(target, target_is_directory=True)
        result = runner.invoke(app, ["export", checkpoint, str(link), "--force"])
        assert result.exit_code == 0, result.output
        assert link.is_symlink() and digest(target) == fresh
    assert sorted(path.name for path in (tmp_path / "targets").iterdir()) == ["earlier", "empty"]
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "missing")
    result = runner.invoke(app, ["export", checkpoint, str(dangling)])
    one_line_exit_2(result, "symlink to a missing folder")
    assert dangling.is_symlink() and not (tmp_path / "missing").exists()


@pytest.mark.parametrize(
    "feature", ["model.attention.memory_slots=2", "model.conv_kernel=3"], ids=["memory", "conv"]
)
def test_features_the_engine_would_drop_are_refused(feature: str) -> None:
    from helpers import tiny_config

    from attnseq.models.ctranslate2_export import unsupported_features

    problems = unsupported_features(tiny_config(*TRANSFORMER, feature))
    assert len(problems) == 1 and problems[0].startswith(feature)
    assert unsupported_features(tiny_config(*TRANSFORMER)) == []


# ------------------------------------------------------------------ imported models
# The reference is CTranslate2's own converter of the Hugging Face folder: the same tokens and
# scores from both folders. Its converter needs what older transformers wrote into BART's
# config.json (the released models have it), and starts Marian's decoder from a zero vector
# with <pad> dropped from the vocabulary: it computes the model where the <pad> row of the
# target embedding is zero and <pad> is never likely, which the copies below make true.
SCORE_TOLERANCE = 1e-4
BART_CONFIG = {"normalize_before": False, "normalize_embedding": True}


def converter_ready(folder: Path, copy: Path) -> Path:
    """A copy of a BART or Marian stand-in that CTranslate2's own converter computes exactly."""
    import json
    import shutil

    import torch
    from transformers import AutoModelForSeq2SeqLM

    shutil.copytree(folder, copy, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    model = AutoModelForSeq2SeqLM.from_pretrained(folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    if config["model_type"] == "marian":
        pad = model.config.pad_token_id
        with torch.no_grad():
            model.model.decoder.embed_tokens.weight[pad] = 0
            model.final_logits_bias[0, pad] = -1e4
    model.save_pretrained(copy)
    if config["model_type"] == "bart":
        config = json.loads((copy / "config.json").read_text(encoding="utf-8"))
        (copy / "config.json").write_text(json.dumps({**config, **BART_CONFIG}), encoding="utf-8")
    return copy


def perturbed(folder: Path, path: Path) -> Path:
    """The model of `folder` as attnseq reads it with every weight moved, saved at `path`."""
    import torch
    from helpers import save_model

    from attnseq.models.loading import load_trained_model

    trained = load_trained_model(folder)
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in trained.model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    return save_model(path, trained.cfg, trained.tokenizers, trained.model)


@pytest.fixture(scope="module")
def engine_folders(
    bart_folders: dict, marian_folders: dict, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[Path, Path, Path]]:
    """(the Hugging Face folder, attnseq's export, the converter's folder) by name: the BART
    and Marian stand-ins (Marian's "separate" is left out: the converter refuses its two
    vocabularies), and a BART checkpoint whose Hugging Face export (models/bart_export.py)
    the converter reads."""
    pytest.importorskip("ctranslate2", reason="ctranslate2 not installed (attnseq[ct2])")
    import ctranslate2

    from attnseq.models.huggingface_export import export_huggingface

    root = tmp_path_factory.mktemp("ct2-imported")
    folders = {f"bart-{name}": path for name, path in bart_folders.items()}
    folders.update({f"marian-{name}": marian_folders[name] for name in ("shared", "untied")})
    ready = {name: converter_ready(path, root / f"{name}-hf") for name, path in folders.items()}
    checkpoint = perturbed(bart_folders["tied"], root / "perturbed.pt")
    exported = export_huggingface(checkpoint, root / "perturbed-export")
    ready["bart-perturbed"] = converter_ready(exported, root / "bart-perturbed-hf")
    sources = {**ready, "bart-perturbed": checkpoint}
    found = {}
    for name, folder in ready.items():
        ours = export_ctranslate2(sources[name], root / f"{name}-attnseq")
        theirs = root / f"{name}-converter"
        ctranslate2.converters.TransformersConverter(str(folder)).convert(str(theirs))
        found[name] = (folder, ours, theirs)
    return found


ENGINE_MODELS = ["bart-tied", "bart-untied", "bart-perturbed", "marian-shared", "marian-untied"]


@pytest.mark.parametrize("name", ENGINE_MODELS)
@pytest.mark.parametrize("beam", [1, 4])
def test_an_imported_model_decodes_as_the_converters_folder(
    engine_folders: dict, name: str, beam: int
) -> None:
    import ctranslate2
    from conftest import SHARED_DATA
    from transformers import AutoTokenizer

    folder, *exports = engine_folders[name]
    tokenizer = AutoTokenizer.from_pretrained(folder)
    language = "en" if name.startswith("bart") else "de"
    lines = (SHARED_DATA / "multi30k" / f"val.{language}").read_text(encoding="utf-8")
    sources = [
        tokenizer.convert_ids_to_tokens(tokenizer(line)["input_ids"])
        for line in lines.splitlines()[:16]
    ]
    prefix = [["<s>"]] * len(sources) if name.startswith("bart") else None  # forced <s>
    found = []
    for export in exports:
        translator = ctranslate2.Translator(str(export), intra_threads=1)
        results = translator.translate_batch(
            sources,
            beam_size=beam,
            target_prefix=prefix,
            no_repeat_ngram_size=2,
            max_decoding_length=30,
            return_scores=True,
        )
        found.append([(result.hypotheses[0], result.scores[0]) for result in results])
    ours, theirs = found
    assert [tokens for tokens, _ in ours] == [tokens for tokens, _ in theirs]
    assert max(abs(a - b) for (_, a), (_, b) in zip(ours, theirs, strict=True)) < SCORE_TOLERANCE
    assert len({tuple(tokens) for tokens, _ in ours}) > 1  # the sources decode differently


@pytest.mark.slow
def test_what_the_engine_cannot_express_is_one_line(tmp_path: Path) -> None:
    """Hard attention is refused with the rest; a post-norm model with GELU, unscaled
    embeddings, learned positions with an offset, layernorm_embedding and a logits bias
    exports."""
    from helpers import tiny_config

    from attnseq.models.ctranslate2_export import unsupported_features

    bart_like = (
        "model.norm=post",
        "model.activation=gelu",
        "model.scale_embeddings=false",
        "model.positions=learned",
        "model.position_offset=2",
        "model.embed_norm=true",
        "model.output_bias=true",
    )
    assert unsupported_features(tiny_config(*TRANSFORMER, *bart_like)) == []
    hard = untrained_checkpoint(tmp_path / "hard.pt", *TRANSFORMER, "model.attention.hard=gumbel")
    result = runner.invoke(app, ["export", str(hard), str(tmp_path / "out")])
    one_line_exit_2(result, "model.attention.hard=gumbel")
