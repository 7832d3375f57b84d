"""docs/api_tour.ipynb runs from top to bottom (nbclient) and shows what it promises, in order:
a training with its progress bar, a second one that a callback stops before max_steps, the
loaded model and a translation as one-line reprs over an inline heatmap, plot_alignment,
scores and alignments, save then load giving the same translation, the explain page."""

import os
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "docs" / "api_tour.ipynb"
REPR_LIMIT = 300  # characters of a one-line repr (tests/api/test_results.py holds the same)


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    """The notebook executed (its cells with their outputs) and the folder it ran in, which
    holds the runs it trained (its tempfile.mkdtemp() goes there through TMPDIR)."""
    nbclient = pytest.importorskip("nbclient", reason="pip install -e '.[dev]' (nbclient)")
    import nbformat

    folder = tmp_path_factory.mktemp("notebook")
    # the kernel (a child process) imports this checkout's attnseq, on one thread, on the CPU
    paths = [str(ROOT), os.environ.get("PYTHONPATH", "")]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join(path for path in paths if path))
        patch.setenv("OMP_NUM_THREADS", "1")
        patch.setenv("CUDA_VISIBLE_DEVICES", "")
        patch.setenv("TMPDIR", str(folder))
        notebook = nbformat.read(NOTEBOOK, as_version=4)
        resources = {"metadata": {"path": str(folder)}}
        # every cell runs, so that a failing one shows as an error output (test_no_cell_fails)
        nbclient.NotebookClient(
            notebook, timeout=300, kernel_name="python3", resources=resources, allow_errors=True
        ).execute()
    return notebook, folder


def outputs_of(notebook: Any, marker: str) -> list[Any]:
    """The outputs of the one code cell whose source holds `marker`."""
    cells = [cell for cell in notebook.cells if cell.cell_type == "code" and marker in cell.source]
    assert len(cells) == 1, f"{len(cells)} code cells hold {marker!r}"
    return cells[0].outputs


def stream(outputs: list[Any], name: str) -> str:
    return "".join(out.text for out in outputs if out.output_type == "stream" and out.name == name)


def shown(outputs: list[Any], kind: str) -> list[str]:
    """The `kind` (e.g. "text/plain") of each displayed value or execute result."""
    return [out.data[kind] for out in outputs if kind in out.get("data", {})]


def all_outputs(notebook: Any) -> list[Any]:
    return [out for cell in notebook.cells if cell.cell_type == "code" for out in cell.outputs]


def test_no_cell_fails(executed: tuple[Any, Path]) -> None:
    notebook, _ = executed
    errors = [out for out in all_outputs(notebook) if out.output_type == "error"]
    assert not errors, [f"{out.ename}: {out.evalue}" for out in errors]
    printed = "".join(out.get("text", "") for out in all_outputs(notebook))
    assert "IProgress not found" not in printed  # tqdm.auto's warning without ipywidgets


def test_the_first_training_shows_its_progress(executed: tuple[Any, Path]) -> None:
    notebook, _ = executed
    outputs = outputs_of(notebook, "progress=True")
    errors = stream(outputs, "stderr")
    # tqdm's text bar (no ipywidgets in the test's kernel), up to the last of its 30 updates
    assert re.search(r"train: 100%\|[^|]*\| 30/30 \[.*loss \d", errors), errors[-2000:]
    assert re.search(r"step 15: valid/bleu=", errors)  # a validation line above the bar
    assert "training stopped after 30 steps: max_steps reached" in errors
    assert "test metrics of the best checkpoint" in stream(outputs, "stdout")
    (result,) = shown(outputs, "text/plain")
    assert result.startswith("TrainResult(run_dir=") and "/run'" in result


def test_the_callback_stops_the_second_training_before_max_steps(
    executed: tuple[Any, Path],
) -> None:
    notebook, folder = executed
    outputs = outputs_of(notebook, "callbacks=[stopper]")
    printed = stream(outputs, "stdout")
    done = re.search(r"updates done: (\d+) of max_steps=(\d+)", printed)
    assert done, printed
    steps, budget = int(done[1]), int(done[2])
    assert 10 <= steps < budget == 100  # at least its window of 10 losses, before the budget
    assert f"ended at update {steps}: StopAtLoss.on_update asked to stop" in printed
    assert stream(outputs, "stderr") == ""  # verbose=False: no log lines, no bar
    # the run itself says so, in its train.log
    (log,) = folder.glob("*/stopped/train.log")
    text = log.read_text(encoding="utf-8")
    assert f"training stopped after {steps} steps: StopAtLoss.on_update asked to stop" in text
    (result,) = shown(outputs, "text/plain")
    assert result.startswith("TrainResult(run_dir=") and "/stopped'" in result


def test_every_value_shown_is_one_short_line(executed: tuple[Any, Path]) -> None:
    notebook, _ = executed
    values = shown(all_outputs(notebook), "text/plain")
    assert len(values) >= 12
    for value in values:
        assert "\n" not in value and len(value) < REPR_LIMIT, value
    reprs = "\n".join(values)
    for start in (
        "<attnseq.Model rnn, ",
        "Translation(text=",
        "PairScore(log_prob=",
        "ForcedAlignments(1 pair, ",
        "<attnseq explain page: ",
    ):
        assert start in reprs, start
    hypotheses = stream(outputs_of(notebook, "for hypothesis in"), "stdout").splitlines()
    assert len(hypotheses) == 2  # nbest=2, each one line with its attention's shape
    assert all(line.startswith("TranslatedHypothesis(") for line in hypotheses)
    assert all(re.search(r"attention \(\d+, \d+\)\)$", line) for line in hypotheses)


def test_the_heatmaps_show_inline(executed: tuple[Any, Path]) -> None:
    notebook, _ = executed
    outputs = all_outputs(notebook)
    # exactly two pictures: the translation's HTML repr holds its heatmap, plot_alignment's
    # Figure shows as a PNG
    pngs = [out for out in outputs if "image/png" in out.get("data", {})]
    plotted = outputs_of(notebook, "plot_alignment(translation)")
    assert len(pngs) == 1 and pngs == [out for out in plotted if "image/png" in out.data]
    inline = [page for page in shown(outputs, "text/html") if "data:image/png;base64," in page]
    (heatmap,) = shown(outputs_of(notebook, 'translation = model.translate("June'), "text/html")
    assert inline == [heatmap]
    assert heatmap.startswith("<div><pre>Translation(text=")
    (frame,) = shown(outputs_of(notebook, "model.explain("), "text/html")
    assert frame.startswith("<iframe srcdoc=") and 'sandbox="allow-scripts"' in frame


def test_a_saved_model_translates_the_same(executed: tuple[Any, Path]) -> None:
    notebook, folder = executed
    outputs = outputs_of(notebook, "model.save(")
    assert stream(outputs, "stdout") == "identical after save and load: True\n"
    (loaded,) = shown(outputs, "text/plain")
    assert loaded.startswith("<attnseq.Model rnn, ") and loaded.endswith("/model.pt>")
    assert len(list(folder.glob("*/model.pt"))) == 1
