"""What runs show in TensorBoard (the writer of attnseq/training/trackers.py, the records of
attnseq/training/train_log.py), read back through TensorBoard's own server on the loopback
interface: the hyperparameter experiment it works out (the settings that differ between the
runs first, no bookkeeping keys), and in headless chromium the SCALARS, IMAGES, TEXT and
HPARAMS pages as a researcher reads them.

The runs are two tiny transformers trained here, which differ in optim.lr and model.heads; with
ATTNSEQ_TENSORBOARD_LOGDIR naming a folder of runs (each with its tb/), those instead: the
screenshots of docs/guides/translation.md show two 150-update Multi30k transformers. The browser
tests skip where chromium is missing (tests/browser.py); they save screenshots to their
tmp_path and, when ATTNSEQ_SCREENSHOTS names a folder, there too."""

import json
import os
import time
import urllib.request
from pathlib import Path

import pytest
from browser import headless_chromium, screenshot, tensorboard_server
from helpers import tiny_config

from attnseq.training.run import run_training
from attnseq.training.train_log import NOT_HPARAMS

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")

DIFFERENCES = {  # run folder: the settings that set it apart
    "lr0.003_heads2": ["optim.lr=0.003", "model.heads=2"],
    "lr0.001_heads4": ["optim.lr=0.001", "model.heads=4"],
}
PAGE_SECONDS = 60  # the longest wait for a page's content to show


@pytest.fixture(scope="module")
def logdir(tmp_path_factory) -> Path:
    """A folder of runs, each with its tb/ (see the module's docstring)."""
    if given := os.environ.get("ATTNSEQ_TENSORBOARD_LOGDIR"):
        return Path(given)
    folder = tmp_path_factory.mktemp("runs")
    for name, settings in DIFFERENCES.items():
        cfg = tiny_config(
            "model.family=transformer",
            "model.dec_layers=2",
            "trainer.num_heatmaps=2",
            "trainer.max_steps=4",
            "trainer.validate_every=2",
            "trainer.log_every=1",
            *settings,
        )
        run_training(cfg, folder / name, summary=False)
    return folder


@pytest.fixture(scope="module")
def server(logdir: Path):
    runs = len([path for path in logdir.iterdir() if (path / "tb").is_dir()])
    with tensorboard_server(logdir, runs) as url:
        yield url


def _experiment(url: str) -> dict:
    """The hyperparameter experiment TensorBoard's HParams tab asks its server for."""
    request = urllib.request.Request(
        f"{url}/data/plugin/hparams/experiment",
        data=json.dumps({"experimentName": "", "includeMetrics": True}).encode(),
        headers={"Content-Type": "application/json"},
    )
    return json.loads(urllib.request.urlopen(request, timeout=60).read())


@pytest.mark.slow
def test_the_settings_that_differ_between_the_runs_come_first(server) -> None:
    """TensorBoard shows the first five hyperparameters and metrics of its HParams table: the
    runs' differing settings, then the others by name; the test split's task metrics."""
    experiment = _experiment(server)
    infos = experiment["hparamInfos"]
    differing = [info["name"] for info in infos if info.get("differs")]
    assert set(differing) >= {"optim.lr", "model.heads"}
    assert [info["name"] for info in infos[: len(differing)]] == differing
    names = {info["name"] for info in infos}
    assert {"model.family", "model.d_model", "optim.name", "data.name", "n_params"} <= names
    left_out = [
        name
        for name in names
        if any(name == key or name.startswith(f"{key}.") for key in NOT_HPARAMS)
    ]
    assert left_out == []
    metrics = [info["name"]["tag"] for info in experiment["metricInfos"]]
    assert metrics[:5] == ["test/bleu", "test/chrf", "test/exact_match", "test/loss", "test/ppl"]


# ------------------------------------------------------------------------- in a browser
# Every text of the page, the shadow roots of TensorBoard's components included, one per line;
# charts (svg, canvas) are left out: their tick labels are many and say nothing asked here.
DEEP_TEXT = """
const parts = [];
function walk(root) {
  for (const node of root.childNodes) {
    if (node.nodeName === "svg" || node.nodeName === "CANVAS") continue;
    const text = node.nodeType === Node.TEXT_NODE ? node.textContent.trim() : "";
    if (text) parts.push(text);
    if (node.shadowRoot) walk(node.shadowRoot);
    if (node.childNodes) walk(node);
  }
}
walk(document);
return parts.join("\\n");
"""

# Every <img> of the page (shadow roots included): [alt or "", loaded, natural width, shown width]
DEEP_IMAGES = """
const found = [];
function walk(root) {
  for (const node of root.querySelectorAll("*")) {
    if (node.tagName === "IMG") {
      found.push([node.alt || "", node.complete && node.naturalWidth > 0, node.naturalWidth,
                  node.getBoundingClientRect().width]);
    }
    if (node.shadowRoot) walk(node.shadowRoot);
  }
}
walk(document);
return found;
"""


