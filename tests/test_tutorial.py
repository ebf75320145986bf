"""The tutorial notebook (notebooks/tutorial.ipynb) runs top to bottom in a fresh kernel (issue #44).

Its checks are the ``assert``s in its own cells: a cell that fails stops the run here with that cell's
error. The notebook is kept without outputs, so nothing it shows was stored: all of it is this run's."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient

TUTORIAL = Path(__file__).parents[1] / "notebooks" / "tutorial.ipynb"


def test_the_tutorial_runs_top_to_bottom_in_a_fresh_kernel(tmp_path):
    notebook = nbformat.read(TUTORIAL, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and not any(cell.outputs for cell in code), "the notebook is kept without outputs"
    assert sum(cell.source.count("assert ") for cell in code) >= 10
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    shown = {i: [output for output in cell.outputs] for i, cell in enumerate(code)}
    run = next(i for i, cell in enumerate(code) if cell.source.startswith("sweep = causalab.run("))
    kinds = [set(output.get("data", {})) for output in shown[run]]
    assert any("application/vnd.jupyter.widget-view+json" in k for k in kinds)  # the progress bar, a widget
    (page,) = [output["data"]["text/html"] for output in shown[run] if "text/html" in output.get("data", {})]
    assert page.startswith("<iframe srcdoc=") and "What was done" in page  # the report page, inline
    assert not any(output.output_type == "error" for outputs in shown.values() for output in outputs)
