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

from attnseq.alignment.diagnostics import attention_statistics
from attnseq.alignment.segments import hypothesis_segment_maps, is_hierarchical, segment_labels
from attnseq.analysis.figures import alignment_figure, attention_grid_figure, log_heatmap
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
    """Loss and tokens/s averaged over the steps since the last train/* log line."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.start = time.perf_counter()
        self.loss_sum = 0.0
        self.norm_sum = 0.0
        self.steps = 0
        self.src_tokens = 0.0
        self.tgt_tokens = 0.0
        self.padded = 0.0

    def add(self, tokens: tuple[float, float, float], loss: float, norm: float) -> None:
        """One step: its (global) real source and target tokens and padded positions, its loss
        and gradient norm."""
        self.loss_sum += loss
        self.norm_sum += norm
        self.steps += 1
        self.src_tokens += tokens[0]
        self.tgt_tokens += tokens[1]
        self.padded += tokens[2]

    def flush(self) -> dict[str, float]:
        """The averages since the last flush; starts a new window."""
        seconds = max(time.perf_counter() - self.start, 1e-9)
        real = self.src_tokens + self.tgt_tokens
        loss = self.loss_sum / max(self.steps, 1)
        stats = {
            "loss": loss,
            "tokens_per_sec": self.tgt_tokens / seconds,  # target tokens, the peers' unit
            "src_tgt_tokens_per_sec": real / seconds,
            "padding_share": 1.0 - real / max(self.padded, 1),
            "grad_norm": self.norm_sum / max(self.steps, 1),
            "ppl": perplexity(loss),
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
        if not self.speaks:
            return
        eta = self.eta_seconds(step, elapsed)
        log.info(
            "step %d/%d  epoch %.2f  loss %.4f  ppl %.2f  lr %.3g  %s tgt tok/s  grad norm %.3g  "
            "elapsed %s  ETA %s",
            step,
            self.total_steps,
            epoch,
            stats["loss"],
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
    heatmaps = heatmap_logger(writer, evaluator, tokenizers, cfg.trainer.num_heatmaps, sources)

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
):
    """Draw the first `count` validation examples' cross-attention at each validation; for copy
    models with a strip of p_gen per output token next to it. `sources`: the split's source
    text, for the figure titles (source → output)."""
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

    def draw(model: Seq2Seq, step: int) -> None:
        hypotheses = subset.decode(model, need_weights=True)
        texts = subset.texts(hypotheses)
        p_gens = subset.output_p_gen(model, hypotheses)
        maps = [h.attention for h in hypotheses if h.attention is not None and h.attention.numel()]
        if maps:  # how peaked attention is: entropy of the rows, weight on the argmax
            stats = [attention_statistics(weights) for weights in maps]
            for name in stats[0]:
                value = sum(float(s[name]) for s in stats) / len(stats)
                writer.add_scalar(f"attention/{name}", value, step)
        for number, (hypothesis, (src_ids, _)) in enumerate(
            zip(hypotheses, subset.examples, strict=True)
        ):
            if hypothesis.attention is None:
                return  # a model without attention has nothing to draw
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
            title = f"{source} → {texts[number]}"
            if weights.ndim == 4:  # transformer: (L, H, T, S)
                grid = attention_grid_figure(weights, src_tokens, tgt_tokens, title)
                log_heatmap(writer, f"attention/example_{number}/all_heads", grid, step)
                weights = weights[-1].mean(axis=0)  # last layer, head average
                tag = f"attention/example_{number}/last_layer_mean"
                title += " (last layer, mean of heads)"
            else:
                tag = f"attention/example_{number}"
            figure = alignment_figure(weights, src_tokens, tgt_tokens, title, p_gen=p_gen)
            log_heatmap(writer, tag, figure, step)
        if is_hierarchical(model):  # and the segment level, output step x segment
            sources_ids = [src_ids for src_ids, _ in subset.examples]
            log_segment_heatmaps(
                writer, model, sources_ids, hypotheses, tokenizers, step, subset.extended
            )

    return draw


def run_hparams(cfg: TrainConfig, n_params: int) -> dict[str, Any]:
    """Every config value of the run, defaults included (None as "None"), plus its number of
    parameters, for TensorBoard's HParams tab.

    Every run logs the same keys, so each row of a sweep's table has a value in every column,
    whatever the sweep varied (`tracker_params`: `resume` is left out, since where a run
    continued from does not set it apart from the uninterrupted run).
    """
    return {**tracker_params(cfg), "n_params": n_params}


def log_segment_heatmaps(
    writer: Any,
    model: Any,
    sources: Sequence[list[int]],
    hypotheses: Sequence[Any],
    tokenizers: Any,
    step: int,
    extended: Sequence[ExtendedExample] | None = None,
) -> None:
    """TensorBoard heatmaps attention/example_K/segments (output step x segment) of decoded
    hypotheses (`attnseq.decoding.Hypothesis` with attention) of a hierarchical model."""
    outputs = [
        (list(h.tokens), 0 if h.attention is None else int(h.attention.shape[-2]))
        for h in hypotheses
    ]
    maps = hypothesis_segment_maps(model, sources, outputs, extended)
    for number, ((segments, weights), (tokens, rows)) in enumerate(zip(maps, outputs, strict=True)):
        if rows == 0 or not segments:
            continue
        pieces = tokenizers.src.ids_to_pieces(sources[number])
        labels = segment_labels(pieces, segments, tokenizers.src.pieces_to_text)
        oovs = [] if extended is None else extended[number].oovs
        output_pieces = (extended_pieces(tokenizers.tgt, tokens, oovs) + ["</s>"])[:rows]
        title = f"segment attention: {tokenizers.tgt.decode_extended(tokens, oovs)}"
        figure = alignment_figure(weights, labels, output_pieces, title)
        log_heatmap(writer, f"attention/example_{number}/segments", figure, step)
