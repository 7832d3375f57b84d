"""The composition root of a training run: build the pieces from a checked config, fit, test
best.pt (docs/internals/training.md)."""

import dataclasses
import logging
import random
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import torch

from attnseq.alignment.diagnostics import is_per_layer_key
from attnseq.config.choices import ModelFamily, Tracker
from attnseq.config.conversion import config_to_dict
from attnseq.config.devices import resolve_device
from attnseq.config.schema import TrainConfig
from attnseq.config.threads import use_threads
from attnseq.data.batching import PieceLinks
from attnseq.data.multilingual_tokenizer import use_language_codes
from attnseq.data.prepare import PreparedData, load_prepared, prepare_data
from attnseq.data.tokenizers import TokenizerPair
from attnseq.evaluation.evaluator import extended_split, make_evaluator, split_gold
from attnseq.io.atomic import atomic_write_json, atomic_write_lines
from attnseq.io.checkpoint import load_checkpoint
from attnseq.models.loading import load_weights, model_for
from attnseq.models.seq2seq import Seq2Seq
from attnseq.training.callbacks import Callbacks
from attnseq.training.distributed import (
    WorldInfo,
    decided_on_main,
    distributed_session,
    env_world,
)
from attnseq.training.initialization import (
    PretrainedModel,
    read_pretrained,
    start_from_pretrained,
)
from attnseq.training.optim import LearningRateSchedule, TrainingBudget, build_optimizer
from attnseq.training.precision import (
    attention_kernels,
    check_precision_supported,
    peak_gpu_memory,
    use_tf32,
)
from attnseq.training.resume import ResumePoint, carry_best_checkpoint, find_resume_point
from attnseq.training.run_checks import check_config_once
from attnseq.training.run_directory import clear_previous_run, run_directory_lock
from attnseq.training.state import TrainingState
from attnseq.training.stopping import StopSignals, TrainingInterrupted
from attnseq.training.trackers import mlflow_tracking_uri, open_trackers
from attnseq.training.train_log import (
    NullWriter,
    hparams_metrics,
    log_run_header,
    run_hparams,
    validation_logger,
)
from attnseq.training.trainer import Trainer

log = logging.getLogger("attnseq")


def run_training(
    cfg: TrainConfig,
    run_dir: Path,
    *,
    callbacks: Sequence[Any] = (),
    progress: bool | None = None,
    summary: bool = True,
) -> dict[str, float]:
    """Train (or resume: `cfg.resume`), keep the best checkpoint, evaluate it on the test
    split, write metrics.json. With `cfg.trainer.overwrite`, the outputs of a run already in
    `run_dir` are deleted once the data and the model are built (run_directory.py).

    `callbacks` (callbacks.py) hear of the updates, validations and the end on rank 0, and
    may end the run early; `progress` is the training bar (None: as `trainer.progress` says,
    on a terminal only; True: wherever stderr goes; False: none); `summary` prints the test
    metrics and the run's files at the end.

    Under torchrun (WORLD_SIZE > 1) every process calls this: it joins the process group
    (distributed.py) and trains data-parallel. Rank 0 checks the resume checkpoint, prepares the
    data (tokenizers included), validates, evaluates and alone writes to `run_dir`; the other
    ranks load the checkpoint rank 0 chose, encode their training data with rank 0's
    tokenizers, never touch `run_dir` and return rank 0's metrics.

    Raises:
        UserError: a problem with the config, the data or the resume checkpoint, or another
            training holds `run_dir` (run_directory.py; rank 0 holds the lock for the whole run).
        TrainingInterrupted: SIGINT/SIGTERM; last.pt holds the last finished step.
        TrainingDiverged: too many non-finite losses in a row; checkpoints were kept.
    """
    check_config_once(cfg, run_dir)  # unless the run's start checks passed it (run_checks.py)
    # One trainer per run directory (run_directory.py), taken before anything is read or written.
    with run_directory_lock(run_dir, enabled=env_world().is_main):
        device = resolve_device(cfg.trainer.device, "trainer.device")
        check_precision_supported(cfg, device)
        with StopSignals() as stop, distributed_session(device.type) as world:
            if world.distributed and device.type == "cuda":
                device = torch.device("cuda", world.local_rank)
            heard = Callbacks(callbacks)
            return build_fit_test(cfg, run_dir, stop, device, world, heard, progress, summary)


