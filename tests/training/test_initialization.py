"""A new run from pretrained weights (`model.init_from`): a random-weight Hugging Face Marian
stand-in fine-tuned on 2,000 Multi30k pairs for 50 updates (the loss falls; killed with SIGKILL
and resumed it ends with the same weights bit for bit; eval and compare read the run; its
export translates in transformers as in attnseq), an attnseq run fine-tuned on other data, and
the refusals: a contradicting model.* key, another family, a missing init_from of the packaged
recipe."""

import shutil
import signal
from pathlib import Path

import pytest
import torch
from helpers import assert_refused, attnseq_in_process, check_train_args, train_in_process

from attnseq.errors import UserError
from attnseq.io.checkpoint import load_checkpoint

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")

TRAIN_PAIRS, EVAL_PAIRS = 2000, 8
# 50 updates of a 2,000-pair epoch, one validation (with a heatmap) at the end, a resume point
# after every update; the stand-in's 96 positions bound the lengths
FINE_TUNE = [
    "model=transformer",
    "data=multi30k",
    "data.splits.train=train",
    "data.splits.valid=valid",
    "data.splits.test=test",
    "data.max_src_len=80",
    "data.max_tgt_len=80",
    "data.max_tokens=1024",
    "optim.lr=0.0005",
    "optim.warmup_steps=5",
    "trainer.max_steps=50",
    "trainer.validate_every=50",
    "trainer.log_every=10",
    "trainer.num_heatmaps=1",
    "trainer.save_every_steps=1",
    "trainer.progress=false",
    "trainer.device=cpu",
    "trainer.threads=1",
    "decoding.max_output_ratio=1",
    "decoding.max_output_extra=10",
]


