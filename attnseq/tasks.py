"""The composition root: train / eval as functions of a config.

This module (with cli.py) is the only place that knows about Hydra; it turns a composed config
into the dataclasses of config.py and wires data, tokenizers, model, optimizer, trainer,
evaluator and logging together.
"""

import logging
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from attnseq.atomic import atomic_write_json, atomic_write_lines
from attnseq.checkpoint import load_checkpoint
from attnseq.config import TrainConfig, config_from_dict, config_to_dict, validate
from attnseq.data.batching import encode_pairs
from attnseq.data.sources import load_splits
from attnseq.data.tokenizers import Tokenizer, tokenizer_from_state, train_tokenizer
from attnseq.errors import UserError
from attnseq.evaluation import DecodingSettings, Evaluator
from attnseq.models import build_model
from attnseq.models.seq2seq import Seq2Seq
from attnseq.optim import build_optimizer, build_scheduler
from attnseq.training import Trainer, resolve_device
from attnseq.visualize import alignment_figure, attention_grid_figure, log_heatmap

log = logging.getLogger("attnseq")


@dataclass
class Tokenizers:
    src: Tokenizer
    tgt: Tokenizer

    def state(self) -> dict[str, Any]:
        return {"src": self.src.state_dict(), "tgt": self.tgt.state_dict()}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "Tokenizers":
        return cls(tokenizer_from_state(state["src"]), tokenizer_from_state(state["tgt"]))


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def model_for(cfg: TrainConfig, tokenizers: Tokenizers) -> Seq2Seq:
    tgt = tokenizers.tgt
    return build_model(
        cfg.model, tokenizers.src.vocab_size, tgt.vocab_size, tgt.pad_id, tgt.bos_id, tgt.eos_id
    )


def make_evaluator(
    cfg: TrainConfig, pairs: list[tuple[str, str]], tokenizers: Tokenizers, device: torch.device
) -> Evaluator:
    return Evaluator(
        encode_pairs(pairs, tokenizers.src, tokenizers.tgt),
        [tgt for _, tgt in pairs],
        tokenizers.tgt,
        device,
        max_tokens=cfg.data.eval_max_tokens,
        decoding=DecodingSettings(
            beam=cfg.trainer.beam,
            max_output_ratio=cfg.trainer.max_output_ratio,
            max_output_extra=cfg.trainer.max_output_extra,
        ),
    )


# --------------------------------------------------------------------------------- heatmaps
def heatmap_logger(writer: Any, evaluator: Evaluator, tokenizers: Tokenizers, count: int):
    """Draw the first `count` validation examples' cross-attention at each validation."""
    chosen = list(range(min(count, len(evaluator.examples))))
    subset = Evaluator(
        [evaluator.examples[i] for i in chosen],
        [evaluator.references[i] for i in chosen],
        tokenizers.tgt,
        evaluator.device,
        max_tokens=10**9,
        decoding=evaluator.decoding,
    )

    def draw(model: Seq2Seq, step: int) -> None:
        hypotheses = subset.decode(model, need_weights=True)
        for number, (hypothesis, (src_ids, _)) in enumerate(
            zip(hypotheses, subset.examples, strict=True)
        ):
            if hypothesis.attention is None:
                return  # a model without attention has nothing to draw
            src_tokens = tokenizers.src.ids_to_pieces(src_ids)
            rows = hypothesis.attention.shape[-2]
            tgt_tokens = (tokenizers.tgt.ids_to_pieces(hypothesis.tokens) + ["</s>"])[:rows]
            weights = hypothesis.attention.numpy()
            if weights.ndim == 4:  # transformer: (L, H, T, S)
                grid = attention_grid_figure(weights, src_tokens, tgt_tokens)
                log_heatmap(writer, f"attention/example_{number}/all_heads", grid, step)
                weights = weights[-1].mean(axis=0)  # last layer, head average
                tag = f"attention/example_{number}/last_layer_mean"
            else:
                tag = f"attention/example_{number}"
            log_heatmap(writer, tag, alignment_figure(weights, src_tokens, tgt_tokens), step)

    return draw


