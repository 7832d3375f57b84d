"""Export to CTranslate2 and decoding with it: the engine computes the same log-probabilities
as attnseq (pre- and post-norm, sinusoidal and learned positions, joint and separate
vocabularies), gives the same greedy and beam outputs, and refuses what it cannot run. The export
folder never reaches the checkpoint or files that are not an export's, and a write that fails
(read-only, full disk) leaves the old folder or nothing, with one line and exit status 2."""

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from helpers import one_line_exit_2, untrained_checkpoint
from typer.testing import CliRunner

import attnseq
from attnseq.cli.app import app
from attnseq.data.tokenizers import BOS_ID, EOS_ID
from attnseq.errors import UserError
from attnseq.models.ctranslate2_export import EXPORT_FILE, export_ctranslate2
from attnseq.training.run import run_training

runner = CliRunner()
SPM = ["data.name=toy_translation", "data.tokenizer=sentencepiece", "data.spm_vocab_size=80"]
TRANSFORMER = ["model.family=transformer", "model.enc_layers=2", "model.dec_layers=2"]
SOURCES = ["the cat sees the dog", "a small house", "the dog", "red birds sing"]


@pytest.fixture
def ctranslate2():
    return pytest.importorskip("ctranslate2", reason="ctranslate2 not installed (attnseq[ct2])")


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNSEQ_CACHE", str(tmp_path / "cache"))


def teacher_forced_log_probs(model, src: list[int], tgt: list[int]) -> list[float]:
    """log P(y_t | y_<t, x) of every target token and EOS, by attnseq's forward pass."""
    with torch.no_grad():
        output = model(
            torch.tensor([src]), torch.tensor([len(src)]), torch.tensor([[BOS_ID, *tgt]])
        )
    log_probs = torch.log_softmax(output.logits[0].float(), dim=-1)  # (T, V)
    return [log_probs[t, token].item() for t, token in enumerate([*tgt, EOS_ID])]


def scored_by_both(engine, ours) -> Iterator[tuple[list[int], list[int], list[float], list[float]]]:
    """For each of SOURCES and the first 7 pieces of its reversal as target: the source and
    target ids, the log-probabilities of the target's pieces by the engine and by attnseq's
    translator `ours` (teacher-forced)."""
    tgt_tokens = list(engine.tgt_ids)  # id order
    for text in SOURCES:
        src = ours.tokenizers.src.encode(text)
        tgt = ours.tokenizers.tgt.encode(text[::-1])[:7]
        scored = engine.engine.score_batch(
            [[engine.src_tokens[i] for i in src]], [[tgt_tokens[i] for i in tgt]]
        )[0]
        yield src, tgt, scored.log_probs, teacher_forced_log_probs(ours.model, src, tgt)


@pytest.mark.parametrize(
    "variant",
    [
        ["model.norm=pre", "model.positions=sinusoidal"],
        ["model.norm=post", "model.positions=learned", "model.max_positions=512"],
        ["data.spm_joint=false", "model.tie_embeddings=false", "model.norm=post"],
    ],
)
def test_the_engine_scores_targets_as_attnseq_does(ctranslate2, tmp_path: Path, variant) -> None:
    checkpoint = untrained_checkpoint(tmp_path / "model.pt", *TRANSFORMER, *SPM, *variant)
    folder = export_ctranslate2(checkpoint, tmp_path / "ct2")
    from attnseq.decoding.ctranslate2_engine import CTranslate2Translator

    engine = CTranslate2Translator(folder, "cpu")
    ours = attnseq.load(checkpoint, "cpu").translator
    for _, _, scored, expected in scored_by_both(engine, ours):
        assert scored == pytest.approx(expected, abs=1e-4)


def test_greedy_outputs_equal_attnseq_and_attention_comes_back(ctranslate2, tmp_path) -> None:
    checkpoint = untrained_checkpoint(tmp_path / "model.pt", *TRANSFORMER, *SPM)
    folder = export_ctranslate2(checkpoint, tmp_path / "ct2")
    from attnseq.decoding.ctranslate2_engine import CTranslate2Translator

    engine = CTranslate2Translator(folder, "cpu")
    ours = attnseq.load(checkpoint, "cpu").translator
    settings = ours.settings(beam=1)
    expected = list(ours.hypotheses(SOURCES, settings, batch_size=2))
    got = list(engine.hypotheses(SOURCES, settings, batch_size=3, attention=True))
    assert [h[0].tokens for h in got] == [h[0].tokens for h in expected]
    for text, hypotheses in zip(SOURCES, got, strict=True):
        weights = hypotheses[0].attention  # (1, 1, T_out, S)
        assert weights.shape[-1] == len(ours.tokenizers.src.encode(text))
        assert torch.allclose(weights.sum(-1), torch.ones(weights.shape[:-1]), atol=1e-4)


def test_the_engine_writes_nbest_lists_and_refuses_sampling(ctranslate2, tmp_path) -> None:
    checkpoint = untrained_checkpoint(tmp_path / "model.pt", *TRANSFORMER, *SPM)
    folder = export_ctranslate2(checkpoint, tmp_path / "ct2")
    from attnseq.decoding.ctranslate2_engine import CTranslate2Translator

    engine = CTranslate2Translator(folder, "cpu")
    outputs = list(engine.translate(["a small house", ""], engine.settings(beam=3, nbest=2)))
    assert [len(output) for output in outputs] == [2, 1]
    assert outputs[1] == ["1 |||  ||| 0.0000"]
    sampling = engine.settings(sample=True, num_samples=2)
    with pytest.raises(UserError, match="does not sample"):
        list(engine.translate(SOURCES, sampling))


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