@pytest.fixture(scope="module")
def work(marian_folders: dict, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shared-vocabulary stand-in (model/), 2,000 Multi30k training pairs and a few
    validation and test pairs (data/), the test pairs as a TSV file and a source file."""
    from conftest import SHARED_DATA

    folder = tmp_path_factory.mktemp("fine-tuning")
    shutil.copytree(marian_folders["shared"], folder / "model")
    corpus = SHARED_DATA / "multi30k"
    (folder / "data").mkdir()
    splits = {"train": ("train", TRAIN_PAIRS), "valid": ("val", EVAL_PAIRS)}
    splits["test"] = ("test_2016_flickr", EVAL_PAIRS)
    for name, (source, count) in splits.items():
        for lang in ("de", "en"):
            lines = (corpus / f"{source}.{lang}").read_text(encoding="utf-8").splitlines()
            (folder / "data" / f"{name}.{lang}").write_text(
                "\n".join(lines[:count]) + "\n", encoding="utf-8"
            )
    test = [(folder / "data" / f"test.{lang}").read_text().splitlines() for lang in ("de", "en")]
    rows = [f"{src}\t{tgt}" for src, tgt in zip(*test, strict=True)]
    (folder / "pairs.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    shutil.copy(folder / "data" / "test.de", folder / "src.de")
    return folder


def fine_tune_args(work: Path, run_dir: Path) -> list[str]:
    return [
        *FINE_TUNE,
        f"model.init_from={work / 'model'}",
        f"data.root={work / 'data'}",
        f"hydra.run.dir={run_dir}",
    ]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of the module's runs: a data cache of its own."""
    return {"ATTNSEQ_CACHE": str(tmp_path_factory.mktemp("cache"))}


@pytest.fixture(scope="module")
def fine_tuned(work: Path, cache: dict[str, str]) -> Path:
    """The uninterrupted fine-tuning run (its run directory)."""
    run_dir = work / "straight"
    result = attnseq_in_process("train", *fine_tune_args(work, run_dir), cwd=work, env=cache)
    assert result.returncode == 0, result.stdout + result.stderr
    return run_dir


def logged_losses(run_dir: Path) -> list[float]:
    lines = (run_dir / "train.log").read_text(encoding="utf-8").splitlines()
    return [float(line.split(" loss ")[1].split()[0]) for line in lines if " loss " in line]


def test_fine_tuning_starts_from_the_model_and_its_tokenizers(work: Path, fine_tuned: Path) -> None:
    """The run's model.* and tokenizers are the stand-in's, the training loss falls over the
    50 updates, the step counts from 0, and TensorBoard has the run's heatmap."""
    import attnseq

    pretrained = attnseq.load(work / "model")
    last = load_checkpoint(fine_tuned / "checkpoints" / "last.pt")
    assert last["progress"]["step"] == 50
    assert last["tokenizers"] == pretrained.trained.payload["tokenizers"]
    model = dict(last["config"]["model"])
    assert model.pop("init_from") == str(work / "model")
    expected = dict(pretrained.trained.payload["config"]["model"])
    expected.pop("init_from")
    assert model == expected
    losses = logged_losses(fine_tuned)
    assert len(losses) == 5 and losses[-1] < losses[0] - 0.5, losses
    assert "initialised from" in (fine_tuned / "train.log").read_text()
    assert list((fine_tuned / "tb").rglob("events.out.tfevents.*"))


@pytest.mark.slow
def test_killed_and_resumed_fine_tuning_ends_with_the_same_weights(
    work: Path, fine_tuned: Path, cache: dict[str, str], tmp_path: Path, monkeypatch
) -> None:
    """SIGKILL after update 20, then resume=auto (which continues from last.pt, not from the
    pretrained model again): the final weights and optimizer state equal the uninterrupted
    run's bit for bit."""
    from helpers import start, wait_for_step

    monkeypatch.setenv("ATTNSEQ_CACHE", cache["ATTNSEQ_CACHE"])  # the subprocess's too
    run_dir = tmp_path / "run"
    last = run_dir / "checkpoints" / "last.pt"
    args = fine_tune_args(work, run_dir)
    process = start(["train", *args], tmp_path)
    wait_for_step(process, last, 20)
    process.kill()
    process.communicate()
    assert process.returncode == -signal.SIGKILL
    killed_at = int(load_checkpoint(last)["progress"]["step"])
    assert killed_at < 50
    resumed = attnseq_in_process("train", "resume=auto", *args, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    log = (run_dir / "train.log").read_text()
    assert f"step {killed_at})" in log and log.count("initialised from") == 1
    ours, straight = load_checkpoint(last), load_checkpoint(fine_tuned / "checkpoints" / "last.pt")
    assert ours["progress"]["step"] == straight["progress"]["step"] == 50
    assert ours["model"].keys() == straight["model"].keys()
    for name, tensor in straight["model"].items():
        assert torch.equal(ours["model"][name], tensor), name
    for number, state in straight["optimizer"]["state"].items():
        for key, value in state.items():
            assert torch.equal(ours["optimizer"]["state"][number][key], value), (number, key)


@pytest.mark.slow
def test_eval_and_compare_read_the_fine_tuned_run(
    work: Path, fine_tuned: Path, cache: dict[str, str]
) -> None:
    """`attnseq eval RUN` (its own test split and a TSV split) and `attnseq compare HF_DIR
    RUN` take the fine-tuned run as any run (the run's data root is this machine's)."""
    env = {**cache, "ATTNSEQ_DATA": str(work / "data")}
    for args in (["--out", "results"], ["--split", "pairs.tsv", "--out", "results-tsv"]):
        result = attnseq_in_process("eval", str(fine_tuned), *args, cwd=work, env=env)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "bleu" in result.stdout + result.stderr
    compared = attnseq_in_process(
        "compare",
        "model",
        str(fine_tuned),
        "--split",
        "pairs.tsv",
        "--src",
        "src.de",
        cwd=work,
        env=env,
    )
    assert compared.returncode == 0, compared.stdout + compared.stderr
    assert "bleu" in compared.stdout.lower()


def test_the_fine_tuned_run_exports_to_a_folder_transformers_translates_with(
    work: Path, fine_tuned: Path
) -> None:
    """`attnseq export RUN/checkpoints/best.pt --to huggingface OUT` of the fine-tuned run:
    MarianMTModel's greedy `generate` (and the translation pipeline, where transformers has
    one) gives the outputs of `attnseq translate --beam 1`."""
    transformers = pytest.importorskip("transformers")
    out = work / "exported"
    checkpoint = fine_tuned / "checkpoints" / "best.pt"
    result = attnseq_in_process(
        "export", str(checkpoint), "--to", "huggingface", str(out), cwd=work
    )
    assert result.returncode == 0, result.stdout + result.stderr
    sources = (work / "src.de").read_text(encoding="utf-8").splitlines()
    translated = attnseq_in_process(
        "translate", str(checkpoint), "-i", "src.de", "--beam", "1", cwd=work
    )
    assert translated.returncode == 0, translated.stderr
    model = transformers.MarianMTModel.from_pretrained(out).eval()
    tokenizer = transformers.MarianTokenizer.from_pretrained(out)
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    with torch.no_grad():
        generated = model.generate(**batch, num_beams=1)
    expected = tokenizer.batch_decode(generated, skip_special_tokens=True)
    assert translated.stdout.splitlines() == expected
    from transformers.pipelines import SUPPORTED_TASKS

    if "translation" in SUPPORTED_TASKS:
        translator = transformers.pipeline("translation", model=str(out))
        assert [row["translation_text"] for row in translator(sources, num_beams=1)] == expected


def test_the_pretrained_weights_are_the_first_ones(work: Path) -> None:
    """The model a run builds and initialises gives the log-probabilities of the imported
    model itself."""
    import attnseq
    from attnseq.models.loading import model_for
    from attnseq.training.initialization import (
        initialized_config,
        read_pretrained,
        start_from_pretrained,
    )

    cfg = check_train_args(fine_tune_args(work, work / "unused"))
    pretrained = read_pretrained(str(work / "model"))
    model = model_for(initialized_config(cfg), pretrained.tokenizers)
    start_from_pretrained(model, pretrained, cfg)
    reference = attnseq.load(work / "model")
    assert model.state_dict().keys() == reference.module.state_dict().keys()
    for name, tensor in reference.module.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name


# ----------------------------------------------------------------- from an attnseq run
@pytest.mark.slow
def test_an_attnseq_run_fine_tuned_on_other_data(tmp_path: Path) -> None:
    """attnseq.train from a run directory: its sizes and tokenizers, the given dropout, data
    of another seed (which resume= would refuse), a fresh step count and optimizer."""
    import attnseq

    quick = [
        "data.train_size=200",
        "data.valid_size=10",
        "data.test_size=10",
        "model.emb_dim=16",
        "model.hidden=24",
        "trainer.max_steps=4",
        "trainer.validate_every=4",
        "trainer.num_heatmaps=0",
        "trainer.device=cpu",
        "trainer.threads=1",
    ]
    first = attnseq.train(quick, tmp_path / "first", verbose=False)
    tuned = [
        "seed=7",
        "model.dropout=0.3",
        "optim.lr=0.0001",
        "trainer.max_steps=3",
        "trainer.validate_every=3",
        "trainer.num_heatmaps=0",
        "trainer.device=cpu",
        "trainer.threads=1",
        f"model.init_from={first.run_dir}",
    ]
    second = attnseq.train(tuned, tmp_path / "second", verbose=False)
    before = load_checkpoint(first.checkpoint)
    after = load_checkpoint(second.run_dir / "checkpoints" / "last.pt")
    assert after["progress"]["step"] == 3 and after["tokenizers"] == before["tokenizers"]
    model = after["config"]["model"]
    assert (model["hidden"], model["emb_dim"], model["dropout"]) == (24, 16, 0.3)
    assert model["init_from"] == str(first.run_dir)
    assert after["config"]["seed"] == 7
    assert len(after["scheduler"]["per_update"]["base_lrs"]) >= 1
    assert max(after["scheduler"]["per_update"]["base_lrs"]) == pytest.approx(1e-4)


# ------------------------------------------------------------------------ refusals
@pytest.mark.slow
def test_keys_that_agree_with_the_pretrained_model_pass(work: Path) -> None:
    """The stand-in's 96 positions hold the generated dates (data.max_*_len) and a sweep of
    another key."""
    init = ["model=transformer", f"model.init_from={work / 'model'}"]
    init += ["data.max_src_len=40", "data.max_tgt_len=40"]
    cfg = check_train_args([*init, "model.d_model=32", "model.dropout=0.3"])
    assert (cfg.model.d_model, cfg.model.heads, cfg.model.dropout) == (32, 4, 0.3)
    assert cfg.model.norm.value == "post" and cfg.model.activation.value == "silu"
    sweep = check_train_args(["-m", *init, "optim.lr=0.0001,0.0003"])
    assert sweep.model.d_model == 32


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["model=transformer", "model.d_model=64"], "model.d_model=64 contradicts"),
        (["model=transformer", "model.heads=2"], "whose model.heads is 4"),
        ([], "is a transformer model, but the config asks for model.family=rnn"),
        (["model=rnn_luong"], "choose the model group of its family (model=transformer)"),
    ],
)
def test_contradicting_keys_and_families_are_refused(
    work: Path, overrides: list[str], expected: str
) -> None:
    with pytest.raises(UserError, match=None) as refusal:
        check_train_args([*overrides, f"model.init_from={work / 'model'}"])
    assert expected in str(refusal.value) and "\n" not in str(refusal.value)


