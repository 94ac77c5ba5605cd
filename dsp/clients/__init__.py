"""Clients: everything that talks to a language model, an index or an embedding model.

Heavy backends load lazily: importing dsp never imports llama.cpp, bm25s, torch or colbert-ai; the
first use of a client class does.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from .lm import LM, ContextLengthExceeded, CountsTokens, SamplesInBatch, ScoresOptions, Usage
from .replay import ReplayLM, ReplayRM, UnrecordedRequest
from .retry import RequestRejected, RetriesExhausted, RetryPolicy, ServiceError
from .rm import RM, Passage
from .vectorizers import E5Vectorizer, HashingVectorizer, OpenAIVectorizer, Vectorizer

__all__ = [
    "LM", "Usage", "ContextLengthExceeded", "CountsTokens", "ScoresOptions", "SamplesInBatch", "RM", "Passage", "ReplayLM", "ReplayRM", "UnrecordedRequest",
    "Vectorizer", "HashingVectorizer", "E5Vectorizer", "OpenAIVectorizer",
    "RetryPolicy", "ServiceError", "RetriesExhausted", "RequestRejected",
    "OpenAI", "GPT3", "LlamaCpp", "BM25", "DenseRM", "ColBERTv2", "ColBERTLocal", "HybridRM", "MilvusRM", "ModelFileError",
]

# name -> module of the clients whose dependencies are heavy or optional
_LAZY = {
    "OpenAI": "openai", "GPT3": "openai", "LlamaCpp": "llamacpp", "BM25": "bm25", "DenseRM": "dense",
    "ColBERTv2": "colbertv2", "ColBERTLocal": "colbert_local", "HybridRM": "hybrid", "MilvusRM": "milvus",
    "ModelFileError": "llamacpp",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