def build_fit_test(
    cfg: TrainConfig,
    run_dir: Path,
    stop: StopSignals,
    device: torch.device,
    world: WorldInfo,
    callbacks: Callbacks | None = None,
    progress: bool | None = None,
    summary: bool = True,
) -> dict[str, float]:
    """Build the pieces, fit, test best.pt; rank 0's test metrics on every rank."""
    callbacks = callbacks if callbacks is not None else Callbacks()
    if not world.is_main:
        log.setLevel(logging.WARNING)  # rank 0 reports; the others only their own problems
    else:
        log_run_header(cfg)
    point = _resume_point(cfg, run_dir, world)  # before any slow work: a bad file fails fast
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    use_threads(cfg.trainer.threads)
    use_tf32(cfg.trainer.tf32, device)
    # a new run from pretrained weights reads them once; a resumed one has its own
    pretrained = read_pretrained(cfg.model.init_from) if cfg.model.init_from and not point else None
    data = _prepare_data(cfg, world, point, pretrained)
    model = model_for(cfg, data.tokenizers)
    if pretrained is not None:
        start_from_pretrained(model, pretrained, cfg)
        del pretrained  # the model holds the weights now
    model = model.to(device)
    _describe(cfg, data, model, device, world)
    optimizer = build_optimizer(model, cfg.optim)
    metric = cfg.trainer.early_stopping_metric
    budget = TrainingBudget.for_run(cfg.trainer)
    schedule = LearningRateSchedule(optimizer, cfg.optim, budget, metric.higher_is_better)
    if cfg.trainer.overwrite and world.is_main:
        clear_previous_run(run_dir)  # data and model are ready: the new run really starts
    writer = _writer(cfg, run_dir, point, world)
    trainer = _trainer(cfg, data, model, optimizer, schedule, writer, device, run_dir, stop, world)
    trainer.listen(callbacks, progress)
    if point is not None:
        trainer.restore(point.payload)
        if world.is_main:
            carry_best_checkpoint(point, run_dir)
    succeeded = False
    try:
        state = trainer.fit()
        # Rank 0 evaluates and writes; the others wait for its numbers.
        training = trainer.training_metrics or _earlier_training_metrics(run_dir)
        test = partial(_test_best, cfg, data, model, device, run_dir, writer, state, training)
        _, results = decided_on_main(world, test, lambda metrics: metrics)
        succeeded = True
    except TrainingInterrupted as interruption:
        if interruption.step is None:
            interruption.step = trainer.last_saved_step
        raise
    finally:
        writer.close(succeeded)
    if world.is_main:  # the model holds best.pt's weights, those the test metrics are of
        callbacks.end(state.step, trainer.epochs_done, results, model, trainer.stop_reason)
        if summary:
            _print_summary(cfg, run_dir, results)
    return results


def _resume_point(cfg: TrainConfig, run_dir: Path, world: WorldInfo) -> ResumePoint | None:
    """The checkpoint the run continues from (None: a fresh run). Rank 0 checks it; the other
    ranks load the file it chose."""
    point, path = decided_on_main(
        world,
        lambda: find_resume_point(cfg, run_dir),
        lambda found: str(found.path.absolute()) if found is not None else None,
    )
    if path is not None and point is None:
        point = ResumePoint(Path(path), load_checkpoint(Path(path)))
    return point


