"""`attnseq eval` keeps every result: one folder per checkpoint, split and decoding settings,
recording what was evaluated and how; the run's metrics.json is never touched. `eval` and
`translate` start from the checkpoint's decoding settings and take the same flags and
key=value overrides."""

import json
from pathlib import Path

import pytest
from helpers import tiny_config
from typer.testing import CliRunner

import attnseq
from attnseq.cli.app import app
from attnseq.config.schema import DecodingConfig
from attnseq.data.prepare import prepare_data
from attnseq.data.tokenizers import TokenizerPair
from attnseq.evaluation.checkpoint_eval import decoding_name, default_root, result_folder
from attnseq.evaluation.metrics import bleu_signature
from attnseq.training.run import run_training

runner = CliRunner()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A short run whose config decodes with beam 2 and alpha 0.6 (not the flags' defaults)."""
    run_dir = tmp_path_factory.mktemp("run")
    cfg = tiny_config("decoding.beam=2", "decoding.length_penalty=0.6", "trainer.max_steps=8")
    run_training(cfg, run_dir)
    return run_dir


def best(run: Path) -> str:
    return str(run / "checkpoints" / "best.pt")


def eval_cli(*args: str):
    result = runner.invoke(app, ["eval", *args, "--device", "cpu"])
    assert result.exit_code == 0, result.output
    return result


@pytest.mark.slow
def test_two_evals_keep_both_results_and_the_runs_metrics(run: Path) -> None:
    run_metrics = (run / "metrics.json").read_bytes()
    step = json.loads(run_metrics)["best_step"]
    greedy = eval_cli(best(run), "--beam", "1")
    beam5 = eval_cli(best(run), "--split", "valid", "--beam", "5")
    assert (run / "metrics.json").read_bytes() == run_metrics
    first = run / "eval" / f"best-step{step}" / "test.greedy"
    second = run / "eval" / f"best-step{step}" / "valid.beam5-lp0.6"
    assert f"wrote {first}/ (hyps.txt, metrics.json, refs.txt)" in greedy.stdout
    assert f"wrote {second}/" in beam5.stdout
    for folder, split, beam in ((first, "test", 1), (second, "valid", 5)):
        record = json.loads((folder / "metrics.json").read_text())
        assert record["checkpoint"] == str((run / "checkpoints" / "best.pt").resolve())
        assert record["checkpoint_step"] == step and record["split"] == split
        assert record["decoding"]["beam"] == beam
        assert record["decoding"]["length_penalty"] == 0.6  # the checkpoint's alpha
        assert record["bleu_signature"] == bleu_signature()
        assert f"{split}/bleu" in record and record["examples"] == 20
        hyps = (folder / "hyps.txt").read_text().splitlines()
        assert len(hyps) == len((folder / "refs.txt").read_text().splitlines()) == 20
    assert "test/bleu" in json.loads((first / "metrics.json").read_text())
    assert "valid/bleu" not in json.loads((first / "metrics.json").read_text())


def test_eval_of_the_run_reproduces_its_test_metrics(run: Path, tmp_path: Path) -> None:
    """No flags: the checkpoint's own settings, so the run's test numbers again."""
    eval_cli(best(run), "--out", str(tmp_path))
    [folder] = [path.parent for path in tmp_path.rglob("metrics.json")]
    assert folder.name == "test.beam2-lp0.6"
    record = json.loads((folder / "metrics.json").read_text())
    stored = json.loads((run / "metrics.json").read_text())
    for key in ("test/bleu", "test/exact_match", "test/loss"):
        assert record[key] == pytest.approx(stored[key], abs=1e-6)
    assert (folder / "hyps.txt").read_text() == (run / "hyps" / "test.txt").read_text()


@pytest.mark.slow
def test_translate_without_flags_gives_evals_outputs(run: Path, tmp_path: Path) -> None:
    from attnseq.config.conversion import config_from_dict
    from attnseq.io.checkpoint import load_checkpoint

    payload = load_checkpoint(Path(best(run)))
    cfg = config_from_dict(payload["config"])
    tokenizers = TokenizerPair.from_state(payload["tokenizers"])
    pairs = prepare_data(cfg.data, cfg.seed, tokenizers=tokenizers, splits=["test"]).pairs
    sources = "".join(src + "\n" for src, _ in pairs["test"])
    evaluated = eval_cli(best(run), "--out", str(tmp_path / "eval"))
    folder = Path(evaluated.stdout.splitlines()[-1].split()[1].rstrip("/"))
    translated = runner.invoke(app, ["translate", best(run), "--device", "cpu"], input=sources)
    assert translated.exit_code == 0, translated.output
    assert translated.stdout == (folder / "hyps.txt").read_text()
    # an override and its flag decode alike, and like eval with the same setting
    greedy = eval_cli(best(run), "decoding.beam=1", "--out", str(tmp_path / "eval"))
    greedy_folder = Path(greedy.stdout.splitlines()[-1].split()[1].rstrip("/"))
    assert greedy_folder.name == "test.greedy"
    for args in (["decoding.beam=1"], ["--beam", "1"]):
        result = runner.invoke(app, ["translate", best(run), *args], input=sources)
        assert result.exit_code == 0, result.output
        assert result.stdout == (greedy_folder / "hyps.txt").read_text()


def test_translate_defaults_to_the_checkpoints_beam(run: Path) -> None:
    # the checkpoint's beam is 2: three hypotheses per line need a larger beam
    result = runner.invoke(app, ["translate", best(run), "--nbest", "3"], input="abc\n")
    assert result.exit_code == 2
    assert "nbest=3 is more than beam=2" in result.stderr
    more = ["translate", best(run), "decoding.beam=3", "--nbest", "3"]
    ok = runner.invoke(app, more, input="a\n")
    assert ok.exit_code == 0, ok.output
    assert len(ok.stdout.splitlines()) == 3


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("decoding.beam=0", "decoding.beam must be >= 1"),
        ("trainer.nonsense=1", "nonsense"),
        ("input.txt", "arguments after the checkpoint are config overrides, key=value"),
        ("model.hidden=64", "model.* cannot change for a trained checkpoint"),
    ],
)
def test_invalid_overrides_exit_2(run: Path, override: str, message: str) -> None:
    for command in (["translate", best(run), override], ["eval", best(run), override]):
        result = runner.invoke(app, command, input="abc\n")
        assert result.exit_code == 2, result.output
        assert message in result.stderr and "Traceback" not in result.output


