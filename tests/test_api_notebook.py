"""docs/api_tour.ipynb runs from top to bottom (nbclient) and shows what it promises: a
10-update training, translations with attention, an inline heatmap, scores and links."""

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "docs" / "api_tour.ipynb"


def test_the_api_notebook_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nbclient = pytest.importorskip("nbclient", reason="pip install -e '.[dev]' (nbclient)")
    import nbformat

    # the kernel (a child process) imports this checkout's attnseq, on one thread, on the CPU
    paths = [str(ROOT), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(path for path in paths if path))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    resources = {"metadata": {"path": str(tmp_path)}}
    nbclient.NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources=resources
    ).execute()

    outputs = [out for cell in notebook.cells if cell.cell_type == "code" for out in cell.outputs]
    assert not [out for out in outputs if out.output_type == "error"]
    images = [out for out in outputs if "image/png" in out.get("data", {})]
    assert len(images) == 1  # the heatmap, inline
    printed = "".join(out.get("text", "") for out in outputs)
    assert "attention (" in printed  # each hypothesis's attention shape
    values = [out["data"]["text/plain"] for out in outputs if "text/plain" in out.get("data", {})]
    assert any("PosixPath" in value and "run" in value for value in values)  # train's run dir
