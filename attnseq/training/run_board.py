"""What a training run shows in TensorBoard beyond its scalars: attention heatmaps (and the
segment attention of hierarchical models), the attention diagnostics of the validation split
(``valid/attention/...``: end-of-source mass and entropy per head,
attnseq/analysis/attention_diagnostics.py) and a few validation examples as text at each
validation, and the hyperparameters that set the run apart.

`validation_logger` is the trainer's `on_validation` callback (rank 0 only); `run_hparams` is
what the final test evaluation logs to the HParams tab.
"""

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from attnseq.analysis.attention_diagnostics import attention_statistics
from attnseq.analysis.figures import alignment_figure, attention_grid_figure, log_heatmap
from attnseq.analysis.segment_view import is_hierarchical, log_segment_heatmaps
from attnseq.config.conversion import config_to_dict, flat_config
from attnseq.config.schema import TrainConfig
from attnseq.data.extended_vocab import extended_pieces
from attnseq.data.tokenizers import TokenizerPair
from attnseq.evaluation.evaluator import Evaluator
from attnseq.models.seq2seq import Seq2Seq

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
        log_examples(writer, evaluator, sources, step, cfg.trainer.validate_every)

    return on_validation


def log_examples(
    writer: Any, evaluator: Evaluator, sources: list[str], step: int, validate_every: int
) -> None:
    """A few validation examples (source, hypothesis, reference) in TensorBoard's Text tab.

    Each validation shows the next `TEXT_EXAMPLES` of the split (wrapping around), chosen from
    the step alone, so a resumed run shows what an uninterrupted one would; a final validation
    between two regular ones starts part way.
    """
    total = len(evaluator.last_texts)
    if total == 0:
        return
    start = step * TEXT_EXAMPLES // max(validate_every, 1)  # validation k: from k * N
    chosen = sorted({(start + offset) % total for offset in range(min(TEXT_EXAMPLES, total))})
    rows = ["| # | source | hypothesis | reference |", "|---|---|---|---|"]
    for index in chosen:
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
    """What sets this run apart, for TensorBoard's HParams tab: the config keys whose value
    differs from the schema's default (None as "None"), plus the model family and its number
    of parameters."""
    default = _flat_config(config_to_dict(TrainConfig()))
    flat = _flat_config(config_to_dict(replace(cfg, resume=None)))
    changed = {key: value for key, value in flat.items() if default.get(key, value) != value}
    changed.update({key: value for key, value in flat.items() if key not in default})
    hparams: dict[str, Any] = {
        key: "None" if value is None else value for key, value in sorted(changed.items())
    }
    hparams["model.family"] = flat["model.family"]
    hparams["n_params"] = n_params
    return hparams


def _flat_config(tree: dict[str, Any]) -> dict[str, Any]:
    """{"a.b": value} for every leaf; values TensorBoard cannot show (lists) as strings."""
    scalar = (int, float, str, bool)
    return {
        key: value if value is None or isinstance(value, scalar) else str(value)
        for key, value in flat_config(tree).items()
    }