def _prepare_data(
    cfg: TrainConfig,
    world: WorldInfo,
    point: ResumePoint | None,
    pretrained: PretrainedModel | None = None,
) -> PreparedData:
    """Rank 0 prepares every split (and trains the tokenizers). The other ranks map rank 0's
    cache entry, so that every rank on a machine reads the same files and shares their pages
    (one copy of the corpus per machine, not per rank); where there is no entry (generated
    tasks) or it is not on this rank's machine, they encode their training split with exactly
    rank 0's tokenizers, so every rank has the same vocabulary. A resumed run encodes its data
    with the checkpoint's tokenizers: the same ids, the same embedding rows (a retrained
    sentencepiece model need not be identical); a run started from a pretrained model with
    that model's."""
    saved = TokenizerPair.from_state(point.payload["tokenizers"]) if point else None
    if pretrained is not None:
        saved = pretrained.tokenizers
    if saved is not None:  # a multilingual model's data.*_lang_code
        use_language_codes(cfg, saved)
    data, (tokenizer_state, folder) = decided_on_main(
        world,
        lambda: prepare_data(cfg.data, cfg.seed, tokenizers=saved),
        lambda prepared: (
            prepared.tokenizers.state(),
            None if prepared.cache_folder is None else str(prepared.cache_folder),
        ),
    )
    if data is None and folder is not None:
        data = load_prepared(Path(folder))
    if data is None:
        tokenizers = TokenizerPair.from_state(tokenizer_state)
        data = prepare_data(cfg.data, cfg.seed, tokenizers=tokenizers, splits=["train"])
    return data


def _describe(
    cfg: TrainConfig, data: PreparedData, model: Seq2Seq, device: torch.device, world: WorldInfo
) -> None:
    if not world.is_main:
        return
    log.info(
        "model: %s, %s parameters; data: %s (%s); device: %s%s",
        type(model).__name__,
        f"{sum(p.numel() for p in model.parameters()):,}",
        cfg.data.name,
        ", ".join(f"{name} {len(pairs)}" for name, pairs in data.examples.items()),
        device,
        f" x {world.world_size} processes" if world.distributed else "",
    )
    if cfg.model.family is ModelFamily.transformer:
        log.info("attention kernel in training: %s", attention_kernels(cfg, device))


def _writer(cfg: TrainConfig, run_dir: Path, point: ResumePoint | None, world: WorldInfo) -> Any:
    """The trackers `logger` selects (trackers.py), on rank 0. Resuming, TensorBoard hides
    events after the checkpoint's step that the killed process logged, so the curves continue
    without a doubled stretch."""
    if not world.is_main:
        return NullWriter()
    return open_trackers(cfg, run_dir, point.step if point else None)


def _trainer(
    cfg: TrainConfig,
    data: PreparedData,
    model: Seq2Seq,
    optimizer: torch.optim.Optimizer,
    schedule: LearningRateSchedule,
    writer: Any,
    device: torch.device,
    run_dir: Path,
    stop: StopSignals,
    world: WorldInfo,
) -> Trainer:
    """The trainer with its validation evaluator and heatmap callback (rank 0 only)."""
    valid = make_evaluator(cfg, data, "valid", device) if world.is_main else None
    on_validation = None
    if valid is not None:
        sources = [src for src, _ in data.pairs["valid"]]
        on_validation = validation_logger(writer, valid, data.tokenizers, cfg, sources)
    # The stored config never carries `resume`: eval/translate of this checkpoint, or a
    # later resume from it, must not depend on where this run came from.
    static = {
        "config": config_to_dict(dataclasses.replace(cfg, resume=None)),
        "tokenizers": data.tokenizers.state(),
    }
    trainer = Trainer(
        model,
        optimizer,
        schedule,
        cfg,
        data.examples["train"],
        valid,
        run_dir,
        writer,
        device,
        static,
        on_validation=on_validation,
        stop=stop,
        extended_examples=extended_split(cfg, data, "train"),
        alignments=_guided_links(cfg, data),
    )
    _sample_subwords(cfg, data, trainer)
    return trainer


def _sample_subwords(cfg: TrainConfig, data: PreparedData, trainer: Trainer) -> None:
    """Subword regularization: the training split resegmented every epoch (when asked)."""
    alpha = cfg.data.spm_sampling_alpha or cfg.data.bpe_dropout
    if alpha == 0:
        return
    from attnseq.data.subword_sampling import sampled_segmentation

    segmentation = sampled_segmentation(
        (data.tokenizers.src, data.tokenizers.tgt),
        data.pairs["train"],
        data.examples["train"],
        alpha=alpha,
        seed=cfg.seed,
        max_src_len=cfg.data.max_src_len,
        max_tgt_len=cfg.data.max_tgt_len,
    )
    trainer.loader.resample_each_epoch(segmentation)