def test_decoding_names_say_every_setting() -> None:
    assert decoding_name(DecodingConfig()) == "greedy"
    assert decoding_name(DecodingConfig(beam=5, length_penalty=0.6)) == "beam5-lp0.6"
    summarization = DecodingConfig(
        beam=4, length_penalty=1.0, min_length=8, no_repeat_ngram=3, coverage_penalty=0.2
    )
    assert decoding_name(summarization) == "beam4-lp1-min8-norepeat3-cov0.2"
    # greedy decoding with a constraint runs the search, which ranks with alpha
    assert decoding_name(DecodingConfig(min_length=2, length_penalty=0.0)) == "beam1-lp0-min2"
    assert decoding_name(DecodingConfig(max_output_ratio=2, max_output_extra=5)) == (
        "greedy-maxlen2x+5"
    )


def test_overrides_that_change_the_data_get_their_own_folder(tmp_path: Path) -> None:
    settings = DecodingConfig()
    checkpoint = Path("run/checkpoints/last.pt")
    plain = result_folder(tmp_path, checkpoint, 40, "test", settings, ["decoding.beam=1"])
    assert plain == tmp_path / "last-step40" / "test.greedy"
    neutral = result_folder(tmp_path, checkpoint, 40, "test", settings, ["trainer.device=cpu"])
    assert neutral == plain
    changed = result_folder(tmp_path, checkpoint, 40, "test", settings, ["data.test_size=50"])
    assert changed == tmp_path / "last-step40" / "test.greedy+data.test_size=50"
    assert default_root(Path("run/checkpoints/best.pt")) == Path("run/eval")
    assert default_root(Path("avg.pt")) == Path("eval")
    aligned = result_folder(tmp_path, checkpoint, 40, "test", settings, [], ["align-a.pharaoh"])
    assert aligned.name == "test.greedy+align-a.pharaoh"
    many = [f"data.splits.test=/some/long/path/number/{i}.tsv" for i in range(5)]
    hashed = result_folder(tmp_path, checkpoint, None, "test", settings, many)
    assert hashed.parent == tmp_path / "last" and hashed.name.startswith("test.greedy+overrides-")


@pytest.mark.slow
def test_a_checkpoints_data_is_read_through_one_function() -> None:
    """Every reader of a checkpoint's data (eval, heads, compare) prepares it through
    `checkpoint_data`, which checks where the checkpoint's config points first: only that
    function, the module defining `prepare_data` and training (the user's own configuration)
    call `prepare_data`, so that the next reader cannot forget the check."""
    import ast

    package = Path(attnseq.__file__).parent
    callers = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            function = node.func if isinstance(node, ast.Call) else None
            name = getattr(function, "id", None) or getattr(function, "attr", None)
            if name == "prepare_data":
                callers.append(path.relative_to(package).as_posix())
    allowed = {"evaluation/checkpoint_eval.py", "data/prepare.py"}
    assert {caller for caller in callers if not caller.startswith("training/")} <= allowed
    assert callers.count("evaluation/checkpoint_eval.py") == 1  # in checkpoint_data alone
