"""The composition root: train / eval as functions of a config.

This module (with cli.py) is the only place that knows about Hydra; it turns a composed config
into the dataclasses of config/schema.py and wires data, tokenizers, model, optimizer, trainer,
evaluator and logging together.
"""

import dataclasses
import logging
import os
import random
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch

from attnseq.analysis.gold_sets import GoldAlignmentFiles, load_alignment_set
from attnseq.analysis.saved_attention import records_from_hypotheses
from attnseq.analysis.saved_attention import save_attention as write_saved_attention
from attnseq.config.checks import validate
from attnseq.config.schema import (
    DataSource,
    TrainConfig,
    config_to_dict,
)
from attnseq.data.checkpoint_paths import check_checkpoint_data, overridden_keys
from attnseq.data.extended_vocab import ExtendedExample, extend_examples
from attnseq.data.generated import gold_alignments
from attnseq.data.prepare import PreparedData, TokenizerPair, prepare_data
from attnseq.data.sources import load_pairs_from_path
from attnseq.errors import OutputError, UserError
from attnseq.evaluation import results as eval_results
from attnseq.evaluation.evaluator import AlignmentGold, DecodingSettings, Evaluator, Hypothesis
from attnseq.evaluation.results import EvalMetrics
from attnseq.io.atomic import atomic_write_json, atomic_write_lines
from attnseq.io.checkpoint import load_checkpoint
from attnseq.models.loading import load_trained_model, model_for
from attnseq.models.seq2seq import Seq2Seq
from attnseq.training.distributed import (
    WorldInfo,
    broadcast_object,
    distributed_session,
    env_world,
    is_main_process,
)
from attnseq.training.optim import TrainingBudget, build_optimizer, build_scheduler
from attnseq.training.resume import (
    ResumePoint,
    carry_best_checkpoint,
    find_resume_point,
    interruption_message,
)
from attnseq.training.run_board import run_hparams, validation_logger
from attnseq.training.run_lock import run_directory_lock
from attnseq.training.trainer import (
    NullWriter,
    Progress,
    StopSignals,
    Trainer,
    TrainingDiverged,
    TrainingInterrupted,
    resolve_device,
)

log = logging.getLogger("attnseq")

T = TypeVar("T")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def extended_split(
    cfg: TrainConfig, data: PreparedData, split: str
) -> list[ExtendedExample] | None:
    """A copy model's extended-vocabulary view of a split's examples (None without copy)."""
    if not cfg.model.copy:
        return None
    tokenizers = data.tokenizers
    return extend_examples(data.pairs[split], data.examples[split], tokenizers.src, tokenizers.tgt)


def split_gold(cfg: TrainConfig, split: str, tokenizers: TokenizerPair) -> AlignmentGold | None:
    """Gold word alignments of a generated split, when the task has them."""
    if cfg.data.source is not DataSource.generated:
        return None
    sizes = {"train": cfg.data.train_size, "valid": cfg.data.valid_size, "test": cfg.data.test_size}
    gold = gold_alignments(
        cfg.data.name,
        sizes,
        cfg.seed,
        min_len=cfg.data.min_len,
        max_len=cfg.data.max_len,
        vocab_size=cfg.data.vocab_size,
    )
    if gold is None or split not in gold:
        return None
    links = gold[split]
    return AlignmentGold(
        sure=links,
        possible=links,
        src_tokenizer=tokenizers.src,
        src_kind=type(tokenizers.src).kind,
        tgt_kind=type(tokenizers.tgt).kind,
    )


def make_evaluator(
    cfg: TrainConfig,
    data: PreparedData,
    split: str,
    device: torch.device,
    gold: AlignmentGold | None = None,
) -> Evaluator:
    return Evaluator(
        data.examples[split],
        [tgt for _, tgt in data.pairs[split]],
        data.tokenizers.tgt,
        device,
        max_tokens=cfg.data.eval_max_tokens,
        decoding=DecodingSettings.from_trainer(cfg.trainer),
        task=cfg.data.task.value,
        gold=gold,
        extended=extended_split(cfg, data, split),
        label=split,
    )


