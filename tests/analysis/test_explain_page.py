"""The page of `attnseq explain` (attnseq/analysis/explain_page.py): self-contained, small, with
the embedded data in the documented shapes; and, in a real browser (headless chromium driven by
selenium), free of console errors, answering clicks and the keyboard, and readable at a
laptop's 1366 x 768 and at a phone's 390 px width.

The browser tests skip when selenium, chromium or chromedriver is missing (tests/browser.py).
They save screenshots to their tmp_path and, when ATTNSEQ_SCREENSHOTS names a folder, there
too."""

import json
import os
import re
from pathlib import Path

import pytest
from browser import headless_chromium, screenshot
from helpers import untrained_checkpoint

import attnseq
from attnseq.analysis.explain_page import SCALE, explanation_html, page_data
from attnseq.analysis.explanation import explain
from attnseq.models.loading import load_trained_model

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")

SOURCE = "4 May 2001"
TARGET = "2001-05-04"
DATA = re.compile(r'<script type="application/json" id="explain-data">(.*?)</script>', re.S)


def embedded(page: str) -> dict:
    match = DATA.search(page)
    assert match, "no embedded data"
    return json.loads(match.group(1))


@pytest.fixture(scope="module")
def transformer(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("page") / "tf.pt"
    return untrained_checkpoint(
        path,
        "model.family=transformer",
        "model.enc_layers=2",
        "model.dec_layers=2",
        "model.heads=2",
        "model.dropout=0.0",
    )


@pytest.fixture(scope="module")
def rnn_page(tmp_path_factory) -> Path:
    """The page of an untrained GRU with Bahdanau attention (one map) forced on SOURCE, TARGET."""
    folder = tmp_path_factory.mktemp("rnn")
    checkpoint = untrained_checkpoint(folder / "rnn.pt", "model.dropout=0.0")
    path = folder / "explain.html"
    attnseq.load(checkpoint, "cpu").explain(SOURCE, TARGET, path=path)
    return path


@pytest.fixture(scope="module")
def beam_page(transformer, tmp_path_factory) -> Path:
    """The page of a 3-beam decoding of SOURCE, written by `Model.explain`."""
    path = tmp_path_factory.mktemp("html") / "explain.html"
    attnseq.load(transformer, "cpu").explain(SOURCE, beam=3, path=path)
    return path


# ------------------------------------------------------------------ the file, no browser
@pytest.mark.slow
def test_the_page_is_self_contained(beam_page) -> None:
    page = beam_page.read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.I)
    links = re.findall(r"<link\b[^>]*>", page, re.I)
    assert links == ['<link rel="icon" href="data:,">']  # no favicon request, nothing else
    assert not re.search(r"<script\b[^>]*\bsrc=", page, re.I)
    assert not re.search(r"@import|url\(\s*['\"]?(https?:)?//", page, re.I)
    assert "function" in page and "grid-template-columns" in page  # script and style inline


def test_the_embedded_data_has_the_documented_shapes(beam_page, transformer) -> None:
    data = embedded(beam_page.read_text(encoding="utf-8"))
    S = len(SOURCE)
    assert data["source_pieces"] == list(SOURCE) and not data["forced"]
    assert data["header"]["checkpoint"] == str(transformer)
    assert data["header"]["decoding"]["beam"] == "3"
    assert data["header"]["version"] == attnseq.__version__
    assert data["encoder"]["layers"] == 2 and data["encoder"]["heads"] == 2
    assert _shape(data["encoder"]["weights"]) == (2, 2, S, S)
    assert 1 <= len(data["outputs"]) <= 3
    for output in data["outputs"]:
        rows = len(output["pieces"]) + 1
        assert output["rows"] == [*output["pieces"], "</s>"]
        assert _shape(output["cross"]["weights"]) == (2, 2, rows, S)
        assert _shape(output["decoder"]["weights"]) == (2, 2, rows, rows)
        assert len(output["token_log_probs"]) == rows
        assert set(output["attributions"]) == set(data["methods"])
        for attribution in output["attributions"].values():
            assert _shape(attribution["source"]) == (rows, S)
            for row in attribution["source"]:  # thousandths, rounded: a row sums to ~1000
                assert abs(sum(row) - SCALE) <= S
                assert all(isinstance(value, int) and value >= 0 for value in row)


@pytest.mark.slow
def test_only_an_rnn_page_has_one_map(beam_page, rnn_page) -> None:
    transformer = embedded(beam_page.read_text(encoding="utf-8"))
    assert transformer["one_map"] is False
    rnn = embedded(rnn_page.read_text(encoding="utf-8"))
    assert rnn["one_map"] is True and rnn["header"]["model"]["family"] == "rnn"
    assert rnn["encoder"] is None and rnn["outputs"][0]["decoder"] is None
    assert _shape(rnn["outputs"][0]["cross"]["weights"])[:2] == (1, 1)


