"""Serve the embedded model (or any GGUF) to other tools as an OpenAI-compatible server.

This is `python -m llama_cpp.server` with two things settled: the default model is the project's
Gemma 3 270M (written and verified on first use), and llama.cpp's extra weight buffers are off,
which CPUs advertising AMX without granting it need (plain llama_cpp.server crashes there on the
first completion). Every other argument goes to llama_cpp.server unchanged.

    python -m dsp.serve_lm --port 8765
    dsp run dsp --dataset nq --lm openai-compatible:http://127.0.0.1:8765/v1

Requires the server extra of llama-cpp-python (`pip install "llama-cpp-python[server]"`).
"""

from __future__ import annotations

import runpy
import sys
from typing import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> None:
    from dsp.clients.llamacpp import default_model_path, model_defaults_without_extra_buffers

    args = list(sys.argv[1:] if argv is None else argv)
    extra_buffers = "--extra-buffers" in args
    args = [a for a in args if a != "--extra-buffers"]
    if "--model" not in args:
        args = ["--model", str(default_model_path()), *args]
    if "--chat_format" not in args:
        args += ["--chat_format", "gemma"]  # the llama-2 fallback gives Gemma empty chat replies
    sys.argv = ["llama_cpp.server", *args]
    with model_defaults_without_extra_buffers(not extra_buffers):
        runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