@pytest.fixture(scope="module")
def browser():
    with headless_chromium(1366, 900, offline=False) as driver:
        driver.set_script_timeout(PAGE_SECONDS)  # a page of many charts is long to walk
        yield driver


def _page(browser, url: str, tab: str, wanted: list[str]) -> str:
    """Open TensorBoard's `tab` and wait (at most PAGE_SECONDS) until its text holds every one
    of `wanted`; the page's text."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"{url}/#{tab}")
    text = ""

    def shown(driver) -> bool:
        nonlocal text
        text = driver.execute_script(DEEP_TEXT)
        return all(item in text for item in wanted)

    try:
        WebDriverWait(browser, PAGE_SECONDS, poll_frequency=1).until(shown)
    except TimeoutException:
        missing = [item for item in wanted if item not in text]
        pytest.fail(f"the {tab} page shows no {missing} after {PAGE_SECONDS} s")
    return text


def _tags(logdir: Path, prefix: str) -> set[str]:
    """The tags under `prefix` that the runs' event files hold (what the pages should show)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags: set[str] = set()
    for run in sorted(logdir.glob("*/tb")):
        events = EventAccumulator(str(run), size_guidance={"images": 1, "scalars": 1})
        events.Reload()
        for kind in ("scalars", "images"):
            tags |= {tag for tag in events.Tags()[kind] if tag.startswith(prefix)}
    return tags


@pytest.mark.slow
def test_the_scalars_page_has_the_training_and_validation_curves(
    browser, server, logdir, tmp_path
) -> None:
    _page(browser, server, "scalars", ["train/loss", "train/nll", "train/ppl"])
    # the screenshot: the three curves alone, once their points are drawn
    curves = "scalars&tagFilter=train%2F(loss%7Cnll%7Cppl)%24"
    _page(browser, server, curves, ["train/loss", "train/nll", "train/ppl"])
    time.sleep(5)
    screenshot(browser, tmp_path, "tensorboard-scalars", full=False)
    # the valid/ charts: the tags the page lists (it draws a chart once scrolled to), and
    # the first of them filtered, as one looks for them
    wanted = {"valid/loss", "valid/ppl", "valid/bleu", "valid/attention/entropy"}
    wanted.add("valid/examples/attention/entropy")  # the drawn examples', named apart
    listed = json.loads(urllib.request.urlopen(f"{server}/data/plugin/scalars/tags").read())
    assert all(wanted <= set(tags) for tags in listed.values()), listed
    _page(browser, server, "scalars&tagFilter=valid%2F", ["valid/attention/entropy"])


@pytest.mark.slow
def test_the_images_page_has_every_drawn_example_per_layer(
    browser, server, logdir, tmp_path
) -> None:
    tags = _tags(logdir, "attention/example_")
    examples = {tag.split("/")[1] for tag in tags}
    assert {"example_0", "example_1"} <= examples
    for example in examples:  # each transformer example: one figure per layer and the mean
        assert f"attention/{example}/layer_1" in tags
        assert f"attention/{example}/last_layer_mean" in tags
    _page(browser, server, "images", sorted(tags))
    images = browser.execute_script(DEEP_IMAGES)
    heatmaps = [image for image in images if image[2] > 0]
    assert len(heatmaps) >= len(tags) and all(loaded for _, loaded, _, _ in heatmaps)
    # the screenshot: one layer's heads, as a researcher filters the tags to look at them
    _page(browser, server, "images&tagFilter=example_0%2Flayer_1", ["attention/example_0/layer_1"])
    screenshot(browser, tmp_path, "tensorboard-images", full=False)


@pytest.mark.slow
def test_the_text_page_has_the_examples_table(browser, server, tmp_path) -> None:
    text = _page(browser, server, "text", ["valid/examples", "source", "hypothesis", "reference"])
    assert "| # |" not in text  # drawn as a table, not shown as Markdown source
    screenshot(browser, tmp_path, "tensorboard-text", full=False)


@pytest.mark.slow
def test_the_hparams_page_lists_the_differing_settings_first(
    browser, server, logdir, tmp_path
) -> None:
    runs = sorted(path.name for path in logdir.iterdir() if (path / "tb").is_dir())
    text = _page(browser, server, "hparams", [*runs, "optim.lr", "model.heads", "test/bleu"])
    columns = [line for line in text.splitlines() if line in {"optim.lr", "model.heads"}]
    assert columns, text
    first = text.index("Trial ID")
    header = text[first:]
    for name in ("model.heads", "optim.lr"):  # among the columns shown, before the rest
        assert header.index(name) < header.index(
            "model.family" if "model.family" in header else runs[0]
        )
    screenshot(browser, tmp_path, "tensorboard-hparams", full=False)
