"""What a run reports while it trains: train/* scalars, the periodic log line, validation
heatmaps, examples and diagnostics, the hyperparameters, train.log's header."""

import logging
import platform
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from attnseq.alignment.diagnostics import attention_statistics, is_per_layer_key
from attnseq.alignment.segments import hypothesis_segment_maps, is_hierarchical, segment_labels
from attnseq.analysis.figures import (
    TENSORBOARD_STYLE,
    alignment_figure,
    colour_limits,
    layer_figure,
    log_heatmap,
)
from attnseq.analysis.seed_groups import IGNORED_KEYS
from attnseq.config.choices import HeatmapScale
from attnseq.config.conversion import config_to_dict
from attnseq.config.schema import TrainConfig
from attnseq.data.batching import TokenBatchSampler
from attnseq.data.extended_vocab import ExtendedExample, extended_pieces
from attnseq.data.prepare import TokenizerPair
from attnseq.evaluation.evaluator import Evaluator
from attnseq.evaluation.metrics import perplexity
from attnseq.io.progress import ON_BAR
from attnseq.models.seq2seq import Seq2Seq
from attnseq.training.distributed import WorldInfo
from attnseq.training.provenance import git_description, installed_version
from attnseq.training.state import TrainingState
from attnseq.training.trackers import tracker_params

log = logging.getLogger("attnseq")


def log_run_header(cfg: TrainConfig) -> None:
    """The first lines of a run's log: attnseq, torch and Python versions, the command line,
    the working directory and its git commit (with "dirty" when tracked files changed), then
    the resolved config as YAML.

    The short lines go to every handler; the config block (a hundred-odd lines) goes to the
    log files only (train.log), so a terminal is not flooded with it.
    """
    import torch

    cwd = Path.cwd()
    log.info(
        "attnseq %s, torch %s, Python %s on %s",
        installed_version(),
        torch.__version__,
        platform.python_version(),
        platform.platform(terse=True),
    )
    log.info("command: %s", shlex.join(getattr(sys, "orig_argv", sys.argv)))
    log.info("working directory: %s (%s)", cwd, git_description(cwd))
    import yaml

    resolved = yaml.safe_dump(config_to_dict(cfg), sort_keys=False, allow_unicode=True)
    _to_log_files(logging.INFO, "resolved config:\n%s", resolved.rstrip())


def _to_log_files(level: int, message: str, *args: Any) -> None:
    """Emit one record to the file handlers (train.log) of the attnseq and root loggers only."""
    record = log.makeRecord(log.name, level, __file__, 0, message, args, None)
    for logger in (log, logging.getLogger()):
        for handler in logger.handlers:
            if isinstance(handler, logging.FileHandler) and level >= handler.level:
                handler.handle(record)


