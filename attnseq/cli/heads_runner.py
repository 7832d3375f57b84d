"""What `attnseq heads` runs once its options are read: the measures on one split, their JSON
file and figure, and a pruned copy of the checkpoint."""

import copy
from dataclasses import dataclass, field
from pathlib import Path

from attnseq.analysis.head_importance import MEASURES, HeadImportance, head_importance, write_figure
from attnseq.config.devices import resolve_device
from attnseq.data.locations import overridden_keys
from attnseq.errors import UserError
from attnseq.evaluation.checkpoint_eval import checkpoint_data
from attnseq.evaluation.evaluator import make_evaluator
from attnseq.io.atomic import atomic_write_json
from attnseq.io.checkpoint import save_checkpoint
from attnseq.io.user_paths import printable
from attnseq.models.head_mask import (
    attention_sites,
    head_mask_state,
    masked_heads,
    prune_count,
    prune_masks,
    random_scores,
    set_head_masks,
)
from attnseq.models.loading import TrainedModel, load_trained_model

PRUNE_BY = (*MEASURES, "random")
NAMED_SPLITS = ("train", "valid", "test")


@dataclass
class HeadsRequest:
    """The options of one `attnseq heads` run.

    prune: K (a head count) or a fraction in (0, 1) of all heads; None = report only.
    by: what pruning ranks by, one of PRUNE_BY; seed: the random ranking's seed.
    out: where the pruned checkpoint goes (needed with prune).
    report_dir: folder of the JSON and the figure (default: heads/ beside the checkpoint).
    """

    checkpoint: Path
    split: str = "valid"
    max_batches: int | None = None
    max_tokens: int | None = None
    device: str = "auto"
    report_dir: Path | None = None
    prune: str | None = None
    by: str = "gradient"
    seed: int = 0
    out: Path | None = None
    overrides: list[str] = field(default_factory=list)


@dataclass
class HeadsResult:
    """The importance, the files written, and the heads the pruned checkpoint masks."""

    importance: HeadImportance
    json_path: Path
    figure_path: Path
    pruned_path: Path | None = None
    pruned: list[tuple[str, int, int]] = field(default_factory=list)


def run_heads(request: HeadsRequest) -> HeadsResult:
    """Load, measure, write the report and (with `request.prune`) the pruned checkpoint.

    Raises:
        UserError: not a transformer checkpoint, an unknown split, a bad --prune value; all
            before the measuring starts.
    """
    if request.by not in PRUNE_BY:
        raise UserError(f"--by must be one of {', '.join(PRUNE_BY)}, got {request.by!r}")
    trained = load_trained_model(request.checkpoint, request.overrides)
    sites = attention_sites(trained.model)  # UserError for a model without heads
    count = None
    if request.prune is not None:
        total = sum(site.attention.heads for site in sites)
        count = prune_count(request.prune, total, len(sites), "--prune")
    batches, model = _split_batches(trained, request)
    importance = head_importance(model, batches, request.split)
    importance.extra["checkpoint"] = str(request.checkpoint)
    json_path, figure_path = report_paths(request)
    atomic_write_json(json_path, importance.to_json())
    title = f"head importance of {printable(request.checkpoint.name)} on {request.split}"
    figure_path = write_figure(importance, figure_path, title)
    result = HeadsResult(importance, json_path, figure_path)
    if count is not None and request.out is not None:
        result.pruned = prune_checkpoint(trained, importance, count, request)
        result.pruned_path = request.out
    return result


def report_folder(request: HeadsRequest) -> Path:
    """The folder of the report: --report-dir, else heads/ beside the checkpoint (in the
    working directory for hf:ORG/NAME)."""
    from attnseq.io.hf_hub import is_hub_id

    beside = Path() if is_hub_id(request.checkpoint) else request.checkpoint.parent
    return request.report_dir or beside / "heads"


def report_paths(request: HeadsRequest) -> tuple[Path, Path]:
    """The JSON file and the figure of the report: FOLDER/CHECKPOINT.SPLIT.json and .png."""
    stem = f"{request.checkpoint.stem}.{request.split}"
    folder = report_folder(request)
    return folder / f"{stem}.json", folder / f"{stem}.png"


def _split_batches(trained: TrainedModel, request: HeadsRequest) -> tuple[list, object]:
    """The model on its device and the batches of the split (the first `max_batches`)."""
    cfg = trained.cfg
    split = request.split
    known = sorted({*NAMED_SPLITS, *cfg.data.splits})
    if split not in known:
        raise UserError(f"--split {split!r} is not a split of this dataset: {', '.join(known)}")
    if request.max_tokens:
        cfg.data.eval_max_tokens = request.max_tokens
    data = checkpoint_data(cfg, trained.tokenizers, [split], overridden_keys(request.overrides))
    if split not in data.examples or not data.examples[split]:
        raise UserError(f"split {split!r} has no examples in this dataset")
    device_name = cfg.trainer.device if request.device == "auto" else request.device
    device = resolve_device(device_name)
    model = trained.model.to(device)
    evaluator = make_evaluator(cfg, data, split, device)
    if request.max_batches is not None:
        evaluator.batches = evaluator.batches[: request.max_batches]
    return evaluator.scored_batches(model), model


def prune_checkpoint(
    trained: TrainedModel, importance: HeadImportance, count: int, request: HeadsRequest
) -> list[tuple[str, int, int]]:
    """Write `request.out`: the source checkpoint with `count` heads masked by `request.by`;
    returns the masked heads (kind, layer, head)."""
    assert request.out is not None
    scores = (
        random_scores(importance.masks, request.seed)
        if request.by == "random"
        else importance.scores(request.by)
    )
    set_head_masks(trained.model, prune_masks(scores, count, importance.masks))
    pruned = masked_heads(trained.model)
    payload = copy.copy(trained.payload)
    payload["model"] = {**trained.payload["model"], **head_mask_state(trained.model)}
    payload["head_pruning"] = {
        "source": str(request.checkpoint),
        "by": request.by,
        "count": len(pruned),
        "split": request.split,
        "seed": request.seed if request.by == "random" else None,
        "heads": [[kind, layer + 1, head + 1] for kind, layer, head in pruned],  # from 1
    }
    save_checkpoint(request.out, payload)
    return pruned
