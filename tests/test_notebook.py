"""notebooks/intro.ipynb runs top to bottom (replay, then live on the embedded model) and is stored without outputs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "intro.ipynb"
NEEDS_DEV = 'needs the [dev] extra: pip install -e ".[dev]"'


def test_the_notebook_is_stored_without_outputs():
    nbformat = pytest.importorskip("nbformat", reason=NEEDS_DEV)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)


def test_the_notebook_executes_top_to_bottom(data_dir, tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat", reason=NEEDS_DEV)
    NotebookClient = pytest.importorskip("nbclient", reason=NEEDS_DEV).NotebookClient
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # the kernel inherits the environment: the data, a private cache, the project on its path
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(NOTEBOOK.parent.parent), os.environ.get("PYTHONPATH", "")]))
    # As a newcomer runs it: DSP_DATA_DIR relative to the repository root (the README's
    # DSP_DATA_DIR=../shared/data), the kernel in notebooks/, where that relative path means nothing.
    monkeypatch.setenv("DSP_DATA_DIR", os.path.relpath(data_dir.resolve(), NOTEBOOK.parent.parent))
    client = NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "Answered 11 / 13 (84.6%) correctly." in text
    assert "prediction:" in text


def test_a_relative_data_dir_resolves_from_the_repository_root(data_dir, monkeypatch):
    from dsp.datasets import data_dir as resolve

    relative = os.path.relpath(data_dir.resolve(), NOTEBOOK.parent.parent)
    monkeypatch.setenv("DSP_DATA_DIR", relative)
    monkeypatch.chdir(NOTEBOOK.parent)  # notebooks/: the relative path does not exist from here
    assert resolve() == data_dir.resolve()
    assert os.environ["DSP_DATA_DIR"] == str(data_dir.resolve())  # written back, absolute, for subprocesses
