"""Scripted test clients: an LM answering from a function, an RM over a fixed passage list."""

from __future__ import annotations

from typing import Any, Callable

from dsp.clients.lm import LM, CountsTokens
from dsp.clients.rm import RM

__all__ = ["ScriptedLM", "ListRM", "WordCountingLM"]


class ScriptedLM(LM):
    """An LM whose completions come from `respond(prompt, request) -> list[str] | list[dict]`."""

    provider = "scripted"

    def __init__(self, respond: Callable[[str, dict], list[Any]], model: str = "scripted", **params: Any) -> None:
        super().__init__(model, **params)
        self.respond = respond
        self.prompts: list[str] = []

    def _request(self, request: dict) -> dict:
        self.prompts.append(request["prompt"])
        out = self.respond(request["prompt"], request)
        choices = [c if isinstance(c, dict) else {"text": c, "finish_reason": "stop"} for c in out]
        return {"choices": choices, "usage": {"prompt_tokens": len(request["prompt"].split()), "completion_tokens": 1}}


class ListRM(RM):
    """An RM over a fixed list of (text, score) or dict passages: returns the top k by score."""

    provider = "list"

    def __init__(self, passages: list[Any], name: str = "list") -> None:
        super().__init__()
        self.passages = [p if isinstance(p, dict) else {"text": p[0], "score": p[1]} for p in passages]
        self.name = name
        self.queries: list[tuple[str, int]] = []

    def cache_identity(self) -> dict:
        return {**super().cache_identity(), "name": self.name}

    def _search(self, query: str, k: int, **params: Any) -> list[dict]:
        self.queries.append((query, k))
        return sorted(self.passages, key=lambda p: -p["score"])[:k]


class WordCountingLM(ScriptedLM, CountsTokens):
    """A scripted LM that declares its own tokenizer: one token per word, a context of `n_ctx` words."""

    n_ctx = 4096

    def tokenize(self, text: str, add_bos: bool = False) -> list[int]:
        return list(range(len(text.split())))

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def truncate(self, text: str, max_tokens: int, keep: str = "start", separator: str = "\n...\n") -> str:
        words = text.split()
        return " ".join(words[:max_tokens] if keep == "start" else words[len(words) - max_tokens:])