# ------------------------------------------------------------------------------------ train
def run_training(cfg: TrainConfig, run_dir: Path) -> dict[str, float]:
    """Train (or resume: `cfg.resume`), keep the best checkpoint, evaluate it on the test
    split, write metrics.json.

    Under torchrun (WORLD_SIZE > 1) every process calls this: it joins the process group
    (distributed.py) and trains data-parallel. Rank 0 checks the resume checkpoint, prepares the
    data (tokenizers included), validates, evaluates and alone writes to `run_dir`; the other
    ranks load the checkpoint rank 0 chose, encode their training data with rank 0's
    tokenizers, never touch `run_dir` and return rank 0's metrics.

    Raises:
        UserError: a problem with the config, the data or the resume checkpoint, or another
            training holds `run_dir` (run_lock.py; rank 0 holds the lock for the whole run).
        TrainingInterrupted: SIGINT/SIGTERM; last.pt holds the last finished step.
        TrainingDiverged: too many non-finite losses in a row; checkpoints were kept.
    """
    validate(cfg)
    # One trainer per run directory (run_lock.py), taken before anything is read or written.
    with run_directory_lock(run_dir, enabled=env_world().is_main):
        device = resolve_device(cfg.trainer.device.value)
        with StopSignals() as stop, distributed_session(device.type) as world:
            if world.distributed and device.type == "cuda":
                device = torch.device("cuda", world.local_rank)
            return _run_training(cfg, run_dir, stop, device, world)


def _decided_on_main(world: WorldInfo, decide: Callable[[], T]) -> T:
    """`decide()` on rank 0 and its result on every rank; a UserError there is raised on every
    rank (so each exits with status 2 instead of waiting for rank 0 forever)."""
    if not world.distributed:
        return decide()
    result: Any = None
    error: str | None = None
    if world.is_main:
        try:
            result = decide()
        except UserError as problem:
            error = str(problem)
    result, error = broadcast_object((result, error))
    if error is not None:
        raise UserError(error)
    return result


def _run_training(
    cfg: TrainConfig, run_dir: Path, stop: StopSignals, device: torch.device, world: WorldInfo
) -> dict[str, float]:
    from torch.utils.tensorboard import SummaryWriter

    main = world.is_main
    if not main:
        log.setLevel(logging.WARNING)  # rank 0 reports; the others only their own problems

    # Before any slow work, so a bad file fails fast. Rank 0 checks it; the rest load it.
    checked: list[ResumePoint | None] = [None]

    def locate() -> str | None:
        checked[0] = find_resume_point(cfg, run_dir)
        return os.path.abspath(checked[0].path) if checked[0] is not None else None

    resume_path = _decided_on_main(world, locate)
    point = checked[0]
    if resume_path is not None and point is None:
        point = ResumePoint(Path(resume_path), load_checkpoint(Path(resume_path)))
    seed_everything(cfg.seed)
    if cfg.trainer.threads:
        torch.set_num_threads(cfg.trainer.threads)
    # A resumed run encodes its data with the checkpoint's tokenizers: the same ids, the same
    # embedding rows (a retrained sentencepiece model need not be identical).
    saved_tokenizers = TokenizerPair.from_state(point.payload["tokenizers"]) if point else None
    prepared: list[PreparedData | None] = [None]

    def prepare() -> dict[str, Any]:
        prepared[0] = prepare_data(cfg.data, cfg.seed, tokenizers=saved_tokenizers)
        return prepared[0].tokenizers.state()

    # Rank 0 prepares (and trains the tokenizers) first; the others encode their training
    # split with exactly its tokenizers, so every rank has the same vocabulary.
    tokenizer_state = _decided_on_main(world, prepare)
    data = prepared[0]
    if data is None:
        data = prepare_data(
            cfg.data,
            cfg.seed,
            tokenizers=TokenizerPair.from_state(tokenizer_state),
            splits=["train"],
        )
    tokenizers = data.tokenizers
    model = model_for(cfg, tokenizers).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    if main:
        log.info(
            "model: %s, %s parameters; data: %s (%s); device: %s%s",
            type(model).__name__,
            f"{n_params:,}",
            cfg.data.name,
            ", ".join(f"{name} {len(pairs)}" for name, pairs in data.examples.items()),
            device,
            f" x {world.world_size} processes" if world.distributed else "",
        )
    optimizer = build_optimizer(model, cfg.optim)
    minutes = cfg.trainer.max_minutes
    budget = TrainingBudget(
        cfg.trainer.max_steps, cfg.trainer.max_epochs, 60 * minutes if minutes else None
    )
    scheduler = build_scheduler(optimizer, cfg.optim, budget)
    # Resuming: TensorBoard hides events after the checkpoint's step that the killed process
    # logged, so the curves continue without a doubled stretch.
    writer: Any = (
        SummaryWriter(str(run_dir / "tb"), purge_step=point.step + 1 if point else None)
        if main
        else NullWriter()
    )
    valid = make_evaluator(cfg, data, "valid", device) if main else None
    # The stored config never carries `resume`: eval/translate of this checkpoint, or a
    # later resume from it, must not depend on where this run came from.
    static = {
        "config": config_to_dict(dataclasses.replace(cfg, resume=None)),
        "tokenizers": tokenizers.state(),
    }
    trainer = Trainer(
        model,
        optimizer,
        scheduler,
        cfg,
        data.examples["train"],
        valid,
        run_dir,
        writer,
        device,
        static,
        on_validation=(
            validation_logger(writer, valid, tokenizers, cfg, [s for s, _ in data.pairs["valid"]])
            if valid is not None
            else None
        ),
        stop=stop,
        budget=budget,
        extended_examples=extended_split(cfg, data, "train"),
    )
    if point is not None:
        trainer.restore(point.payload)
        if main:
            carry_best_checkpoint(point, run_dir)
    try:
        progress = trainer.fit()
        # Rank 0 evaluates and writes; the others wait for its numbers.
        results = _decided_on_main(
            world, lambda: _test_best(cfg, data, model, device, run_dir, writer, progress)
        )
    except TrainingInterrupted as interruption:
        if interruption.step is None:
            interruption.step = trainer.last_saved_step
        raise
    finally:
        writer.close()
    if main:
        _print_summary(run_dir, results)
    return results