def _shape(nested: list) -> tuple[int, ...]:
    shape = []
    while isinstance(nested, list):
        shape.append(len(nested))
        nested = nested[0]
    return tuple(shape)


@pytest.mark.slow
def test_a_40_piece_pair_of_a_6_layer_8_head_transformer_stays_under_2_mb(tmp_path) -> None:
    words = [f"w{i}" for i in range(40)]
    pairs = [(" ".join(words), " ".join(reversed(words)))]
    path = untrained_checkpoint(
        tmp_path / "big.pt",
        "data.tokenizer=word",
        "model.family=transformer",
        "model.enc_layers=6",
        "model.dec_layers=6",
        "model.heads=8",
        "model.d_model=64",
        "model.ff_dim=64",
        "model.dropout=0.0",
        pairs=pairs,
    )
    trained = load_trained_model(path)
    # integrated gradients and SmoothGrad add arrays of the same shapes as gradient x input
    methods = ["attention", "rollout", "gradient-x-input"]
    page = explanation_html(explain(trained, *pairs[0], methods=methods))
    data = embedded(page)
    assert _shape(data["outputs"][0]["cross"]["weights"]) == (6, 8, 41, 40)
    assert _shape(data["encoder"]["weights"]) == (6, 8, 40, 40)
    assert len(page.encode("utf-8")) < 2 * 1024**2


def test_text_cannot_end_the_data_element_early(transformer) -> None:
    trained = load_trained_model(transformer)
    source = "</script><script>alert(1)</script> 3 May"
    explanation = explain(trained, source, TARGET)
    page = explanation_html(explanation)
    assert page.count("</script>") == 2  # the data element's and the script's
    assert embedded(page)["source"] == source
    assert page_data(explanation)["source"] == source


# ------------------------------------------------------------------------- in a browser
@pytest.fixture(scope="module")
def shown_page(beam_page, tmp_path_factory) -> Path:
    """The page the browser tests open: `beam_page`, or with ATTNSEQ_EXPLAIN_CHECKPOINT (and
    ATTNSEQ_EXPLAIN_SRC) set, the 3-beam page of that checkpoint and source (the screenshots
    of docs/guides/explain.md show a trained model)."""
    checkpoint = os.environ.get("ATTNSEQ_EXPLAIN_CHECKPOINT")
    if not checkpoint:
        return beam_page
    path = tmp_path_factory.mktemp("shown") / "explain.html"
    source = os.environ.get("ATTNSEQ_EXPLAIN_SRC", SOURCE)
    attnseq.load(checkpoint, "cpu").explain(source, beam=3, path=path)
    return path


@pytest.fixture(scope="module")
def browser():
    with headless_chromium(1366, 768) as driver:
        yield driver


def _open(driver, page: Path, width: int, height: int) -> None:
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 700},
    )
    driver.get(page.resolve().as_uri())
    driver.get_log("browser")  # what earlier pages logged goes


def _shown(pieces: list[str]) -> list[str]:
    """The pieces as the page prints them: a space as "\u2423"."""
    return [piece.replace(" ", "\u2423") for piece in pieces]


def _errors(driver) -> list[dict]:
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def _method_values(driver) -> list[str]:
    from selenium.webdriver.common.by import By

    values = driver.find_elements(By.CSS_SELECTOR, "#methods .bars.source .value")
    return [element.text for element in values]


