"""dsp: Demonstrate-Search-Predict, retrieval-augmented in-context learning (Khattab et al., 2022).

Programs pass Examples between a frozen LM and a frozen RM:

>>> import dsp
>>> dsp.settings.configure(lm=dsp.ReplayLM(lm_file), rm=dsp.ReplayRM(rm_file))   # doctest: +SKIP
>>> x = dsp.Example(question="Who wrote Hamlet?", demos=dsp.sample(train, k=3))    # doctest: +SKIP
>>> x.context = dsp.retrieve(x.question, k=3)                                      # doctest: +SKIP
>>> x, completions = dsp.generate(qa_template)(x, stage="qa")                      # doctest: +SKIP
"""

from importlib import import_module
from typing import Any

from . import cache, datasets, stats, utils
from .clients import (
    LM, RM, ContextLengthExceeded, CountsTokens, E5Vectorizer, HashingVectorizer, OpenAIVectorizer, Passage, ReplayLM, ReplayRM,
    RequestRejected, RetriesExhausted, RetryPolicy, SamplesInBatch, ScoresOptions, ServiceError, UnrecordedRequest, Usage, Vectorizer,
)
from .clients.specs import lm_from_spec, rm_from_spec
from .compiling import Compiled, DemoSpace, Space, compile, load_compiled, register_program, register_programs
from .cache import CacheFileError
from .evaluation import (BadRow, EvaluationResult, Fields, FileInUse, IncompleteRun, ResultsWriteError, RunMismatch,
                         compare_runs, evaluate, summarize_seeds)
from .example import Completions, Example
from .metrics import (
    EM, F1, HotPotF1, answer_match, best_subspan_em, has_answer, nF1, normalize_text, passage_match,
)
from .primitives import (
    ORDER_STRATEGIES, OrderStrategy, all_but, annotate, branch, crossval, fused_retrieval, generate, knn, majority, order_passages,
    rank, retrieve, retrieveEnsemble, sample, transformation,
)
from .settings import settings
from .template import Template, Type, format_answers, passages2text

__version__ = "0.1.0"

__all__ = [
    # values
    "Example", "Completions", "Type", "Template", "passages2text", "format_answers",
    # ambient state and cache
    "settings", "cache",
    # clients
    "LM", "RM", "Passage", "Usage", "ReplayLM", "ReplayRM", "UnrecordedRequest",
    "OpenAI", "GPT3", "LlamaCpp", "BM25", "DenseRM", "ColBERTv2", "ColBERTLocal", "HybridRM",
    "ModelFileError", "ContextLengthExceeded", "CountsTokens", "ScoresOptions", "SamplesInBatch",
    "Vectorizer", "HashingVectorizer", "E5Vectorizer", "OpenAIVectorizer",
    "RetryPolicy", "ServiceError", "RetriesExhausted", "RequestRejected",
    # primitives
    "generate", "majority", "branch", "retrieve", "fused_retrieval", "retrieveEnsemble", "rank",
    "annotate", "sample", "knn", "crossval", "all_but", "transformation", "order_passages", "ORDER_STRATEGIES", "OrderStrategy",
    # metrics
    "normalize_text", "EM", "F1", "HotPotF1", "nF1", "best_subspan_em", "has_answer", "passage_match", "answer_match",
    # evaluation
    "evaluate", "EvaluationResult", "summarize_seeds", "Fields", "RunMismatch", "compare_runs", "IncompleteRun",
    "FileInUse", "BadRow", "ResultsWriteError", "CacheFileError",
    # compiling: programs tuned by search on their training data
    "compile", "load_compiled", "Compiled", "Space", "DemoSpace", "register_program", "register_programs",
    # clients from text specs ("llamacpp", "openai:gpt-4o-mini", "bm25:passages.jsonl.gz", ...)
    "lm_from_spec", "rm_from_spec",
    "utils", "datasets", "stats", "__version__",
]

_LAZY_CLIENTS = ("OpenAI", "GPT3", "LlamaCpp", "BM25", "DenseRM", "ColBERTv2", "ColBERTLocal", "HybridRM", "ModelFileError")


def __getattr__(name: str) -> Any:
    # Clients with heavy or optional dependencies load on first use (dsp.LlamaCpp, dsp.BM25, ...).
    if name in _LAZY_CLIENTS:
        return getattr(import_module(".clients", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