def _test_best(
    cfg: TrainConfig,
    data: PreparedData,
    model: Seq2Seq,
    device: torch.device,
    run_dir: Path,
    writer: Any,
    progress: Progress,
) -> dict[str, float]:
    """Evaluate best.pt on the test split; write hyps/test.txt, metrics.json, hparams."""
    best_path = run_dir / "checkpoints" / "best.pt"
    if not best_path.is_file():  # resumed from a lone checkpoint without its best.pt
        log.warning("no best.pt in %s: evaluating last.pt", best_path.parent)
        best_path = best_path.with_name("last.pt")
    best = load_checkpoint(best_path)
    model.load_state_dict(best["model"])
    tokenizers = data.tokenizers
    test = make_evaluator(cfg, data, "test", device, split_gold(cfg, "test", tokenizers))
    metrics, hypotheses = test.evaluate(model)
    log.info("test: decoded %s", test.decode_rate.summary())
    results = {f"test/{name}": value for name, value in metrics.items()}
    results["best_step"] = progress.best_step
    results[f"valid/best_{cfg.trainer.early_stopping_metric.value}"] = progress.best_metric
    results["skipped_steps"] = progress.skipped_steps
    atomic_write_lines(run_dir / "hyps" / "test.txt", hypotheses)
    atomic_write_json(run_dir / "metrics.json", results)
    # At the last training step, so the test numbers sit at the end of the valid/* curves.
    n_params = sum(p.numel() for p in model.parameters())
    writer.add_hparams(
        run_hparams(cfg, n_params),
        {k: v for k, v in results.items() if "/" in k},
        run_name=".",
        global_step=progress.step,
    )
    return results


def _print_summary(run_dir: Path, metrics: dict[str, float]) -> None:
    lines = [
        f"{key:>24} {value:.4f}"
        for key, value in sorted(metrics.items())
        if isinstance(value, float)
    ]
    if any(key.endswith("/bleu") for key in metrics):
        from attnseq.evaluation.metrics import bleu_signature

        lines.append(f"{'BLEU signature':>24} {bleu_signature()}")
    print("\n".join(["test metrics of the best checkpoint:", *lines]))
    print(f"run directory: {run_dir}")
    print(f"  checkpoints: {run_dir / 'checkpoints'}  (best.pt, last.pt)")
    print(f"  metrics:     {run_dir / 'metrics.json'}")
    print(f"  hypotheses:  {run_dir / 'hyps' / 'test.txt'}")
    print(f"  tensorboard: tensorboard --logdir {run_dir / 'tb'}")


