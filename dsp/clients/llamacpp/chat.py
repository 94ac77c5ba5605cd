"""Chat prompts: messages rendered by the model's own chat template, as llama-cpp-python renders them.

`LlamaCpp` with ``prompt_format="chat"`` sends each prompt as one user message; `ChatTemplate` turns
the messages into the prompt text that the model then continues (up to the start of the assistant's
reply). The template is the one in the GGUF file (``tokenizer.chat_template``), rendered by
llama-cpp-python's own Jinja2 formatter, built as `llama_cpp.Llama` builds its default chat handler:
the text is the one ``create_chat_completion`` (and llama_cpp.server without ``--chat_format``)
tokenizes, so a chat served by `dsp.serve_lm` and one run in-process see the same tokens.

For example, with SmolLM2 loaded as `native` (so not run as a doctest)::

    template = ChatTemplate(native)
    template.render([{"role": "user", "content": "Hi"}])[0][-36:]
    # '<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n'
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from .native import NativeModel, import_llama_cpp

__all__ = ["ChatTemplate"]


class ChatTemplate:
    """The chat template of a loaded model; `render` gives (prompt text, add BOS?) for messages.

    The text holds the template's control tokens as markup (``<|im_start|>``...): tokenize it with
    ``special=True``. A ValueError names the file when it has no template.

    For example, ``ChatTemplate(native).render([{"role": "user", "content": "Hi"}])[1]`` is ``False``
    for SmolLM2.
    """

    def __init__(self, native: NativeModel, name: str = "the model") -> None:
        template = native.chat_template
        if template is None:
            raise ValueError(f"{name} has no chat template (tokenizer.chat_template) in its metadata; "
                             f"use prompt_format='completion'")
        import_llama_cpp()  # the clear error when llama-cpp-python is missing
        from llama_cpp import llama_chat_format

        self._formatter: Any = llama_chat_format.Jinja2ChatFormatter(
            template=template, eos_token=native.token_text(native.eos), bos_token=native.token_text(native.bos),
            stop_token_ids=[native.eos])

    def render(self, messages: Sequence[Mapping[str, str]]) -> tuple[str, bool]:
        """(prompt text up to the assistant's reply, whether a BOS token goes before it).

        For example, ``template.render([{"role": "user", "content": "Hi"}])`` is, for SmolLM2,
        ``('<|im_start|>system\\n...<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n', False)``.
        """
        result = self._formatter(messages=[dict(message) for message in messages])
        # added_special: the template wrote the BOS itself (if any), so tokenizing must not add one.
        return result.prompt, not result.added_special