def test_translate_with_a_folder_that_is_no_export_exits_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["translate", "--engine", "ctranslate2", str(tmp_path)])
    assert result.exit_code == 2
    assert EXPORT_FILE in result.output


@pytest.mark.slow
def test_a_trained_model_decodes_the_same_through_the_cli(ctranslate2, tmp_path: Path) -> None:
    """A toy translation transformer trained for ~30 s: `attnseq translate --engine
    ctranslate2` writes what `attnseq translate` writes, greedy and beam 4 (length penalty 0,
    where both searches rank by log P), and the int8 export stays close."""
    from helpers import tiny_config

    cfg = tiny_config(
        *TRANSFORMER,
        *SPM,
        "data.train_size=2000",
        "model.d_model=64",
        "model.ff_dim=128",
        "model.dropout=0.0",
        "trainer.max_steps=400",
        "trainer.validate_every=400",
        "trainer.num_heatmaps=0",
    )
    run_training(cfg, tmp_path / "run")
    checkpoint = tmp_path / "run" / "checkpoints" / "last.pt"
    inputs = tmp_path / "test.txt"
    inputs.write_text("\n".join(SOURCES * 3) + "\n", encoding="utf-8")
    folder, int8 = tmp_path / "ct2", tmp_path / "ct2-int8"
    assert runner.invoke(app, ["export", str(checkpoint), str(folder)]).exit_code == 0
    quantized = runner.invoke(app, ["export", str(checkpoint), str(int8), "--quantize", "int8"])
    assert quantized.exit_code == 0
    assert (int8 / "model.bin").stat().st_size < (folder / "model.bin").stat().st_size
    for beam in ("1", "4"):
        flags = ["-i", str(inputs), "--beam", beam, "--length-penalty", "0", "--device", "cpu"]
        ours = runner.invoke(app, ["translate", str(checkpoint), *flags])
        theirs = runner.invoke(app, ["translate", "--engine", "ctranslate2", str(folder), *flags])
        assert ours.exit_code == theirs.exit_code == 0
        assert theirs.stdout == ours.stdout


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


def test_a_pruned_checkpoint_exports_what_it_computes(ctranslate2, tmp_path: Path) -> None:
    """`attnseq heads --prune` masks heads; the export folds the mask into W^O, so the engine
    scores targets as the pruned model does and `translate --engine ctranslate2` writes what
    `attnseq translate` writes."""
    checkpoint = untrained_checkpoint(tmp_path / "model.pt", *TRANSFORMER, *SPM)
    pruned = tmp_path / "pruned.pt"
    result = runner.invoke(
        app,
        ["heads", str(checkpoint), "--prune", "4", "--by", "random", "--max-batches", "1",
         "--device", "cpu", "--report-dir", str(tmp_path / "heads"), "--out", str(pruned)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    folder = tmp_path / "ct2"
    assert runner.invoke(app, ["export", str(pruned), str(folder)]).exit_code == 0
    from attnseq.decoding.ctranslate2_engine import CTranslate2Translator
    from attnseq.models.head_mask import masked_heads

    engine = CTranslate2Translator(folder, "cpu")
    ours = attnseq.load(pruned, "cpu").translator
    assert len(masked_heads(ours.model)) == 4
    unpruned = attnseq.load(checkpoint, "cpu").translator
    for src, tgt, scored, expected in scored_by_both(engine, ours):
        assert scored == pytest.approx(expected, abs=1e-4)
        # the mask matters: the unpruned model scores the same target differently
        assert teacher_forced_log_probs(unpruned.model, src, tgt) != pytest.approx(
            expected, abs=1e-3
        )
    inputs = tmp_path / "test.txt"
    inputs.write_text("\n".join(SOURCES * 2) + "\n", encoding="utf-8")
    flags = ["-i", str(inputs), "--beam", "1", "--device", "cpu"]
    theirs = runner.invoke(app, ["translate", "--engine", "ctranslate2", str(folder), *flags])
    mine = runner.invoke(app, ["translate", str(pruned), *flags])
    assert mine.exit_code == theirs.exit_code == 0, theirs.output
    assert theirs.stdout == mine.stdout and len(mine.stdout.splitlines()) == 2 * len(SOURCES)


@pytest.mark.parametrize(
    "feature", ["model.attention.memory_slots=2", "model.conv_kernel=3"], ids=["memory", "conv"]
)
def test_features_the_engine_would_drop_are_refused(feature: str) -> None:
    from helpers import tiny_config

    from attnseq.models.ctranslate2_export import unsupported_features

    problems = unsupported_features(tiny_config(*TRANSFORMER, feature))
    assert len(problems) == 1 and problems[0].startswith(feature)
    assert unsupported_features(tiny_config(*TRANSFORMER)) == []


class _Engine:
    """CTranslate2's device count, as a machine with `gpus` GPUs would report it."""

    def __init__(self, gpus: int) -> None:
        self.gpus = gpus

    def get_cuda_device_count(self) -> int:
        return self.gpus


def test_the_engine_takes_torchs_device_names_and_checks_its_own_gpus() -> None:
    from attnseq.decoding.ctranslate2_engine import engine_device

    assert engine_device("auto", _Engine(0)) == torch.device("cpu")
    assert engine_device("auto", _Engine(2)) == torch.device("cuda")
    assert engine_device("cuda:1", _Engine(2)) == torch.device("cuda", 1)
    with pytest.raises(UserError, match="cuda:2 but CTranslate2 sees 2 CUDA device"):
        engine_device("cuda:2", _Engine(2))
    with pytest.raises(UserError, match="CTranslate2 runs on cpu or cuda"):
        engine_device("mps", _Engine(2))
    with pytest.raises(UserError, match="'gpu' is not a device"):
        engine_device("gpu", _Engine(2))