@pytest.mark.slow
def test_the_page_answers_clicks_and_keys_without_console_errors(
    browser, shown_page, tmp_path
) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    _open(browser, shown_page, 1366, 768)
    tokens = browser.find_elements(By.CSS_SELECTOR, "#output-tokens .token")
    data = embedded(shown_page.read_text(encoding="utf-8"))
    assert [t.text for t in tokens] == _shown(data["outputs"][0]["rows"])
    assert tokens[0].get_attribute("aria-selected") == "true"
    first = _method_values(browser)
    assert len(first) == len(data["methods"]) * len(data["source_pieces"])
    # a click on another output piece shows that piece's weights
    target = max(range(len(tokens)), key=lambda t: _row_difference(data, t))
    tokens[target].click()
    assert (
        browser.find_elements(By.CSS_SELECTOR, "#output-tokens .token")[target].get_attribute(
            "aria-selected"
        )
        == "true"
    )
    screenshot(browser, tmp_path, "explain-1366", full=False)
    clicked = _method_values(browser)
    assert clicked != first
    assert clicked[: len(data["source_pieces"])] == _expected_values(data, 0, target)
    # the keyboard: the arrow keys move the selection, the focus stays visible on it
    ActionChains(browser).send_keys(Keys.ARROW_LEFT).perform()
    step = target - 1 if target > 0 else 0
    selected = browser.find_element(By.CSS_SELECTOR, '#output-tokens [aria-selected="true"]')
    assert selected.get_attribute("data-step") == str(step)
    assert browser.switch_to.active_element == selected
    assert _method_values(browser)[: len(data["source_pieces"])] == _expected_values(data, 0, step)
    # Tab goes from the chosen output to the chosen piece, Enter on a map enlarges it
    browser.find_element(By.CSS_SELECTOR, '#outputs [aria-checked="true"]').click()
    ActionChains(browser).send_keys(Keys.TAB).perform()
    assert browser.switch_to.active_element == browser.find_element(
        By.CSS_SELECTOR, '#output-tokens [aria-selected="true"]'
    )
    browser.find_element(By.CSS_SELECTOR, "#grid canvas").send_keys(Keys.ENTER)
    assert browser.find_element(By.ID, "enlarged").is_displayed()
    ActionChains(browser).send_keys(Keys.ESCAPE).perform()
    assert not browser.find_element(By.ID, "enlarged").is_displayed()
    # hovering a map shows a cell's token pair and weight; a click enlarges the map
    canvas = browser.find_element(By.CSS_SELECTOR, "#grid canvas")
    ActionChains(browser).move_to_element_with_offset(canvas, 1, 1).perform()
    detail = browser.find_element(By.ID, "map-detail").text
    assert "layer" in detail and "head" in detail and "=" in detail
    canvas.click()
    assert browser.find_element(By.ID, "enlarged").is_displayed()
    screenshot(browser, tmp_path, "explain-1366-full")
    assert _errors(browser) == []


def _row_difference(data: dict, step: int) -> int:
    """How far the first method's row of `step` lies from row 0's (to click a row that
    shows different numbers)."""
    rows = data["outputs"][0]["attributions"][data["methods"][0]]["source"]
    return sum(abs(a - b) for a, b in zip(rows[step], rows[0], strict=True))


def _expected_values(data: dict, output: int, step: int) -> list[str]:
    row = data["outputs"][output]["attributions"][data["methods"][0]]["source"][step]
    return [f"{value / SCALE:.3f}" for value in row]


@pytest.mark.slow
def test_each_hypothesis_shows_its_own_output(browser, shown_page) -> None:
    from selenium.webdriver.common.by import By

    data = embedded(shown_page.read_text(encoding="utf-8"))
    if len(data["outputs"]) < 2:
        pytest.skip("the beam found a single output")
    _open(browser, shown_page, 1366, 768)
    browser.find_elements(By.CSS_SELECTOR, "#outputs .hypothesis")[1].click()
    tokens = browser.find_elements(By.CSS_SELECTOR, "#output-tokens .token")
    assert [t.text for t in tokens] == _shown(data["outputs"][1]["rows"])
    assert _errors(browser) == []


@pytest.mark.slow
def test_a_phone_width_has_no_horizontal_page_scroll(browser, shown_page, tmp_path) -> None:
    from selenium.webdriver.common.by import By

    _open(browser, shown_page, 390, 844)
    width = browser.execute_script("return window.innerWidth")
    assert width == 390
    scroll = browser.execute_script(
        "return [document.documentElement.scrollWidth, document.body.scrollWidth]"
    )
    assert max(scroll) <= width, scroll
    browser.find_element(By.CSS_SELECTOR, "#grid canvas").click()  # enlarged, still no scroll
    scroll = browser.execute_script("return document.documentElement.scrollWidth")
    assert scroll <= width
    screenshot(browser, tmp_path, "explain-390")
    assert _errors(browser) == []


# Reads, in the page, the first thumbnail's colour at the centre of each of `cells` (row, column)
# and every pixel of the colour scale's ramp: ([[r, g, b] per cell], [[r, g, b] per ramp x]).
READ_COLOURS = """
const [canvas, cells] = arguments;
const [size, left, top] = ["size", "left", "top"].map((name) => Number(canvas.dataset[name]));
const at = (context, x, y) => Array.from(context.getImageData(x, y, 1, 1).data.slice(0, 3));
const thumbnail = canvas.getContext("2d");
const ramp = document.querySelector("#map-legend .ramp");
const scale = ramp.getContext("2d");
return [
  cells.map(([r, c]) => at(
    thumbnail, left + Math.floor((c + 0.5) * size), top + Math.floor((r + 0.5) * size)
  )),
  Array.from({ length: ramp.width }, (_, x) => at(scale, x, Math.floor(ramp.height / 2))),
];
"""


