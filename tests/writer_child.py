"""A child process for the concurrent-writer tests: one `dsp.evaluate` (or `dsp.compile`) into a given file.

    python tests/writer_child.py evaluate OUT K DELAY    # 6 toy examples, option k=K, DELAY s per example
    python tests/writer_child.py compile OUT DELAY

Prints "ok" at the end, or the one-line error of a refused writer ("FileInUse: ...") and exits 3.
"""

from __future__ import annotations

import sys
import time

import dsp

EXAMPLES = [dsp.Example(question=f"q{i}", answer=f"a{i}") for i in range(6)]


def _program(delay: float):
    def program(question: str, k: int = 1) -> str:
        time.sleep(delay)
        return f"a{question[1:]}"
    return program


DELAY = [0.0]


def compiled_program(question: str, train=None, demos=None, k: int = 1) -> dsp.Example:
    time.sleep(DELAY[0])
    return dsp.Example(question=question, answer=f"a{question[1:]}")


def main() -> int:
    kind, out = sys.argv[1], sys.argv[2]
    try:
        if kind == "evaluate":
            k, delay = int(sys.argv[3]), float(sys.argv[4])
            dsp.evaluate(_program(delay), EXAMPLES, dsp.EM, out=out, run={"task": "toy", "options": {"k": k}},
                         seed=0, progress=False, display=False)
        else:
            delay = float(sys.argv[3])
            train = [dsp.Example(question=f"q{i}", answer=f"a{i}") for i in range(30)]

            DELAY[0] = delay
            config = dsp.CompileConfig(space=dsp.Space(options={"k": [1, 2]}), candidates=2, val=10, progress=False)
            dsp.compile(compiled_program, train, dsp.EM, config, out=out)
    except dsp.FileInUse as error:
        print(f"FileInUse: {error}", flush=True)
        return 3
    print("ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
