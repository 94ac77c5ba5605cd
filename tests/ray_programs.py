"""Programs for the Ray backend tests: importable by the workers (tests/ is on their PYTHONPATH).

>>> callable(three_calls)
True
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import dsp

__all__ = ["three_calls", "gated_three_calls"]


def three_calls(question: str) -> str:
    """Three LM calls in sequence, each prompt built on the previous answer (a small pipeline)."""
    answer = ""
    for step in range(3):
        answer = dsp.settings.lm(f"Step {step}. Question: {question}\nSo far:{answer}\nAnswer:")[0].strip()
    return answer


def gated_three_calls(question: str, gate: str, hold: str = "question 10") -> str:
    """`three_calls`, except that the example `hold` announces its worker's PID in `gate`/pid and then
    waits for `gate`/open to exist: the test can kill that worker while it is certainly mid-task."""
    if question == hold:
        gate_dir = Path(gate)
        marker = gate_dir / "pid"
        if not (gate_dir / "open").exists():
            # written whole, then renamed into place: the test polls for the file and must never read it half-written
            staged = gate_dir / f"pid.{os.getpid()}"
            staged.write_text(str(os.getpid()))
            staged.replace(marker)
            while not (gate_dir / "open").exists():
                time.sleep(0.01)
    return three_calls(question)