def train_from_hydra(composed: Any) -> float | None:
    """Body of the `hydra.main` task function: DictConfig -> TrainConfig -> run_training.

    Exit statuses (Hydra would otherwise turn every exception into status 1 with a traceback):
    2 for a user error (one message), 130/143 for SIGINT/SIGTERM (with the command that
    resumes the run), 1 for a diverged run (the message says what was kept).
    """
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_object(composed)
    assert isinstance(cfg, TrainConfig)
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    # Under torchrun every rank gets here and exits with the same status; rank 0 speaks.
    main = is_main_process()
    try:
        metrics = run_training(cfg, run_dir)
    except OutputError as error:  # a full disk or read-only folder: nothing written is lost
        if main:
            command = _torchrun_prefix() + resume_command(run_dir)
            print(f"error: {error}; fix that, then continue with: {command}", file=sys.stderr)
        sys.exit(2)
    except UserError as error:
        if main:
            print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    except TrainingInterrupted as interruption:
        if main:
            command = _torchrun_prefix() + resume_command(run_dir)
            print(interruption_message(interruption, run_dir, command), file=sys.stderr)
        sys.exit(interruption.exit_status)
    except TrainingDiverged as error:
        if main:
            print(f"error: {error}", file=sys.stderr)
        sys.exit(1)
    key = cfg.optimized_metric or f"test/{cfg.trainer.early_stopping_metric.value}"
    if key not in metrics:
        if main:
            print(
                f"error: optimized_metric={key!r} is not in metrics.json: {', '.join(metrics)}",
                file=sys.stderr,
            )
        sys.exit(2)
    return metrics[key]


def _torchrun_prefix() -> str:
    """What goes before `attnseq train ...` to resume a run torchrun started ("" otherwise)."""
    if not env_world().distributed:
        return ""
    per_node = os.environ.get("LOCAL_WORLD_SIZE", "N")
    nodes = int(os.environ.get("GROUP_WORLD_SIZE", "1"))
    if nodes <= 1:
        return f"torchrun --nproc_per_node={per_node} -m "
    return (
        f"torchrun --nnodes={nodes} --nproc_per_node={per_node} "
        "--rdzv_backend=c10d --rdzv_endpoint=HOST:PORT -m "  # on every node
    )


def resume_command(run_dir: Path) -> str:
    """`attnseq train resume=auto hydra.run.dir=RUN_DIR OVERRIDES`: the command that continues
    this Hydra job (in a sweep: this one job), quoted for a POSIX shell."""
    from hydra.core.hydra_config import HydraConfig

    hydra_cfg = HydraConfig.get()
    searchpath = [o for o in hydra_cfg.overrides.hydra if o.startswith("hydra.searchpath=")]
    task = []
    for override in hydra_cfg.overrides.task:
        if override.lstrip("+").startswith("resume="):
            continue
        if override.startswith("experiment=") and not searchpath:
            override = "config=" + override.split("=", 1)[1]  # the CLI's name for it
        task.append(override)
    args = ["resume=auto", f"hydra.run.dir={run_dir}", *searchpath, *task]
    return "attnseq train " + " ".join(shlex.quote(arg) for arg in args)


