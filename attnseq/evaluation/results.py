"""Where `attnseq eval` keeps a result, and what the result records.

Every evaluation gets a folder of its own, named after what was evaluated and how, so one
evaluation never replaces another's result, and the run's own metrics.json (written by
training) is never touched:

    OUT/CHECKPOINT/SPLIT.DECODING/
        metrics.json    the metrics, flat as in the run's metrics.json ("test/bleu": 31.2),
                        and what they are of: checkpoint (absolute path), checkpoint_step,
                        split, examples, decoding (every setting), overrides, bleu_signature,
                        averaged_from (an average), evaluated_at (UTC)
        hyps.txt        one output per example, in the split's order
        refs.txt        the references
        attention.npz   with --save-attention (attnseq/analysis/saved_attention.py)

OUT is RUN/eval by default for a checkpoint in RUN/checkpoints/, else an eval/ folder beside
the checkpoint (`default_root`). CHECKPOINT is the
file name without ".pt", with the training step when the checkpoint has one (best-step1400;
an average has none: averaged). DECODING names every decoding setting, whatever the
checkpoint's defaults are, so names compare across checkpoints: "greedy", "beam5-lp0.6" or
"sample-t0.7-k0-p0.9-n1-seed0" (temperature, top-k, top-p, samples, seed), then "min8",
"norepeat3", "cov0.2" (not for sampling) for the summarization constraints that are on and
"maxlen2x+5" for an output length limit other than the default. Config overrides that are not
decoding settings and may change the result (data.test_size=50) are appended after a "+", and
so is the gold alignment file of an alignment evaluation (+align-test.sure.pharaoh).
The same checkpoint, split and settings evaluated again give the same result, in the same
folder.
"""

import datetime
import hashlib
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from attnseq.decoding.settings import DecodingSettings
from attnseq.io.atomic import atomic_write_json, atomic_write_lines

# config keys that are decoding settings (named by DECODING), or that cannot change a result
DECODING_KEYS = {
    "trainer.beam",
    "trainer.length_penalty",
    "trainer.max_output_ratio",
    "trainer.max_output_extra",
    "trainer.min_output_length",
    "trainer.no_repeat_ngram",
    "trainer.coverage_penalty",
}
NEUTRAL_KEYS = {"trainer.device", "trainer.threads", "trainer.progress", "data.eval_max_tokens"}
LONGEST_OVERRIDES_NAME = 60  # longer override lists are named by a hash (all are recorded)
# the files a result folder may hold (module docstring)
RESULT_FILES = ("metrics.json", "hyps.txt", "refs.txt", "attention.npz")


@dataclass
class EvalResult:
    """One evaluation's folder and its metrics.json record."""

    folder: Path
    record: dict[str, Any]


class EvalMetrics(dict[str, float]):
    """An evaluation's metrics (name -> value) that also say where they were written."""

    def __init__(self, metrics: dict[str, float], result: EvalResult) -> None:
        super().__init__(metrics)
        self.result = result


def default_root(checkpoint: Path) -> Path:
    """RUN/eval for RUN/checkpoints/NAME.pt; eval/ beside any other checkpoint."""
    folder = checkpoint.parent
    return (folder.parent if folder.name == "checkpoints" else folder) / "eval"


def decoding_name(settings: DecodingSettings) -> str:
    """'greedy', 'beam5-lp0.6', 'beam4-lp1-min8-norepeat3-cov0.2',
    'sample-t0.7-k0-p0.9-n1-seed0', ... (module docstring)."""
    searches = not settings.is_greedy and settings.sampling is None
    if settings.sampling is not None:
        parts = [settings.sampling.name()]
    else:
        parts = [f"beam{settings.beam}"] if searches else ["greedy"]
    if searches:  # greedy decoding and sampling rank nothing: alpha plays no part
        parts.append(f"lp{settings.length_penalty:g}")
    if settings.min_length:
        parts.append(f"min{settings.min_length}")
    if settings.no_repeat_ngram:
        parts.append(f"norepeat{settings.no_repeat_ngram}")
    if settings.coverage_penalty and settings.sampling is None:
        parts.append(f"cov{settings.coverage_penalty:g}")
    default = DecodingSettings()
    limit = (settings.max_output_ratio, settings.max_output_extra)
    if limit != (default.max_output_ratio, default.max_output_extra):
        parts.append(f"maxlen{limit[0]:g}x+{limit[1]}")
    return "-".join(parts)


def result_overrides(overrides: Sequence[str]) -> list[str]:
    """The overrides that can change a result and are not decoding settings, sorted."""
    chosen = []
    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        if key not in DECODING_KEYS and key not in NEUTRAL_KEYS:
            chosen.append(override)
    return sorted(chosen)


def result_folder(
    out: Path,
    checkpoint: Path,
    step: int | None,
    split: str,
    settings: DecodingSettings,
    overrides: Sequence[str] = (),
    extra: Sequence[str] = (),
) -> Path:
    """OUT/CHECKPOINT/SPLIT.DECODING[+OVERRIDES][+EXTRA...] (module docstring); `extra` names
    what else the result depends on (e.g. align-GOLD_FILE)."""
    model = checkpoint.stem if step is None else f"{checkpoint.stem}-step{step}"
    name = f"{split}.{decoding_name(settings)}"
    changed = result_overrides(overrides)
    if changed:
        joined = ",".join(changed)
        if len(joined) > LONGEST_OVERRIDES_NAME:
            joined = "overrides-" + hashlib.sha1(joined.encode()).hexdigest()[:10]
        name += f"+{joined}"
    for part in extra:
        name += f"+{part}"
    return out / model / re.sub(r"[^\w.=,+-]", "_", name)


def write_result(
    folder: Path,
    metrics: dict[str, float],
    hypotheses: Sequence[str],
    references: Sequence[str],
    about: dict[str, Any],
) -> EvalResult:
    """Write hyps.txt, refs.txt, then metrics.json (last: a folder whose metrics.json exists
    is complete). `about` says what was evaluated (checkpoint, split, ...)."""
    atomic_write_lines(folder / "hyps.txt", list(hypotheses))
    atomic_write_lines(folder / "refs.txt", list(references))
    record = {**about, **metrics}
    if any(key.endswith("/bleu") for key in metrics):
        from attnseq.evaluation.metrics import bleu_signature

        record["bleu_signature"] = bleu_signature()
    record["evaluated_at"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    atomic_write_json(folder / "metrics.json", record)
    return EvalResult(folder, record)


def describe(
    checkpoint: Path,
    payload: dict[str, Any],
    split: str,
    examples: int,
    settings: DecodingSettings,
    overrides: Sequence[str],
    alignments: Any = None,
) -> dict[str, Any]:
    """The record's description of an evaluation: what was evaluated, and how. `alignments`:
    the gold word-alignment files (evaluation.GoldAlignmentFiles) of an alignment evaluation."""
    about: dict[str, Any] = {
        "checkpoint": str(checkpoint.resolve()),
        "checkpoint_step": checkpoint_step(payload),
        "split": split,
        "examples": examples,
        "decoding": asdict(settings),
        "overrides": list(overrides),
    }
    if "averaged_from" in payload:
        about["averaged_from"] = list(payload["averaged_from"])
    if alignments is not None:
        about["alignments"] = {
            key: value if value is None else str(value) for key, value in asdict(alignments).items()
        }
    return about


def checkpoint_step(payload: dict[str, Any]) -> int | None:
    """The training step of a checkpoint; None for an average (it has no progress)."""
    progress = payload.get("progress")
    if isinstance(progress, dict) and isinstance(progress.get("step"), int):
        return progress["step"]
    return None