def _guided_links(cfg: TrainConfig, data: PreparedData) -> list[PieceLinks] | None:
    """Guided alignment: the gold piece links of every training example (None when off)."""
    if cfg.optim.alignment_lambda == 0:
        return None
    from attnseq.data.guided_alignment import split_piece_links

    links = split_piece_links(cfg.data, data)
    linked = sum(bool(example) for example in links)
    log.info("guided alignment: %d of %d training pairs have links", linked, len(links))
    return links


def _earlier_training_metrics(run_dir: Path) -> dict[str, float]:
    """train/loss, train/nll and train/ppl of the run's metrics.json, for a resumed session
    that logged no training line (a finished run trains nothing): its numbers stay the run's."""
    import json

    try:
        earlier = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(earlier, dict):
        return {}
    keys = ("train/loss", "train/nll", "train/ppl")
    return {key: earlier[key] for key in keys if isinstance(earlier.get(key), int | float)}


def _test_best(
    cfg: TrainConfig,
    data: PreparedData,
    model: Seq2Seq,
    device: torch.device,
    run_dir: Path,
    writer: Any,
    state: TrainingState,
    training: dict[str, float],
) -> dict[str, float]:
    """Evaluate best.pt on the test split (metrics and attention diagnostics); write
    hyps/test.txt, metrics.json (with `training`, the last training line's train/loss,
    train/nll and train/ppl), hparams."""
    best_path = run_dir / "checkpoints" / "best.pt"
    if not best_path.is_file():  # resumed from a lone checkpoint without its best.pt
        log.warning("no best.pt in %s: evaluating last.pt", best_path.parent)
        best_path = best_path.with_name("last.pt")
    load_weights(best_path, model, load_checkpoint(best_path)["model"])
    test = make_evaluator(cfg, data, "test", device, split_gold(cfg, "test", data.tokenizers))
    metrics, hypotheses = test.evaluate(model)
    log.info("test: decoded %s", test.decode_rate.summary())
    metrics.update(test.attention_diagnostics(model))
    results = {f"test/{name}": value for name, value in metrics.items()}
    results["best_step"] = state.best_step
    results[f"valid/best_{cfg.trainer.early_stopping_metric.value}"] = state.best_metric
    results["skipped_steps"] = state.skipped_steps
    results.update(training)
    results.update(peak_gpu_memory(device))
    atomic_write_lines(run_dir / "hyps" / "test.txt", hypotheses)
    atomic_write_json(run_dir / "metrics.json", results)
    # At the last training step, so the test numbers sit at the end of the valid/* curves.
    writer.add_hparams(
        run_hparams(cfg, sum(p.numel() for p in model.parameters())),
        hparams_metrics(results),
        run_name=".",
        global_step=state.step,
    )
    return results


def _print_summary(cfg: TrainConfig, run_dir: Path, metrics: dict[str, float]) -> None:
    rows = [
        (key, f"{value:.4f}")
        for key, value in sorted(metrics.items())
        if isinstance(value, float) and not is_per_layer_key(key)
    ]
    if any(key.endswith("/bleu") for key in metrics):
        from attnseq.evaluation.metrics import bleu_signature

        rows.append(("BLEU signature", bleu_signature()))
    width = max((len(key) for key, _ in rows), default=0)  # the longest name sets the column
    lines = [f"{key:>{width}} {value}" for key, value in rows]
    print("\n".join(["test metrics of the best checkpoint:", *lines]))
    print(f"run directory: {run_dir}")
    print(f"  checkpoints: {run_dir / 'checkpoints'}  (best.pt, last.pt)")
    print(f"  metrics:     {run_dir / 'metrics.json'}")
    print(f"  hypotheses:  {run_dir / 'hyps' / 'test.txt'}")
    if Tracker.tensorboard in cfg.logger:
        print(f"  tensorboard: tensorboard --logdir {run_dir / 'tb'}")
    if Tracker.mlflow in cfg.logger:
        uri = mlflow_tracking_uri(cfg, run_dir)
        print(f"  mlflow:      mlflow ui --backend-store-uri {uri}")
    if Tracker.wandb in cfg.logger:
        print(f"  wandb:       wandb sync {run_dir / 'wandb'}/offline-run-*  (offline run)")