# ------------------------------------------------------------------------------------ train
def run_training(cfg: TrainConfig, run_dir: Path) -> dict[str, float]:
    """Train, keep the best checkpoint, evaluate it on the test split, write metrics.json."""
    from torch.utils.tensorboard import SummaryWriter

    validate(cfg)
    seed_everything(cfg.seed)
    if cfg.trainer.threads:
        torch.set_num_threads(cfg.trainer.threads)
    device = resolve_device(cfg.trainer.device.value)
    splits = load_splits(cfg.data, cfg.seed)
    kind = cfg.data.tokenizer.value
    tokenizers = Tokenizers(
        train_tokenizer(kind, (src for src, _ in splits["train"])),
        train_tokenizer(kind, (tgt for _, tgt in splits["train"])),
    )
    model = model_for(cfg, tokenizers).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    log.info(
        "model: %s, %s parameters; data: %s (%s); device: %s",
        type(model).__name__,
        f"{n_params:,}",
        cfg.data.name,
        ", ".join(f"{name} {len(pairs)}" for name, pairs in splits.items()),
        device,
    )
    optimizer = build_optimizer(model, cfg.optim)
    total_steps = cfg.trainer.max_steps
    scheduler = build_scheduler(optimizer, cfg.optim, total_steps)
    writer = SummaryWriter(str(run_dir / "tb"))
    valid = make_evaluator(cfg, splits["valid"], tokenizers, device)
    static = {"config": config_to_dict(cfg), "tokenizers": tokenizers.state()}
    trainer = Trainer(
        model,
        optimizer,
        scheduler,
        cfg,
        encode_pairs(splits["train"], tokenizers.src, tokenizers.tgt),
        valid,
        run_dir,
        writer,
        device,
        static,
        on_validation=heatmap_logger(writer, valid, tokenizers, cfg.trainer.num_heatmaps),
    )
    try:
        progress = trainer.fit()
        best = load_checkpoint(run_dir / "checkpoints" / "best.pt")
        model.load_state_dict(best["model"])
        test = make_evaluator(cfg, splits["test"], tokenizers, device)
        metrics, hypotheses = test.evaluate(model)
        results = {f"test/{name}": value for name, value in metrics.items()}
        results["best_step"] = progress.best_step
        results[f"valid/best_{cfg.trainer.early_stopping_metric.value}"] = progress.best_metric
        atomic_write_lines(run_dir / "hyps" / "test.txt", hypotheses)
        atomic_write_json(run_dir / "metrics.json", results)
        writer.add_hparams(
            _flat_hparams(cfg), {k: v for k, v in results.items() if "/" in k}, run_name="."
        )
    finally:
        writer.close()
    _print_summary(run_dir, results)
    return results


def _flat_hparams(cfg: TrainConfig) -> dict[str, Any]:
    flat: dict[str, Any] = {}

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(f"{prefix}{key}.", value)
        elif isinstance(node, (int, float, str, bool)):
            flat[prefix.rstrip(".")] = node

    walk("", config_to_dict(cfg))
    return flat


def _print_summary(run_dir: Path, metrics: dict[str, float]) -> None:
    lines = [
        f"{key:>24} {value:.4f}"
        for key, value in sorted(metrics.items())
        if isinstance(value, float)
    ]
    print("\n".join(["test metrics of the best checkpoint:", *lines]))
    print(f"run directory: {run_dir}")
    print(f"  checkpoints: {run_dir / 'checkpoints'}  (best.pt, last.pt)")
    print(f"  metrics:     {run_dir / 'metrics.json'}")
    print(f"  hypotheses:  {run_dir / 'hyps' / 'test.txt'}")
    print(f"  tensorboard: tensorboard --logdir {run_dir / 'tb'}")


def train_from_hydra(composed: Any) -> float | None:
    """Body of the `hydra.main` task function: DictConfig -> TrainConfig -> run_training.

    User errors end the process with status 2 and one message; Hydra would otherwise turn them
    into exit status 1 with its own formatting.
    """
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_object(composed)
    assert isinstance(cfg, TrainConfig)
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        metrics = run_training(cfg, run_dir)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    return metrics.get(f"test/{cfg.trainer.early_stopping_metric.value}")


# ------------------------------------------------------------------------------------- eval
def evaluate_checkpoint(
    path: Path,
    split: str = "test",
    max_tokens: int | None = None,
    out_dir: Path | None = None,
    overrides: list[str] | None = None,
    device_name: str = "auto",
) -> dict[str, float]:
    """Metrics of a checkpoint on one split, from the checkpoint alone (plus its data)."""
    payload = load_checkpoint(path)
    cfg = config_from_dict(payload["config"], overrides)
    if max_tokens:
        cfg.data.eval_max_tokens = max_tokens
    tokenizers = Tokenizers.from_state(payload["tokenizers"])
    device = resolve_device(device_name)
    model = model_for(cfg, tokenizers)
    model.load_state_dict(payload["model"])
    model.to(device)
    splits = load_splits(cfg.data, cfg.seed)
    if split not in splits:
        raise UserError(f"unknown split {split!r}; this dataset has: {', '.join(splits)}")
    evaluator = make_evaluator(cfg, splits[split], tokenizers, device)
    metrics, hypotheses = evaluator.evaluate(model)
    results = {f"{split}/{name}": value for name, value in metrics.items()}
    out_dir = out_dir or path.parent.parent / "eval"
    atomic_write_lines(out_dir / "hyps" / f"{split}.txt", hypotheses)
    atomic_write_json(out_dir / "metrics.json", results)
    return results