@pytest.mark.slow
def test_refusals_at_the_command_line(work: Path, tmp_path: Path) -> None:
    """One line, exit 2, no run directory: a contradicting key, the packaged recipe without
    init_from, an init_from that names nothing."""
    init = f"model.init_from={work / 'model'}"
    code, output = train_in_process(tmp_path, "model=transformer", init, "model.ff_dim=128")
    assert_refused(tmp_path, code, output, "model.ff_dim=128 contradicts")
    code, output = train_in_process(tmp_path, "config=multi30k_finetune_marian")
    assert_refused(tmp_path, code, output, "model.init_from needs a value")
    code, output = train_in_process(tmp_path, "model.init_from=no/such/model")
    assert_refused(tmp_path, code, output, "model.init_from=no/such/model: no such file")


# --------------------------------------------- summarization from BART, the pointer-generator
SUMMARIES = 48  # training dialogues or e-mails of the local copy; 4 validation and test ones


@pytest.fixture(scope="module")
def summaries(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data root with the first examples of DialogSum and AESLC (the experiments' splits)."""
    from conftest import SHARED_DATA

    root = tmp_path_factory.mktemp("summaries")
    for corpus in ("dialogsum", "aeslc"):
        (root / corpus).mkdir()
        for split, count in (("train", SUMMARIES), ("valid", 4), ("test", 4)):
            lines = (SHARED_DATA / corpus / f"{split}.jsonl").read_text(encoding="utf-8")
            (root / corpus / f"{split}.jsonl").write_text(
                "\n".join(lines.splitlines()[:count]) + "\n", encoding="utf-8"
            )
    return root


# the stand-in's 64 positions bound the lengths; four updates, one validation
BART_FINE_TUNE = [
    "data.max_src_len=60",
    "data.max_tgt_len=30",
    "data.max_tokens=512",
    "trainer.max_steps=4",
    "trainer.validate_every=4",
    "trainer.num_heatmaps=0",
    "trainer.progress=false",
    "trainer.device=cpu",
    "trainer.threads=1",
    "decoding.max_output_extra=8",
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("experiment", "extra"),
    [
        ("dialogsum_finetune_bart", []),
        ("aeslc_finetune_bart", ["model.coverage=true", "optim.coverage_lambda=1.0"]),
    ],
    ids=["dialogsum", "aeslc-with-coverage"],
)
def test_a_summarizer_fine_tunes_from_bart(
    bart_folders: dict, summaries: Path, tmp_path: Path, experiment: str, extra: list[str]
) -> None:
    """The packaged BART recipes train from a BART stand-in: its tokenizers and model.*, <s>
    forced first; a transformer's coverage loss combines with it."""
    run_dir = tmp_path / "run"
    args = [
        f"config={experiment}",
        f"model.init_from={bart_folders['tied']}",
        f"data.root={summaries}",
        *BART_FINE_TUNE,
        *extra,
        f"hydra.run.dir={run_dir}",
    ]
    result = attnseq_in_process("train", *args, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    after = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    assert after["progress"]["step"] == 4 and after["tokenizers"]["tgt"]["kind"] == "bart"
    model, decoding = after["config"]["model"], after["config"]["decoding"]
    assert model["embed_norm"] and model["position_offset"] == 2 and model["d_model"] == 32
    assert model["coverage"] is bool(extra) and decoding["forced_first_token"] == 0
    assert model["init_from"] == str(bart_folders["tied"])


@pytest.mark.slow
@pytest.mark.parametrize("experiment", ["dialogsum_finetune_bart", "aeslc_finetune_bart"])
def test_the_bart_recipes_need_init_from(tmp_path: Path, experiment: str) -> None:
    code, output = train_in_process(tmp_path, f"config={experiment}")
    assert_refused(tmp_path, code, output, "model.init_from needs a value")


def test_the_copy_gate_does_not_start_from_a_pretrained_model(
    bart_folders: dict, tmp_path: Path
) -> None:
    """model.copy adds the copy gate, which BART lacks: one line, exit 2, no run."""
    init = f"model.init_from={bart_folders['tied']}"
    code, output = train_in_process(
        tmp_path, "config=dialogsum_finetune_bart", init, "model.copy=true"
    )
    assert_refused(tmp_path, code, output, "model.copy=true cannot start from model.init_from")
    assert "the copy gate" in output


def test_coverage_combines_with_a_transformer_not_an_rnn(
    work: Path, trained_rnn_checkpoint: Path
) -> None:
    """A pretrained transformer keeps its architecture and gains the coverage loss; an RNN
    without coverage would gain w_c in its scores: refused in one line."""
    init = [f"model.init_from={work / 'model'}", "data.max_src_len=40", "data.max_tgt_len=40"]
    cfg = check_train_args(["model=transformer", "model.coverage=true", *init])
    assert cfg.model.coverage and cfg.model.positions.value == "sinusoidal_split"
    with pytest.raises(UserError) as refusal:
        check_train_args(["model.coverage=true", f"model.init_from={trained_rnn_checkpoint}"])
    message = str(refusal.value)
    assert "model.coverage=true cannot start from" in message and "\n" not in message