class ThroughputWindow:
    """The updates since the last train/* log line: their loss, nll and gradient norm, tokens/s.

    loss and nll are per target token of the whole window (each applied update's value
    weighted by its target tokens), so that ppl = exp(nll) is computed as validation's
    perplexity is and, without label smoothing or other terms, nll = loss; grad_norm is the
    mean over the window's applied updates.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.start = time.perf_counter()
        self.loss_sum = 0.0  # summed over the window's target tokens, as nll_sum
        self.nll_sum = 0.0
        self.norm_sum = 0.0
        self.steps = 0
        self.src_tokens = 0.0
        self.tgt_tokens = 0.0
        self.padded = 0.0

    def add(self, tokens: tuple[float, float, float], loss: float, norm: float, nll: float) -> None:
        """One applied update: its (global) real source and target tokens and padded
        positions, its loss and nll (each per target token) and its gradient norm."""
        self.loss_sum += loss * tokens[1]
        self.nll_sum += nll * tokens[1]
        self.norm_sum += norm
        self.steps += 1
        self.src_tokens += tokens[0]
        self.tgt_tokens += tokens[1]
        self.padded += tokens[2]

    def flush(self) -> dict[str, float]:
        """The averages since the last flush; starts a new window."""
        seconds = max(time.perf_counter() - self.start, 1e-9)
        real = self.src_tokens + self.tgt_tokens
        nll = self.nll_sum / max(self.tgt_tokens, 1)
        stats = {
            "loss": self.loss_sum / max(self.tgt_tokens, 1),
            "nll": nll,
            "ppl": perplexity(nll),
            "tokens_per_sec": self.tgt_tokens / seconds,  # target tokens, the peers' unit
            "src_tgt_tokens_per_sec": real / seconds,
            "padding_share": 1.0 - real / max(self.padded, 1),
            "grad_norm": self.norm_sum / max(self.steps, 1),
        }
        self.reset()
        return stats


class TrainLog:
    """train/* scalars and log lines of one training session.

    Args:
        writer: a SummaryWriter (a NullWriter on ranks that write nothing).
        total_steps: the updates the run is heading for (max_steps, or max_epochs in updates).
        max_minutes: the run's wall-clock budget, for the ETA (None: none).
        speaks: this process logs (rank 0); the others only write (nothing, to a NullWriter).
    """

    def __init__(
        self, writer: Any, total_steps: int, max_minutes: float | None, speaks: bool
    ) -> None:
        self.writer = writer
        self.total_steps = total_steps
        self.max_minutes = max_minutes
        self.speaks = speaks
        self.window = ThroughputWindow()
        self.session_start = time.monotonic()
        self.session_start_step = 0
        self.reported_step: int | None = None  # the step of the newest report
        self.last: dict[str, float] = {}  # train/loss, train/nll, train/ppl of that report

    def start_session(self, step: int) -> None:
        """This process begins (or resumes) training at update `step`."""
        self.session_start, self.session_start_step = time.monotonic(), step
        self.window.reset()

    def report(self, step: int, epoch: float, lr: float, elapsed: float) -> None:
        """Scalars and one line for the steps since the previous report."""
        stats = self.window.flush()
        for name, value in stats.items():
            self.writer.add_scalar(f"train/{name}", value, step)
        self.writer.add_scalar("train/lr", lr, step)
        self.reported_step = step
        self.last = {f"train/{name}": stats[name] for name in ("loss", "nll", "ppl")}
        if not self.speaks:
            return
        eta = self.eta_seconds(step, elapsed)
        log.info(
            "step %d/%d  epoch %.2f  loss %.4f  nll %.4f  ppl %.2f  lr %.3g  %s tgt tok/s  "
            "grad norm %.3g  elapsed %s  ETA %s",
            step,
            self.total_steps,
            epoch,
            stats["loss"],
            stats["nll"],
            stats["ppl"],
            lr,
            f"{stats['tokens_per_sec']:,.0f}",
            stats["grad_norm"],
            clock(elapsed),
            "-" if eta is None else clock(eta),
            extra={ON_BAR: True},  # the live bar shows these numbers on a terminal
        )

    def eta_seconds(self, step: int, elapsed: float) -> float | None:
        """Seconds until the budget that binds first: the steps left at this session's pace,
        or what is left of max_minutes."""
        done = step - self.session_start_step
        session_seconds = time.monotonic() - self.session_start
        estimates = []
        if done > 0 and session_seconds > 0:
            estimates.append(max(self.total_steps - step, 0) * session_seconds / done)
        if self.max_minutes:
            estimates.append(max(60 * self.max_minutes - elapsed, 0.0))
        return min(estimates, default=None)


AUTO_LOG_POINTS = 20  # `trainer.log_every=auto`: train/* points over the run's budget
AUTO_LOG_EVERY_MAX = 100  # ... and at least one line every this many updates


def log_interval(log_every: int | str, total_steps: int) -> int:
    """The updates between train/* log lines: `trainer.log_every`, or for "auto" about
    `AUTO_LOG_POINTS` lines over the `total_steps` the run is heading for, at least one every
    `AUTO_LOG_EVERY_MAX` updates (a 150-update run logs every 7, a 100,000-update run every
    100)."""
    if isinstance(log_every, int):
        return log_every
    return max(1, min(AUTO_LOG_EVERY_MAX, total_steps // AUTO_LOG_POINTS))


def announce(
    state: TrainingState,
    examples: int,
    sampler: TokenBatchSampler,
    total_steps: int,
    world: WorldInfo,
    accumulate: int = 1,
) -> None:
    """The opening lines of a training session: data, batches, budget; where a resumed run
    picks up."""
    batches = len(sampler)
    processes = f" on each of {world.world_size} processes" if world.distributed else ""
    grouping = f", {accumulate} per update" if accumulate > 1 else ""
    log.info(
        "training: %d examples, %d batches per epoch%s%s (padding %.1f%% of positions), "
        "up to %d steps",
        examples,
        batches,
        processes,
        grouping,
        100 * sampler.padding_share(0),
        total_steps,
    )
    if state.step or state.batch_in_epoch or state.epoch:
        log.info(
            "resuming at step %d (epoch %d, batch %d of %d)",
            state.step,
            state.epoch + 1,
            state.batch_in_epoch,
            batches,
        )


class NullWriter:
    """Stands in for a SummaryWriter on ranks that write nothing (all but rank 0)."""

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self, succeeded: bool = True) -> None:
        pass


def clock(seconds: float) -> str:
    """H:MM:SS."""
    whole = int(round(seconds))
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


TEXT_EXAMPLES = 4  # validation examples shown as text at each validation


def validation_logger(
    writer: Any,
    evaluator: Evaluator,
    tokenizers: TokenizerPair,
    cfg: TrainConfig,
    sources: list[str],
) -> Callable[[Seq2Seq, int], None]:
    """What each validation adds to TensorBoard besides its scalars: heatmaps, attention
    diagnostics and examples."""
    trainer = cfg.trainer
    heatmaps = heatmap_logger(
        writer, evaluator, tokenizers, trainer.num_heatmaps, sources, trainer.heatmap_scale
    )

    def on_validation(model: Seq2Seq, step: int) -> None:
        heatmaps(model, step)
        for name, value in evaluator.attention_diagnostics(model).items():
            writer.add_scalar(f"valid/{name}", value, step)
        log_examples(writer, evaluator, sources, step)

    return on_validation


def log_examples(writer: Any, evaluator: Evaluator, sources: list[str], step: int) -> None:
    """The first `TEXT_EXAMPLES` validation examples (source, hypothesis, reference) in
    TensorBoard's Text tab.

    They are the same sentences at every validation, as Joey NMT's `log_valid_sents`: one
    watches the hypotheses of fixed inputs improve (a resumed run shows the same ones too).
    """
    total = len(evaluator.last_texts)
    if total == 0:
        return
    rows = ["| # | source | hypothesis | reference |", "|---|---|---|---|"]
    for index in range(min(TEXT_EXAMPLES, total)):
        cells = [sources[index], evaluator.last_texts[index], evaluator.references[index]]
        rows.append(f"| {index} | " + " | ".join(_markdown_cell(c) for c in cells) + " |")
    writer.add_text("valid/examples", "\n".join(rows), step)


def _markdown_cell(text: str) -> str:
    """Text shown as itself in a Markdown table cell (TensorBoard renders Markdown)."""
    for char in "\\`*_[]<>|#":
        text = text.replace(char, "\\" + char)
    return text.replace("\n", " ") or " "


def heatmap_logger(
    writer: Any,
    evaluator: Evaluator,
    tokenizers: TokenizerPair,
    count: int,
    sources: list[str] | None = None,
    scale: HeatmapScale = HeatmapScale.shared,
):
    """Draw the first `count` validation examples' cross-attention at each validation: an
    RNN's map (for copy models with a strip of p_gen per output token next to it), or a
    transformer's heads one figure per layer and the mean of its last layer's heads; and
    their attention statistics (valid/examples/attention/*). `sources`: the split's source
    text, for the figure titles (source → output); `scale`: one colour scale for all of a
    validation's figures (segment maps, another distribution, one of their own) or one per
    figure."""
    chosen = evaluator.scored[: max(count, 0)]  # an empty example has no attention to draw
    extended = evaluator.extended
    subset = Evaluator(
        [evaluator.examples[i] for i in chosen],
        [evaluator.references[i] for i in chosen],
        tokenizers.tgt,
        evaluator.device,
        max_tokens=10**9,
        decoding=evaluator.decoding,
        extended=None if extended is None else [extended[i] for i in chosen],
    )
    shared = scale is HeatmapScale.shared

    def draw(model: Seq2Seq, step: int) -> None:
        hypotheses = subset.decode(model, need_weights=True)
        if any(h.attention is None for h in hypotheses):
            return  # a model without attention has nothing to draw
        texts = subset.texts(hypotheses)
        p_gens = subset.output_p_gen(model, hypotheses)
        maps = [h.attention for h in hypotheses if h.attention is not None and h.attention.numel()]
        if maps:  # how peaked attention is: entropy of the rows, weight on the argmax
            stats = [attention_statistics(weights) for weights in maps]
            for name in stats[0]:
                value = sum(float(s[name]) for s in stats) / len(stats)
                writer.add_scalar(f"valid/examples/attention/{name}", value, step)
        limits = colour_limits(*(m.numpy() for m in maps)) if shared else None
        for number, (hypothesis, (src_ids, _)) in enumerate(
            zip(hypotheses, subset.examples, strict=True)
        ):
            assert hypothesis.attention is not None
            src_tokens = tokenizers.src.ids_to_pieces(src_ids)
            if subset.extended is not None:  # unknown pieces as their source text
                view = subset.extended[number]
                src_tokens = extended_pieces(tokenizers.tgt, view.src_ext, view.oovs)
            rows = hypothesis.attention.shape[-2]
            tgt_tokens = extended_pieces(tokenizers.tgt, hypothesis.tokens, subset.oovs(number))
            tgt_tokens = (tgt_tokens + ["</s>"])[:rows]
            weights = hypothesis.attention.numpy()
            p_gen = None if p_gens is None else p_gens[number][:rows]
            source = sources[chosen[number]] if sources is not None else " ".join(src_tokens)
            figures = example_figures(
                weights, src_tokens, tgt_tokens, f"{source} → {texts[number]}", p_gen, limits
            )
            for name, figure in figures.items():
                log_heatmap(writer, f"attention/example_{number}{name}", figure, step)
        if is_hierarchical(model):  # and the segment level, output step x segment
            sources_ids = [src_ids for src_ids, _ in subset.examples]
            log_segment_heatmaps(
                writer, model, sources_ids, hypotheses, tokenizers, step, subset.extended, shared
            )

    return draw


def example_figures(
    weights: np.ndarray,
    src_tokens: list[str],
    tgt_tokens: list[str],
    title: str,
    p_gen: np.ndarray | None = None,
    limits: tuple[float, float] | None = None,
) -> dict[str, Figure]:
    """The TensorBoard figures of one example's cross-attention, by the end of their tag: an
    RNN's (T, S) map ("", with the p_gen strip of a copy model), or a transformer's (L, H, T,
    S) heads one figure per layer ("/layer_L") and the mean of the last layer's heads
    ("/last_layer_mean"). `limits`: the colour scale of them all (None: each its own)."""
    style = TENSORBOARD_STYLE
    if weights.ndim == 2:
        return {"": alignment_figure(weights, src_tokens, tgt_tokens, title, p_gen, style, limits)}
    figures = {
        f"/layer_{layer}": layer_figure(
            heads, src_tokens, tgt_tokens, f"{title} (layer {layer})", style, limits
        )
        for layer, heads in enumerate(weights, start=1)
    }
    mean = weights[-1].mean(axis=0)  # last layer, head average
    figures["/last_layer_mean"] = alignment_figure(
        mean, src_tokens, tgt_tokens, f"{title} (last layer, mean of heads)", p_gen, style, limits
    )
    return figures


# Settings that say where a run reads and writes, how fast and how visibly it runs, not what
# it learns: left out of the hyperparameters (a key, or a node with all its keys). The seed
# stays: it sets runs apart as any other setting does.
NOT_HPARAMS = (
    *(key for key in IGNORED_KEYS if key != "seed"),
    "optimized_metric",
    "data.eval_max_tokens",
    "data.verify",
    "trainer.compile",
)


def run_hparams(cfg: TrainConfig, n_params: int) -> dict[str, Any]:
    """The run's hyperparameters for TensorBoard's HParams tab: every config value, defaults
    included (None as "None"), but the settings of `NOT_HPARAMS`, plus its number of
    parameters.

    Every run logs the same keys, so each row of a sweep's table has a value in every column
    and TensorBoard can tell which settings differ between the runs it shows (it lists those
    first).
    """
    params = {
        key: value
        for key, value in tracker_params(cfg).items()
        if not any(key == left or key.startswith(f"{left}.") for left in NOT_HPARAMS)
    }
    return {**params, "n_params": n_params}


def hparams_metrics(results: dict[str, float]) -> dict[str, float]:
    """The numbers beside a run's hyperparameters: its test metrics and best validation
    value, without the per-layer and per-head diagnostics and without the train/* numbers
    (curves of their own)."""
    return {
        key: value
        for key, value in results.items()
        if "/" in key and not key.startswith("train/") and not is_per_layer_key(key)
    }


def log_segment_heatmaps(
    writer: Any,
    model: Any,
    sources: Sequence[list[int]],
    hypotheses: Sequence[Any],
    tokenizers: Any,
    step: int,
    extended: Sequence[ExtendedExample] | None = None,
    shared: bool = True,
) -> None:
    """TensorBoard heatmaps attention/example_K/segments (output step x segment) of decoded
    hypotheses (`attnseq.decoding.Hypothesis` with attention) of a hierarchical model; `shared`:
    one colour scale for all of them."""
    outputs = [
        (list(h.tokens), 0 if h.attention is None else int(h.attention.shape[-2]))
        for h in hypotheses
    ]
    maps = hypothesis_segment_maps(model, sources, outputs, extended)
    drawn = [
        rows > 0 and bool(segments) for (segments, _), (_, rows) in zip(maps, outputs, strict=True)
    ]
    kept = [weights for (_, weights), keep in zip(maps, drawn, strict=True) if keep]
    limits = colour_limits(*kept) if shared and kept else None
    for number, ((segments, weights), (tokens, rows)) in enumerate(zip(maps, outputs, strict=True)):
        if not drawn[number]:
            continue
        pieces = tokenizers.src.ids_to_pieces(sources[number])
        labels = segment_labels(pieces, segments, tokenizers.src.pieces_to_text)
        oovs = [] if extended is None else extended[number].oovs
        output_pieces = (extended_pieces(tokenizers.tgt, tokens, oovs) + ["</s>"])[:rows]
        title = f"segment attention: {tokenizers.tgt.decode_extended(tokens, oovs)}"
        figure = alignment_figure(
            weights, labels, output_pieces, title, style=TENSORBOARD_STYLE, limits=limits
        )
        log_heatmap(writer, f"attention/example_{number}/segments", figure, step)
