"""The HTML page of `attnseq explain`: one self-contained file that shows an `Explanation` in
any browser, offline (script, style sheet and data inlined; weights in thousandths, `SCALE`)."""

import html
import json
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from attnseq.analysis.explanation import ExplainedOutput, Explanation, LayeredMaps
from attnseq.io.atomic import atomic_write_text
from attnseq.io.user_paths import printable

SCALE = 1000  # weights are stored in thousandths


def thousandths(weights: np.ndarray) -> list:
    """`weights` rounded to three decimals and stored as integers (0.1234 -> 123), as nested
    lists of the same shape."""
    return np.rint(np.asarray(weights, dtype=np.float64) * SCALE).astype(np.int64).tolist()


def _maps(maps: LayeredMaps | None) -> dict[str, Any] | None:
    if maps is None:
        return None
    layers, heads = maps.weights.shape[:2]
    return {
        "rows": maps.rows,
        "columns": maps.columns,
        "layers": int(layers),
        "heads": int(heads),
        "weights": thousandths(maps.weights),
    }


def _output(output: ExplainedOutput) -> dict[str, Any]:
    attributions = {
        name: {
            "source": thousandths(weights.source),
            "prefix": None if weights.prefix is None else thousandths(weights.prefix),
            "source_share": None
            if weights.source_share is None
            else thousandths(weights.source_share),
        }
        for name, weights in output.methods.items()
    }
    return {
        "text": output.text,
        "score": round(output.score, 4),
        "log_prob": round(output.log_prob, 4),
        "pieces": output.pieces,
        "rows": [*output.pieces, "</s>"],
        "token_log_probs": [round(float(value), 3) for value in output.token_log_probs],
        "p_gen": None if output.p_gen is None else thousandths(output.p_gen),
        "cross": _maps(output.cross),
        "decoder": _maps(output.decoder),
        "attributions": attributions,
    }


def page_data(explanation: Explanation) -> dict[str, Any]:
    """The JSON the page embeds, which explain_page.js reads: header, forced, source,
    source_pieces, methods, one_map, encoder, outputs (one per hypothesis, best first) and
    their maps, each weight an integer in thousandths; the fields are listed in
    docs/internals/evaluation.md."""
    return {
        "header": {
            "checkpoint": _checkpoint(explanation),
            "version": explanation.version,
            "model": explanation.model,
            "decoding": explanation.decoding,
        },
        "forced": explanation.forced,
        "source": explanation.source,
        "source_pieces": explanation.source_pieces,
        "methods": explanation.methods,
        "one_map": explanation.model.get("family") == "rnn",
        "encoder": _maps(explanation.encoder),
        "outputs": [_output(output) for output in explanation.outputs],
    }


def _checkpoint(explanation: Explanation) -> str | None:
    """The checkpoint's path as the UTF-8 page can hold it (bytes of its name that are not
    UTF-8 shown as U+FFFD), or None for a model in memory."""
    return printable(explanation.checkpoint) if explanation.checkpoint else None


def _asset(name: str) -> str:
    return resources.files("attnseq.analysis").joinpath(name).read_text(encoding="utf-8")


def _embedded_json(data: dict[str, Any]) -> str:
    """JSON that is safe inside a <script> element: "<" is escaped, so no "</script>" or
    "<!--" in a sentence can end the element early."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")


def _header(explanation: Explanation) -> str:
    """The header as static HTML: readable before the script runs."""
    rows = [("checkpoint", _checkpoint(explanation) or "(in memory)")]
    rows += [
        (f"model {key}" if key == "family" else key, v) for key, v in explanation.model.items()
    ]
    rows += list(explanation.decoding.items())
    rows.append(("attnseq", explanation.version))
    items = "".join(
        f"<div><dt>{html.escape(key)}</dt><dd>{html.escape(str(value))}</dd></div>"
        for key, value in rows
    )
    return (
        f'<header><h1>attnseq explain</h1><p class="source-line">{html.escape(explanation.source)}'
        f'</p><dl class="settings">{items}</dl></header>'
    )


def explanation_html(explanation: Explanation) -> str:
    """The whole page as one string: header, the embedded data, the inline script and style."""
    title = html.escape(f"attnseq explain: {explanation.source}"[:120])
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f"<title>{title}</title><style>{_asset('explain_page.css')}</style></head><body>"
        f"{_header(explanation)}"
        '<main id="app"><noscript>This page draws its content with JavaScript.</noscript></main>'
        f'<script type="application/json" id="explain-data">'
        f"{_embedded_json(page_data(explanation))}</script><script>{_asset('explain_page.js')}</script></body></html>\n"
    )


FRAME_HEIGHT = 720  # pixels: the header, the output tabs and a row of maps in view


def page_frame(page: str, height: int = FRAME_HEIGHT) -> str:
    """The page inside an `<iframe srcdoc=...>`, as a notebook shows it inline. The frame holds
    a document of its own: the page's style sheet (`:root`, `body`, `button`, ...) and its
    script (`document.getElementById("app")`) reach nothing of the notebook around it, and
    nothing of the notebook's styles reaches the page. `sandbox="allow-scripts"` runs the
    script in an origin of its own, without access to the notebook's page."""
    return (
        f'<iframe srcdoc="{html.escape(page, quote=True)}" sandbox="allow-scripts" '
        'title="attnseq explain" '
        f'style="width: 100%; height: {height}px; border: 1px solid #d0d7de;"></iframe>'
    )


def write_page(path: str | Path, page: str) -> None:
    """Write the page atomically (attnseq/io/atomic.py): the whole file or none."""
    atomic_write_text(path, page)