@pytest.mark.slow
def test_the_maps_share_one_colour_scale_that_reads_their_weights(
    browser, beam_page, tmp_path
) -> None:
    """One legend above the grid, its ramp from 0.000 to 1.000: a thumbnail cell's colour, looked
    up on the ramp, gives back the cell's weight (the decoder's self-attention has weights from
    0 to 1: row 1 puts all of its weight on <s>, a masked cell none)."""
    from selenium.webdriver.common.by import By

    _open(browser, beam_page, 1366, 768)
    data = embedded(beam_page.read_text(encoding="utf-8"))
    browser.find_elements(By.CSS_SELECTOR, "#output-tokens .token")[-1].click()  # row T outlined
    browser.find_element(By.CSS_SELECTOR, '.tab[data-kind="decoder"]').click()
    assert len(browser.find_elements(By.CSS_SELECTOR, ".legend")) == 1  # once, not per thumbnail
    assert browser.find_element(By.CSS_SELECTOR, "#map-legend .legend-min").text == "0.000"
    assert browser.find_element(By.CSS_SELECTOR, "#map-legend .legend-max").text == "1.000"
    maps = data["outputs"][0]["decoder"]
    weights = maps["weights"][0][0]
    cells = [(r, c) for r in range(min(5, len(weights) - 1)) for c in range(min(5, len(weights)))]
    canvas = browser.find_element(By.CSS_SELECTOR, '#grid canvas[data-layer="1"][data-head="1"]')
    shown, ramp = browser.execute_script(READ_COLOURS, canvas, cells)
    values = {weights[r][c] for r, c in cells}
    assert min(values) == 0 and max(values) == SCALE  # the whole scale is read
    for (r, c), colour in zip(cells, shown, strict=True):
        x = _nearest(ramp, colour)
        assert abs(x / (len(ramp) - 1) - weights[r][c] / SCALE) <= 0.02, (r, c, colour, ramp[x])
    canvas.click()  # the enlarged map states the same scale
    enlarged = browser.find_element(By.CSS_SELECTOR, "#enlarged .legend")
    assert enlarged.find_element(By.CLASS_NAME, "legend-max").text == "1.000"
    screenshot(browser, tmp_path, "explain-scale")
    assert _errors(browser) == []


def _nearest(ramp: list[list[int]], colour: list[int]) -> int:
    """The x of the ramp's pixel nearest to `colour` (squared RGB distance)."""
    return min(
        range(len(ramp)),
        key=lambda x: sum((a - b) ** 2 for a, b in zip(ramp[x], colour, strict=True)),
    )


@pytest.mark.slow
def test_an_rnn_map_is_titled_as_one_map_not_as_layer_and_head(browser, rnn_page, tmp_path) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    _open(browser, rnn_page, 1366, 768)
    assert browser.find_element(By.ID, "maps-title").text == "Attention map"
    grid = browser.find_element(By.ID, "grid")
    assert grid.text == "cross-attention (one map)"
    canvas = grid.find_element(By.TAG_NAME, "canvas")
    assert canvas.get_attribute("aria-label") == "cross-attention (one map) (Enter enlarges)"
    ActionChains(browser).move_to_element_with_offset(canvas, 0, 0).perform()
    detail = browser.find_element(By.ID, "map-detail").text
    assert detail.startswith("cross-attention (one map): output ")
    assert "layer" not in detail and "head" not in detail
    canvas.send_keys(Keys.ENTER)
    title = browser.find_element(By.CSS_SELECTOR, "#enlarged h3").text
    assert title == "cross-attention (one map)"
    assert browser.find_element(By.CSS_SELECTOR, "#map-legend .legend-min").text == "0.000"
    # painted to the data: the scale ends at the map's largest weight, and says so
    weights = embedded(rnn_page.read_text(encoding="utf-8"))["outputs"][0]["cross"]["weights"]
    top = max(value for row in weights[0][0] for value in row)
    assert top < SCALE
    legend_max = browser.find_element(By.CSS_SELECTOR, "#map-legend .legend-max").text
    assert legend_max == f"{top / SCALE:.3f}"
    assert int(canvas.get_attribute("data-size")) >= 16  # a cell to be read, not a thumbnail
    screenshot(browser, tmp_path, "explain-rnn")
    assert _errors(browser) == []