# ------------------------------------------------------------------------------------- eval
def evaluate_checkpoint(
    path: Path,
    split: str = "test",
    max_tokens: int | None = None,
    out_dir: Path | None = None,
    overrides: list[str] | None = None,
    device_name: str = "auto",
    save_attention: bool = False,
    alignments: GoldAlignmentFiles | None = None,
) -> EvalMetrics:
    """Metrics of a checkpoint on one split, from the checkpoint alone (plus its data).

    The result goes to a folder of its own under `out_dir` (default RUN/eval), named after
    the checkpoint, its step, the split and every decoding setting (attnseq/evaluation/results.py);
    the returned metrics name it (`.result.folder`).
    `split` is a split name of the checkpoint's dataset (test, valid) or a path: a parallel
    file prefix (PATH.SRC_LANG + PATH.TGT_LANG), a .jsonl or a .tsv file. The data locations
    the checkpoint's config names (data.root, data.splits, source=hub) must stay under this
    machine's data root unless `overrides` set them (attnseq/data/checkpoint_paths.py).
    `save_attention`: also write the cross-attention of every output hypothesis to
    attention.npz in that folder (format: attnseq/analysis/saved_attention.py).
    `alignments`: also score the attention against a gold word-alignment set, as
    ``align/aer``, ``align/precision``, ``align/recall`` and per layer/head
    (``align/aer/layer2/head3``, ``align/aer/layer2/mean``).
    """
    overrides = list(overrides or [])
    trained = load_trained_model(path, overrides)
    payload, cfg, tokenizers = trained.payload, trained.cfg, trained.tokenizers
    # The checkpoint's data paths stay under the data root unless the user overrides them.
    dataset_split = split in ("train", "valid", "test") or split in cfg.data.splits
    check_checkpoint_data(cfg.data, overridden_keys(overrides), reads_dataset=dataset_split)
    if max_tokens:
        cfg.data.eval_max_tokens = max_tokens
    device = resolve_device(cfg.trainer.device.value if device_name == "auto" else device_name)
    model = trained.model.to(device)
    no_attention = cfg.model.family.value == "rnn" and cfg.model.attention.score.value == "none"
    if no_attention and (save_attention or alignments is not None):
        option = "--save-attention" if save_attention else "--alignments"
        raise UserError(f"{option}: this model has no attention (model.attention.score=none)")
    alignment_set = None
    if alignments is not None:  # read and check the gold set before the slow work
        alignment_set = load_alignment_set(
            alignments, tokenizers.src, tokenizers.tgt, _max_positions(model)
        )
    if split in ("train", "valid", "test") or split in cfg.data.splits:
        name, pairs = split, None
    else:
        name = Path(split).name.replace(".", "_") or "file"
        pairs = {name: load_pairs_from_path(split, cfg.data)}
    data = prepare_data(cfg.data, cfg.seed, tokenizers=tokenizers, splits=[name], pairs=pairs)
    if name not in data.examples:
        raise UserError(f"unknown split {split!r}; this dataset has: {', '.join(data.examples)}")
    gold = split_gold(cfg, name, tokenizers) if pairs is None else None
    evaluator = make_evaluator(cfg, data, name, device, gold)
    metrics, decoded = evaluator.evaluate_hypotheses(model, need_weights=save_attention)
    print(f"{name}: decoded {evaluator.decode_rate.summary()}", file=sys.stderr)
    hypotheses = evaluator.texts(decoded)
    results = {f"{name}/{key}": value for key, value in metrics.items()}
    if alignment_set is not None:
        scores = alignment_set.score(model, device)
        results.update({f"align/{key}": value for key, value in scores.items()})
    folder = eval_results.result_folder(
        out_dir or eval_results.default_root(path),
        path,
        eval_results.checkpoint_step(payload),
        name,
        evaluator.decoding,
        overrides,
        [f"align-{alignments.gold.name}"] if alignments is not None else [],
    )
    if save_attention:
        _save_eval_attention(folder / "attention.npz", cfg, model, evaluator, decoded, data, name)
    about = eval_results.describe(
        path, payload, name, len(hypotheses), evaluator.decoding, overrides, alignments
    )
    result = eval_results.write_result(folder, results, hypotheses, evaluator.references, about)
    return EvalMetrics(results, result)


def _save_eval_attention(
    path: Path,
    cfg: TrainConfig,
    model: Seq2Seq,
    evaluator: Evaluator,
    decoded: list[Hypothesis],
    data: PreparedData,
    split: str,
) -> None:
    """`attnseq eval --save-attention`: the cross-attention of every hypothesis, to `path`."""
    tokenizers = data.tokenizers
    saved = write_saved_attention(
        path,
        records_from_hypotheses(
            decoded,
            evaluator.examples,
            data.pairs[split],
            tokenizers.src,
            tokenizers.tgt,
            model.eos_id,
            extended=evaluator.extended,
        ),
        split=split,
        family=cfg.model.family.value,
        beam=evaluator.decoding.beam,
        length_penalty=evaluator.decoding.length_penalty,
        src_kind=type(tokenizers.src).kind,
        tgt_kind=type(tokenizers.tgt).kind,
    )
    print(f"cross-attention of {len(decoded)} hypotheses: {saved}")


def _max_positions(model: Seq2Seq) -> int | None:
    """The longest sequence a model with learned positions takes (None: no limit)."""
    from attnseq.models.positional import LearnedPositionalEncoding

    limits = [m.max_positions for m in model.modules() if isinstance(m, LearnedPositionalEncoding)]
    return min(limits, default=None)
