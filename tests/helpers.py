"""What several test files share: the tiny training overrides, the CLI in a subprocess or in
this process, tiny configs, models and checkpoints, and a toy word-aligned parallel set."""

import contextlib
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch
from filelock import FileLock
from torch import Tensor

from attnseq.config.checks import validate
from attnseq.config.conversion import config_from_dict, config_to_dict
from attnseq.config.schema import TrainConfig
from attnseq.data.tokenizers import TokenizerPair
from attnseq.io.checkpoint import load_checkpoint
from attnseq.models import Vocabularies, build_model
from attnseq.models.seq2seq import DecoderState, Seq2Seq, Seq2SeqOutput
from attnseq.models.transformer import TransformerSeq2Seq

# ------------------------------------------------------------------ the checkout's scripts
REPO = Path(__file__).resolve().parent.parent  # the checkout: benchmarks/, studies/, scripts/


def load_script(path: str) -> ModuleType:
    """The module of a script of the checkout (`benchmarks/benchmark.py`: in no package, so not
    importable by name), executed once under its file's stem without running its `main`. It is
    registered in sys.modules under that name: dataclasses look their module up there, and a
    neighbour's `from benchmark import compose` gets this same module."""
    file = REPO / path
    loaded = sys.modules.get(file.stem)
    if loaded is not None and getattr(loaded, "__file__", None) == str(file):
        return loaded
    spec = importlib.util.spec_from_file_location(file.stem, file)
    if spec is None or spec.loader is None or not file.is_file():
        raise FileNotFoundError(f"no script {file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[file.stem] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[file.stem]
        raise
    return module


def run_script(path: str, *arguments: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python PATH ARGUMENTS` for a script of the checkout (`benchmarks/benchmark.py`) in a
    fresh interpreter, its output captured as text."""
    command = [sys.executable, str(REPO / path), *arguments]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


# ------------------------------------------------------------------------------ the CLI
# Command-line overrides that make `attnseq train` (the default GRU + Bahdanau on dates) a
# seconds-long run on the CPU without validation heatmaps (drawing them takes most of such a
# run); a test adds its step budget and whatever it varies.
TINY = [
    "data.train_size=200",
    "data.valid_size=10",
    "data.test_size=10",
    "model.hidden=16",
    "model.emb_dim=8",
    "trainer.device=cpu",
    "trainer.threads=1",
    "trainer.num_heatmaps=0",
]

# A tiny transformer for the scripts that train one run per variant and tabulate them.
TINY_TRANSFORMER = [
    "data.valid_size=8",
    "data.test_size=8",
    "model.d_model=16",
    "model.heads=2",
    "model.ff_dim=32",
    "model.enc_layers=1",
    "model.dec_layers=1",
    "trainer.validate_every=2",
    "trainer.max_minutes=null",
    "trainer.log_every=1",
    "trainer.progress=false",
    "trainer.threads=1",
]

# Two updates of tiny summarizers for studies/compare_summarizers.py.
TINY_SUMMARIZER = [
    "trainer.max_steps=2",
    "trainer.validate_every=2",
    "model.emb_dim=16",
    "model.hidden=16",
    "model.attention.attn_dim=16",
    "decoding.beam=1",
    "decoding.max_output_extra=2",
    "trainer.threads=1",
]

# What a packaged experiment leaves to the command line (`${required:KEY}`), by experiment
EXPERIMENT_NEEDS = {
    "multi30k_finetune_marian": ["model.init_from=hf:Helsinki-NLP/opus-mt-de-en"],
    "dialogsum_finetune_bart": ["model.init_from=hf:facebook/bart-base"],
    "aeslc_finetune_bart": ["model.init_from=hf:facebook/bart-base"],
}


def experiment_overrides(name: str) -> list[str]:
    """experiment=NAME and the values the experiment leaves to the command line."""
    return [f"experiment={name}", *EXPERIMENT_NEEDS.get(name, [])]


GIB = 1024**3  # bytes in a GiB, for memory budgets


def attnseq(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """`attnseq ARGS` in a fresh interpreter (Hydra's global state stays out of the test
    process, as lightning-hydra-template's tests do); `env` replaces the environment."""
    return subprocess.run(
        [sys.executable, "-m", "attnseq", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def start(args: list[str], cwd: Path) -> subprocess.Popen:
    """`attnseq ARGS` started in a process of its own (to be killed or signalled)."""
    # stdout (Hydra's console log) is not read while the run goes on: a full pipe would block it
    return subprocess.Popen(
        [sys.executable, "-m", "attnseq", *args],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_step(process: subprocess.Popen, last: Path, step: int, timeout: float = 240) -> int:
    """Poll last.pt until it shows at least `step`; the process must still be running."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reached = checkpoint_step(last)
        if reached is not None and reached >= step:
            return reached
        if process.poll() is not None:
            _, err = process.communicate()
            pytest.fail(f"training ended (status {process.returncode}) before step {step}:\n{err}")
        time.sleep(0.02)
    process.kill()
    pytest.fail(f"no checkpoint of step {step} within {timeout} s")


def attnseq_in_process(
    *args: str, cwd: Path, env: dict[str, str] | None = None, input: str | None = None
) -> subprocess.CompletedProcess:
    """`attnseq ARGS` run from `cwd` by typer's CliRunner in this process: the exit status,
    stdout and stderr `attnseq` gives, without a fresh interpreter's seconds of imports (torch,
    Hydra). `env` adds to the environment for the call. An exception other than the command's
    own exit is a bug: it is raised here with its traceback. Each command keeps at least one
    test through `attnseq` (the console entry point) in a subprocess."""
    from typer.testing import CliRunner

    from attnseq.cli.app import app

    argv = sys.argv
    try:
        with contextlib.chdir(cwd):
            result = CliRunner().invoke(app, list(args), env=env, input=input)
    finally:
        sys.argv = argv  # `attnseq train` hands its arguments to Hydra through sys.argv
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(
        ["attnseq", *args], result.exit_code, result.stdout, result.stderr
    )


def invoke(*args: object):  # type: ignore[no-untyped-def]
    """`attnseq ARGS` (each one as str) by typer's CliRunner in this process: the click Result
    (exit_code, output, stdout, stderr, exception) for tests that read more than
    `attnseq_in_process` gives."""
    from typer.testing import CliRunner

    from attnseq.cli.app import app

    return CliRunner().invoke(app, [str(arg) for arg in args])


def built_once(
    tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]
) -> Path:
    """The folder `name`, filled by `build(folder)` once per test session, by whichever test
    worker (pytest-xdist) asks first; the others wait for it and use it. For module fixtures
    whose tests only read what was built: the workers share a module's tests when one steals
    from the other, and each would otherwise build it again."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # every worker's base folder is in the session's folder
    folder = base / f"built-once-{name}"
    with FileLock(f"{folder}.lock"):
        if not (folder / ".built").exists():
            shutil.rmtree(folder, ignore_errors=True)  # a build that failed part-way
            folder.mkdir()
            build(folder)
            (folder / ".built").touch()
    return folder


def train_in_process(tmp_path: Path, *overrides: str) -> tuple[int, str]:
    """`attnseq train OVERRIDES` through the CLI (in this process); exit code and output."""
    from typer.testing import CliRunner

    from attnseq.cli.app import app

    run_dir = tmp_path / "run"
    result = CliRunner().invoke(app, ["train", *overrides, f"hydra.run.dir={run_dir}"])
    return result.exit_code, result.output


def assert_refused(tmp_path: Path, code: int, output: str, expected: str) -> None:
    """The refusal of a config: exit 2, one `error:` line naming `expected`, no run directory."""
    assert code == 2, output
    assert "Traceback" not in output
    lines = output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), output
    assert expected in lines[0], output
    assert not (tmp_path / "run").exists()


def one_error_line(stderr: str, *words: str) -> str:
    """The one line of a refusal's stderr, after checking it is an `error:` holding every one of
    `words`, without a traceback."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert all(word in lines[0] for word in words), (words, lines[0])
    assert "Traceback" not in stderr
    return lines[0]


def one_line_exit_2(result, *words: str) -> None:  # type: ignore[no-untyped-def]
    """A command run by typer's CliRunner refused: exit 2 and `one_error_line`, no traceback."""
    assert result.exit_code == 2, result.output
    one_error_line(result.stderr, *words)
    assert "Traceback" not in result.output


# ---------------------------------------------------------------------------- configs


def check_train_args(args: list[str]) -> TrainConfig:
    """The checks `attnseq train ARGS` runs before Hydra makes a run directory (flags, then
    every sweep value composed and checked), with Hydra's compose API in place of the running
    Hydra; returns the first variant's config. Raises UserError as the command would exit 2."""
    from hydra import compose, initialize_config_dir

    from attnseq.cli.hydra_entry import split_flags
    from attnseq.cli.preflight import check_flags, check_sweep_values
    from attnseq.config import CONFIG_DIR
    from attnseq.config.composition import composition_error, composition_errors
    from attnseq.config.schema import register_configs

    flags, overrides = split_flags(args)
    check_flags(flags)
    register_configs()
    task = [arg for arg in overrides if not arg.lstrip("+~").startswith("hydra")]
    own = [arg for arg in overrides if arg.lstrip("+~").startswith("hydra")]

    def composed(variant: list[str]):
        try:
            return compose("train", overrides=[*own, *variant], return_hydra_config=True)
        except composition_errors() as error:
            raise composition_error(error, variant) from None

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return check_sweep_values(task, composed)


# The tiny sizes of each model family: a config sets only the keys its family reads (a key of
# the other family is refused when a run starts).
TINY_SIZES = {
    "rnn": ["model.emb_dim=16", "model.hidden=32"],
    "transformer": [
        "model.d_model=32",
        "model.heads=2",
        "model.enc_layers=1",
        "model.dec_layers=1",
        "model.ff_dim=64",
    ],
}


# Word-level reversal of up to 8 words, no dropout: learnt well enough in a few hundred CPU
# updates that greedy and beam search give sensible, different outputs.
TRAINED_REVERSE = (
    "data.name=reverse",
    "data.tokenizer=word",
    "data.max_len=8",
    "data.train_size=3000",
    "data.valid_size=20",
    "data.test_size=100",
    "model.dropout=0.0",
    "optim.lr=0.005",
    "trainer.max_epochs=1000",
    "trainer.early_stopping_patience=0",
)


def tiny_config(*overrides: str) -> TrainConfig:
    """A config that trains in seconds: small splits, small model (the sizes of the family
    `model.family=...` among `overrides` chooses), few steps, and no validation heatmaps
    (drawing them takes most of a tiny run's time, so the tests of heatmaps ask for them with
    `trainer.num_heatmaps`). Checked as a run that starts is checked."""
    base = config_to_dict(TrainConfig())
    families = [arg.split("=", 1)[1] for arg in overrides if arg.startswith("model.family=")]
    defaults = [
        "data.train_size=300",
        "data.valid_size=20",
        "data.test_size=20",
        *TINY_SIZES[families[-1] if families else "rnn"],
        "trainer.max_steps=6",
        "trainer.validate_every=3",
        "trainer.log_every=2",
        "trainer.progress=false",
        "trainer.num_heatmaps=0",
        "trainer.device=cpu",
    ]
    cfg = config_from_dict(base, defaults + list(overrides))
    validate(cfg)  # config_from_dict lets keys of the other family through, a run does not
    return cfg


def untrained_checkpoint(path, *overrides: str, pairs=None):
    """Save an untrained model of `tiny_config(*overrides)` as a checkpoint at `path` (config,
    tokenizers, weights: what eval, translate and visualize-alignment read). Tokenizers are
    trained on `pairs` when given, else on the config's training split. Returns the path."""
    from attnseq.data.prepare import prepare_data, train_tokenizers
    from attnseq.models.loading import model_for

    cfg = tiny_config(*overrides)
    torch.manual_seed(cfg.seed)
    if pairs is None:
        tokenizers = prepare_data(cfg.data, cfg.seed, splits=["train"]).tokenizers
    else:
        tokenizers = train_tokenizers(cfg.data, pairs)
    return save_model(path, cfg, tokenizers, model_for(cfg, tokenizers))


def save_model(
    path: Path, cfg: TrainConfig, tokenizers: TokenizerPair, model: torch.nn.Module
) -> Path:
    """Save `model` with its config and tokenizers as a checkpoint at `path` (what eval,
    translate and visualize-alignment read); the path."""
    from attnseq.io.checkpoint import save_checkpoint

    payload = {
        "config": config_to_dict(cfg),
        "tokenizers": tokenizers.state(),
        "model": model.state_dict(),
    }
    save_checkpoint(path, payload)
    return path


def adam_updates(
    module: Seq2Seq, examples: list[tuple[list[int], list[int]]], lr: float = 3e-3
) -> None:
    """Teacher-forced cross-entropy updates of `module` with Adam, one per 16 encoded
    (source ids, target ids) pairs of `examples`: a pretrained or fresh model moved off its
    weights, as a short fine-tuning moves it."""
    from attnseq.data.batching import collate

    optimizer = torch.optim.Adam(module.parameters(), lr=lr)
    module.train()
    for start in range(0, len(examples), 16):
        batch = collate(
            examples[start : start + 16],
            range(16),
            pad_id=module.pad_id,
            bos_id=module.bos_id,
            eos_id=module.eos_id,
        )
        logits = module(batch.src, batch.src_lengths, batch.tgt_in).logits
        loss = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=module.pad_id
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def assert_exported_unchanged(original: Path, export: Path, files: tuple[str, ...]) -> None:
    """The import of the exported folder `export` is the import of the Hugging Face folder
    `original`: the same tensors, tokenizers, model, decoding and data config, and the
    tokenizer `files` byte for byte."""
    from attnseq.models.pretrained import pretrained_payload

    before, after = pretrained_payload(original), pretrained_payload(export)
    assert before["model"].keys() == after["model"].keys()
    for name, tensor in before["model"].items():
        assert torch.equal(tensor, after["model"][name]), name
    assert before["tokenizers"] == after["tokenizers"]
    for key in ("model", "decoding", "data"):
        assert before["config"][key] == after["config"][key], key
    for name in files:
        assert (export / name).read_bytes() == (original / name).read_bytes(), name


def train_quietly(cfg: TrainConfig, run_dir: Path) -> dict:
    """`run_training(cfg, run_dir)` without its INFO records (a run's summary is no part of any
    test's output); its final metrics."""
    import logging

    from attnseq.training.run import run_training

    logging.disable(logging.INFO)
    try:
        return run_training(cfg, run_dir)
    finally:
        logging.disable(logging.NOTSET)


def compared_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two tiny runs of the default task (dates) on the same data, the systems the tests of
    `attnseq compare` and `attnseq.compare` compare: 6 updates, and 30 at a higher learning
    rate."""
    from attnseq.training.run import run_training

    folders = []
    for name, overrides in (("short", []), ("longer", ["trainer.max_steps=30", "optim.lr=0.01"])):
        run_dir = tmp_path_factory.mktemp(name)
        run_training(tiny_config(*overrides), run_dir)
        folders.append(run_dir)
    return folders[0], folders[1]


def decoding_threads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The thread counts the checkpoints of a comparison decode with, one a checkpoint, as the
    comparison loads them (attnseq/analysis/seed_comparison.py's load_system)."""
    import attnseq.analysis.seed_comparison as seed_comparison

    seen = []
    load_system = seed_comparison.load_system

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(torch.get_num_threads())
        return load_system(*args, **kwargs)

    monkeypatch.setattr(seed_comparison, "load_system", counting)
    return seen


def no_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test when a comparison loads a checkpoint: what is refused must be refused
    before any checkpoint decodes."""
    import attnseq.analysis.seed_comparison as seed_comparison

    def decoding(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("a checkpoint was decoded before the test sizes were checked")

    monkeypatch.setattr(seed_comparison, "load_system", decoding)


def with_fresh_weights(checkpoint: Path, path: Path, seed: int) -> Path:
    """A copy of `checkpoint` at `path` whose weights are those of a new model of its config,
    drawn after torch.manual_seed(seed): another member for an ensemble of one config."""
    from attnseq.io.checkpoint import save_checkpoint
    from attnseq.models.loading import load_trained_model, model_for

    payload = load_checkpoint(checkpoint)
    trained = load_trained_model(checkpoint)
    torch.manual_seed(seed)
    payload["model"] = model_for(trained.cfg, trained.tokenizers).state_dict()
    save_checkpoint(path, payload)
    return path


def checkpoint_step(path: Path) -> int | None:
    """The training step of the checkpoint at `path`, or None while there is none (writes are
    atomic: a reader never sees half a file, so any other failure is a real failure)."""

    if not path.is_file():
        return None
    return int(load_checkpoint(path)["progress"]["step"])


def eval_result(out):
    """The one result folder `attnseq eval --out OUT` wrote under OUT (the folder holding
    metrics.json: OUT/CHECKPOINT/SPLIT.DECODING/)."""
    folders = [path.parent for path in Path(out).rglob("metrics.json")]
    assert len(folders) == 1, folders
    return folders[0]


# --------------------------------------------------------------------- tiny models by hand
PAD, UNK, BOS, EOS = 0, 1, 2, 3
VOCAB = 14
FAMILIES = {
    "bahdanau": ("model.family=rnn", "model.decoder=bahdanau"),
    "luong": ("model.family=rnn", "model.decoder=luong", "model.attention.score=general"),
    "transformer": ("model.family=transformer",),
}


TINY_VOCAB = 12  # tiny_model's source and target vocabulary sizes


def tiny_model(
    family: str, seed: int = 0, *, vocab_size: int = TINY_VOCAB, **overrides: object
) -> Seq2Seq:
    """An untrained model of `tiny_config`'s sizes for `family` ("rnn" or "transformer"),
    without dropout, over vocabularies of `vocab_size` tokens with PAD, BOS and EOS, as
    build_model returns it (in training mode), its weights drawn after torch.manual_seed(seed).
    `overrides` are keys of the model config: `tiny_model("transformer", dec_layers=2)`, a
    nested one spelled with its dots: `**{"attention.score": "general"}`."""
    torch.manual_seed(seed)
    keys = [f"model.{key}={value}" for key, value in overrides.items()]
    cfg = tiny_config(f"model.family={family}", "model.dropout=0", *keys)
    return build_model(cfg.model, Vocabularies(vocab_size, vocab_size, PAD, BOS, EOS))


def make_model(family: str, seed: int = 0) -> Seq2Seq:
    """An untrained tiny model of one of FAMILIES (VOCAB tokens), in eval mode."""
    keys = dict(arg.removeprefix("model.").split("=", 1) for arg in FAMILIES[family])
    return tiny_model(keys.pop("family"), seed, vocab_size=VOCAB, **keys).eval()


def random_batch(batch: int, length: int = 7, seed: int = 1) -> tuple[Tensor, Tensor]:
    """(B, S) right-padded sources of lengths 1..S and their (B,) lengths."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, length + 1, (batch,), generator=generator)
    lengths[0] = length
    src = torch.randint(4, VOCAB, (batch, length), generator=generator)
    src[torch.arange(length).unsqueeze(0) >= lengths.unsqueeze(1)] = PAD
    return src, lengths


def lp_by_hand(length: int, alpha: float) -> float:
    """GNMT's length penalty ((5 + length) / 6) ** alpha (Wu et al. 2016, eq. 14), written out
    independently of the code under test."""
    return ((5 + length) / 6) ** alpha


class TableModel(Seq2Seq):
    """A stub with hand-set scores: logits of step t after token y are table[t, y].

    Args:
        table: (T, V, V) logits per step and previous token (the last step repeats beyond T).
    """

    def __init__(self, table: Tensor) -> None:
        super().__init__(PAD, BOS, EOS)
        self.table = table

    def forward(
        self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, need_weights: bool = False
    ) -> Seq2SeqOutput:
        steps = torch.arange(tgt_in.size(1)).clamp(max=self.table.size(0) - 1)  # (T,)
        return Seq2SeqOutput(self.table[steps.unsqueeze(0), tgt_in])  # (B, T, V)

    def start_decoding(self, src: Tensor, src_lengths: Tensor) -> DecoderState:
        return {"step": torch.zeros(src.size(0), dtype=torch.long)}

    def decode_step(
        self, prev_tokens: Tensor, state: DecoderState, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None, DecoderState]:
        step = state["step"].clamp(max=self.table.size(0) - 1)  # (B,)
        return self.table[step, prev_tokens], None, {"step": state["step"] + 1}


def table_model(rows: list[dict[int, float]], vocab: int = 6) -> TableModel:
    """Prefix-independent stub: step t gives log-probability rows[t][token] (others ~0)."""
    table = torch.full((len(rows), vocab, vocab), -30.0)
    for step, row in enumerate(rows):
        for token, log_prob in row.items():
            table[step, :, token] = log_prob
    return TableModel(table)


# A transformer of 10 learned positions: sources and targets of at most 9 pieces.
SHORT_POSITIONS = (
    "model.family=transformer",
    "model.positions=learned",
    "model.max_positions=10",
    "data.max_src_len=9",
    "data.max_tgt_len=9",
    "decoding.max_output_ratio=0",
    "decoding.max_output_extra=9",
)
DATE_PAIRS = [("4 May 2001", "2001-05-04"), ("June 5, 2001", "2001-06-05")]


# ------------------------------------------------------------ transformers by their options
def tiny_transformer(vocab: Vocabularies, seed: int = 0, **options: object) -> TransformerSeq2Seq:
    """A TransformerSeq2Seq built from its own options, not from a config (so with its own
    defaults, dropout 0.1 among them): d_model 32, 2 heads, 2 layers each side, ff_dim 64 unless
    `options` say otherwise, its weights drawn after torch.manual_seed(seed), in training mode."""
    torch.manual_seed(seed)
    sizes: dict = {"d_model": 32, "heads": 2, "enc_layers": 2, "dec_layers": 2, "ff_dim": 64}
    return TransformerSeq2Seq(vocab, **{**sizes, **options})


def reversal_batch(vocab: Vocabularies, length: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """8 random sources of `length` tokens (no special id) with their reversal as target: src
    (B, S), lengths (B,), tgt_in (B, T) = BOS + reversed source, tgt_out (B, T) = reversed
    source + EOS, where T = S + 1."""
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(3, vocab.tgt_size, (8, length), generator=generator)
    reversed_src = src.flip(1)
    tgt_in = torch.cat([torch.full((8, 1), vocab.bos_id), reversed_src], dim=1)  # (B, T)
    tgt_out = torch.cat([reversed_src, torch.full((8, 1), vocab.eos_id)], dim=1)  # (B, T)
    return src, torch.full((8,), length), tgt_in, tgt_out


def overfit_reversal(
    model: Seq2Seq, vocab: Vocabularies, length: int, steps: int
) -> tuple[float, Tensor]:
    """`model` trained by Adam (lr 3e-3) on reversal_batch(vocab, `length`) until
    its loss is under 0.01 or `steps` updates are done, then put in eval mode: the last loss and
    the greedy output (B, T) of incremental decoding (decode_step), to compare with tgt_out."""
    import torch.nn.functional as F

    src, lengths, tgt_in, tgt_out = reversal_batch(vocab, length)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(steps):
        logits = model(src, lengths, tgt_in).logits  # (B, T, V)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt_out.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if loss.item() < 0.01:
            break
    model.eval()
    state = model.start_decoding(src, lengths)
    tokens = torch.full((len(src),), vocab.bos_id)
    decoded = []
    for _ in range(tgt_out.size(1)):
        logits, _, state = model.decode_step(tokens, state)
        tokens = logits.argmax(-1)
        decoded.append(tokens)
    return loss.item(), torch.stack(decoded, dim=1)


# ---------------------------------------------------------------------------- gradients
def gradcheck_module(module: torch.nn.Module, query, keys, values, **kwargs) -> None:
    """gradcheck in float64 of an attention module's output with respect to the query, keys,
    values and every parameter of the module (local-p's W_p and v_p too); `kwargs` go to its
    forward (`mask=`)."""
    from torch.func import functional_call

    names = [name for name, _ in module.named_parameters()]
    params = [p.detach().clone().requires_grad_(True) for _, p in module.named_parameters()]

    def fn(q, k, v, *flat_params):
        return functional_call(
            module, dict(zip(names, flat_params, strict=False)), (q, k, v), kwargs
        )

    tensors = [t.detach().clone().requires_grad_(True) for t in (query, keys, values)]
    assert torch.autograd.gradcheck(fn, (*tensors, *params), eps=1e-6, atol=1e-6)


# ------------------------------------------------------------------------ a copy-only model
WORD_PAIRS = [("alpha beta gamma", "alpha beta"), ("beta gamma", "gamma")]
SOURCE_ONLY = "Zürich"  # in no training text: outside both vocabularies


def copy_only_checkpoint(path: Path, *overrides: str) -> Path:
    """A word-level copy model whose p_gen is fixed near 0 (it can only copy) and whose
    vocabulary distribution puts everything on EOS."""
    from attnseq.io.checkpoint import save_checkpoint

    untrained_checkpoint(
        path,
        "data.tokenizer=word",
        "model.copy=true",
        "model.dropout=0.0",
        *overrides,
        pairs=WORD_PAIRS,
    )
    payload = load_checkpoint(path)
    weights = payload["model"]
    for name in list(weights):
        if name.startswith("generation.linear."):
            weights[name] = torch.zeros_like(weights[name])
    weights["generation.linear.bias"] = torch.tensor([-2.0])  # p_gen = 0.12: copy or EOS
    output_bias = "output.bias" if "output.bias" in weights else None
    if output_bias is not None:
        bias = torch.full_like(weights[output_bias], -30.0)
        bias[3] = 30.0  # P_vocab(EOS) = 1
        weights[output_bias] = bias
        weights["output.weight"] = torch.zeros_like(weights["output.weight"])
        weights["embedding.weight"] = torch.zeros_like(weights["embedding.weight"])
    save_checkpoint(path, payload)
    return path


def local_tsv(root: Path, name: str, tokenizer: str = "word") -> list[str]:
    """The overrides of a local dataset `name`: root/train.tsv, valid.tsv and test.tsv, a
    source and a target a line, split by a tab."""
    return [
        f"data.name={name}",
        "data.source=local",
        "data.format=tsv",
        f"data.root={root}",
        "data.splits.train=train.tsv",
        "data.splits.valid=valid.tsv",
        "data.splits.test=test.tsv",
        f"data.tokenizer={tokenizer}",
    ]


def copy_coverage_run(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    write: Callable[[Path], None],
    *overrides: str,
) -> tuple[Path, dict, Path]:
    """A copy and coverage model of a summarization task trained (train_quietly) on the local
    TSV dataset `name` that `write(folder)` writes, with `overrides`: the run directory, its
    final metrics and the data folder."""
    data = tmp_path_factory.mktemp(name)
    write(data)
    run_dir = tmp_path_factory.mktemp(f"{name}_run")
    cfg = tiny_config(
        *local_tsv(data, name),
        "data.task=summarization",
        "model.copy=true",
        "model.coverage=true",
        "optim.coverage_lambda=0.5",
        "optim.lr=0.01",
        *overrides,
    )
    return run_dir, train_quietly(cfg, run_dir), data


# ------------------------------------------------------------- a toy word-aligned parallel set
# a toy parallel text with word tokens; every sentence pair gets a few sure/possible links
SRC = ["the small dog runs", "a cat sleeps here now", "dogs run", "the cat sees a small dog"]
TGT = ["le petit chien court", "un chat dort ici", "les chiens courent", "le chat voit un chien"]
PHARAOH = ["0-0 1-1 2-2 3-3", "0-0 1-1 2?2 3-3 4?3", "0-1 1-2 0?0", "0-0 1-1 2-2 3?3 5-4 4?4"]
WORDS = ("data.source=local", "data.name=toy", "data.format=parallel", "data.tokenizer=word")


def write_set(folder: Path) -> dict[str, Path]:
    """SRC, TGT and their gold links in `folder`: Pharaoh, NAACL (1-based) and reversed
    (target word, source word) gold files."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {"src": folder / "set.src", "tgt": folder / "set.tgt", "gold": folder / "gold.txt"}
    for key, lines in (("src", SRC), ("tgt", TGT), ("gold", PHARAOH)):
        files[key].write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    # the same links in NAACL format (1-based), and reversed (target word, source word)
    naacl, reversed_lines = [], []
    for number, line in enumerate(PHARAOH, start=1):
        reversed_links = []
        for link in line.split():
            i, j = link.replace("?", "-").split("-")
            sure = "-" in link
            naacl.append(f"{number} {int(i) + 1} {int(j) + 1} {'S' if sure else 'P'}")
            reversed_links.append(f"{j}{'-' if sure else '?'}{i}")
        reversed_lines.append(" ".join(reversed_links))
    files["naacl"] = folder / "gold.naacl"
    files["naacl"].write_text("\n".join(naacl) + "\n", encoding="utf-8")
    files["reversed"] = folder / "gold.reversed"
    files["reversed"].write_text("\n".join(reversed_lines) + "\n", encoding="utf-8")
    return files


def toy_transformer(path: Path, root: Path, src: str, tgt: str, pairs, seed: int) -> Path:
    """An untrained word-level transformer checkpoint for the toy set in `root`."""
    return untrained_checkpoint(
        path,
        "model.family=transformer",
        "model.dec_layers=2",
        "model.heads=2",
        *WORDS,
        f"data.root={root}",
        "data.splits.test=set",
        f"data.src_lang={src}",
        f"data.tgt_lang={tgt}",
        f"seed={seed}",
        pairs=pairs,
    )


def run_eval(checkpoint: Path, out: Path, *args: str):
    """`attnseq eval CHECKPOINT` in this process, reading the data files from the checkpoint's
    data.root (given on the command line: eval reads files there)."""

    root = load_checkpoint(checkpoint)["config"]["data"]["root"]
    return invoke("eval", checkpoint, f"data.root={root}", "--out", out, *args)


# ------------------------------------------------------------------ batch fingerprints
def batch_fingerprint(
    examples, *, max_tokens: int, max_sentences: int | None, seed: int, epochs: int = 3
) -> str:
    """sha256 of the batches training and validation see: every epoch's shuffled training
    batches (as the trainer samples them, for `epochs` epochs) and the unshuffled batches, each
    batch's dataset positions and padded tensors in order. Equal fingerprints: the same
    examples, grouped the same way, in the same order, with the same ids."""
    import hashlib

    from attnseq.data.batching import TokenBatchSampler, example_lengths
    from attnseq.data.loader import BatchLoader

    loader = BatchLoader(examples, pad_id=PAD, bos_id=BOS, eos_id=EOS, device=torch.device("cpu"))
    digest = hashlib.sha256()
    lengths = example_lengths(examples)
    for shuffle in (True, False):
        sampler = TokenBatchSampler(
            lengths, max_tokens, max_sentences=max_sentences, shuffle=shuffle, seed=seed
        )
        for epoch in range(epochs if shuffle else 1):
            for batch, _ in loader(sampler.batches(epoch), epoch):
                for tensor in (batch.indices, batch.src, batch.tgt_in, batch.tgt_out):
                    digest.update(repr(tuple(tensor.shape)).encode())
                    digest.update(tensor.numpy().tobytes())
    return digest.hexdigest()


def sweep_job(
    source: Path, folder: Path, seed: int, finished: bool = True, lr: float | None = None
) -> Path:
    """A run directory of a sweep job: the checkpoint `source` with its config's seed (and
    learning rate, when given) changed, .hydra/overrides.yaml, and metrics.json when
    `finished`."""
    import yaml

    from attnseq.io.checkpoint import save_checkpoint

    payload = load_checkpoint(source)
    payload["config"]["seed"] = seed
    overrides = [f"seed={seed}"]
    if lr is not None:
        payload["config"]["optim"]["lr"] = lr
        overrides.append(f"optim.lr={lr}")
    kept = {key: value for key, value in payload.items() if key not in ("format", "version")}
    save_checkpoint(folder / "checkpoints" / "best.pt", kept)
    (folder / ".hydra").mkdir()
    (folder / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    if finished:
        (folder / "metrics.json").write_text(f'{{"test/bleu": {1.0 + seed}}}\n')
    return folder
