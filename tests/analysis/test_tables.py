"""The one table renderer: each format's layout and escaping, and the p-value cells."""

import pytest

from attnseq.analysis.tables import latex_escape, markdown_escape, p_value_cell, render_table
from attnseq.evaluation.significance import ALPHA

SPECIAL = "a&b $5 #3 x_y 50% <m1> >= 1 | c"
HEAD = ["system", "score"]
ROWS = [[SPECIAL, "1.00"], ["b", "12.50"]]


def test_text_shows_every_character_as_it_is() -> None:
    assert render_table(HEAD, ROWS, "text").splitlines() == [
        "system                           score",
        "-------------------------------  -----",
        f"{SPECIAL}  1.00",
        "b                                12.50",
    ]


def test_text_right_aligns_the_numeric_columns() -> None:
    lines = render_table(HEAD, ROWS, "text", numeric=[False, True]).splitlines()
    assert lines[2:] == [f"{SPECIAL}   1.00", "b                                12.50"]


def test_markdown_escapes_the_cell_separator_only() -> None:
    lines = render_table(HEAD, ROWS, "markdown").splitlines()
    assert lines == [
        "| system | score |",
        "|---|---|",
        r"| a&b $5 #3 x_y 50% <m1> >= 1 \| c | 1.00 |",
        "| b | 12.50 |",
    ]
    aligned = render_table(HEAD, ROWS, "markdown", numeric=[False, True]).splitlines()
    assert aligned[1] == "| --- | ---: |"
    assert markdown_escape("a|b|") == r"a\|b\|"


def test_latex_escapes_every_character_latex_reads_as_a_command() -> None:
    escaped = r"a\&b \$5 \#3 x\_y 50\% $<$m1$>$ $\geq$ 1 \textbar{} c"
    assert render_table(HEAD, ROWS, "latex").splitlines() == [
        r"\begin{tabular}{lr}",
        r"\toprule",
        r"system & score \\",
        r"\midrule",
        escaped + r" & 1.00 \\",
        r"b & 12.50 \\",
        r"\bottomrule",
        r"\end{tabular}",
    ]
    assert render_table(HEAD, ROWS, "latex", numeric=[True, False]).startswith(
        r"\begin{tabular}{rl}"
    )


@pytest.mark.parametrize(
    ("text", "latex"),
    [
        ("{x}", r"\{x\}"),
        ("~^", r"\textasciitilde{}\textasciicircum{}"),
        ("a\\b", r"a\textbackslash{}b"),
        ("<= <", r"$\leq$ $<$"),
        ("32 ± 2.8", r"32 $\pm$ 2.8"),
        ("ε(B>A) k̂/k", r"$\varepsilon$(B$>$A) $\hat{k}$/k"),
        ("$\\pm$", r"\$\textbackslash{}pm\$"),  # text, not math: escaped once, as written
    ],
)
def test_latex_escape(text: str, latex: str) -> None:
    assert latex_escape(text) == latex


def test_an_unknown_format_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="html"):
        render_table(HEAD, ROWS, "html")


def test_p_values_are_starred_below_alpha() -> None:
    assert p_value_cell(None) == "-"
    assert p_value_cell(0.0001) == "0.0001*"
    assert p_value_cell(ALPHA) == f"{ALPHA:.4f}"
    assert p_value_cell(0.5) == "0.5000"
