"""Tables as text, markdown or LaTeX (booktabs): the one renderer of the tables of `attnseq
compare` and `attnseq sweep-report`, with each format's escaping."""

import re
from collections.abc import Sequence

from attnseq.evaluation.significance import ALPHA

TABLE_FORMATS = ("text", "markdown", "latex")

# What a cell's characters become in LaTeX: the ones LaTeX reads as commands escaped, and the
# symbols the tables use as math (text mode prints < and > as other glyphs)
LATEX = {char: "\\" + char for char in "&%$#_{}"} | {
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "\\": r"\textbackslash{}",
    "|": r"\textbar{}",
    "<": "$<$",
    ">": "$>$",
    "<=": r"$\leq$",
    ">=": r"$\geq$",
    "±": r"$\pm$",
    "ε": r"$\varepsilon$",
    "k̂": r"$\hat{k}$",
}
# one pass, longest first: ">=" before ">", and nothing escaped twice
_LATEX_TOKENS = re.compile("|".join(map(re.escape, sorted(LATEX, key=len, reverse=True))))


def latex_escape(text: str) -> str:
    """`text` as LaTeX that prints it (`LATEX`)."""
    return _LATEX_TOKENS.sub(lambda match: LATEX[match.group()], text)


def markdown_escape(text: str) -> str:
    """`text` for a markdown table cell: a `|` would end the cell."""
    return text.replace("|", r"\|")


def p_value_cell(value: float | None) -> str:
    """A p-value to four places, starred below ALPHA; "-" for none (the baseline's)."""
    if value is None:
        return "-"
    return f"{value:.4f}" + ("*" if value < ALPHA else "")


def render_table(
    head: Sequence[str],
    rows: Sequence[Sequence[str]],
    output_format: str,
    numeric: Sequence[bool] | None = None,
) -> str:
    """The table `head` over `rows` in `output_format` (one of TABLE_FORMATS), without a final
    newline; text: columns padded to their widest cell under a rule of dashes. `numeric`: the
    columns of numbers, right-aligned; without it markdown marks no alignment, text aligns
    every column left and LaTeX all but the first right."""
    if output_format not in TABLE_FORMATS:
        raise ValueError(f"unknown table format {output_format!r}")
    lines = [list(head), *(list(row) for row in rows)]
    if output_format == "markdown":
        if numeric is None:
            rule = "|" + "---|" * len(head)
        else:
            rule = "| " + " | ".join("---:" if right else "---" for right in numeric) + " |"
        cells = [" | ".join(markdown_escape(cell) for cell in line) for line in lines]
        return "\n".join([f"| {cells[0]} |", rule, *(f"| {line} |" for line in cells[1:])])
    if output_format == "latex":
        numeric = numeric if numeric is not None else [False] + [True] * (len(head) - 1)
        spec = "".join("r" if right else "l" for right in numeric)
        body = [" & ".join(latex_escape(cell) for cell in line) + r" \\" for line in lines]
        rules = [r"\begin{tabular}{" + spec + "}", r"\toprule", body[0], r"\midrule"]
        return "\n".join([*rules, *body[1:], r"\bottomrule", r"\end{tabular}"])
    widths = [max(len(cell) for cell in column) for column in zip(*lines, strict=True)]
    right = numeric if numeric is not None else [False] * len(head)
    padded = [
        "  ".join(
            cell.rjust(width) if flush else cell.ljust(width)
            for cell, width, flush in zip(line, widths, right, strict=True)
        ).rstrip()
        for line in lines
    ]
    padded.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(padded)
