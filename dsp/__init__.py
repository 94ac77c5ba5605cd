"""dsp: Demonstrate-Search-Predict, retrieval-augmented in-context learning (Khattab et al., 2022).

Programs pass Examples between a frozen LM and a frozen RM:

>>> import dsp
>>> qa = dsp.Template("Answer questions with short factoid answers.",
...                   context=dsp.Type(prefix="Context:\\n", desc="${sources that may contain relevant content}"),
...                   question=dsp.Type(prefix="Question:", desc="${the question to be answered}"),
...                   answer=dsp.Type(prefix="Answer:", desc="${a short factoid answer}", format=dsp.format_answers))
>>> class Reader(dsp.LM):  # a stand-in for a real LM (dsp.LlamaCpp(), dsp.OpenAI(...)): one fixed answer
...     def _request(self, request):
...         return {"choices": [{"text": " William Shakespeare", "finish_reason": "stop"}]}
>>> rm = dsp.BM25([{"title": "Hamlet", "text": "Hamlet is a tragedy by William Shakespeare."},
...                {"title": "Paris", "text": "Paris is the capital of France."}])
>>> train = [dsp.Example(question="What is the capital of France?", answer=["Paris"])]
>>> with dsp.settings.context(lm=Reader("reader"), rm=rm, cache=False):
...     x = dsp.Example(question="Who wrote Hamlet?", demos=dsp.sample(train, k=1))   # DEMONSTRATE
...     x.context = dsp.retrieve(x.question, k=1)                                      # SEARCH
...     x, completions = dsp.generate(qa)(x, stage="qa")                               # PREDICT
>>> x.context, completions.answer
(['Hamlet | Hamlet is a tragedy by William Shakespeare.'], 'William Shakespeare')
"""

from importlib import import_module
from typing import Any

from . import cache, datasets, stats, utils
from .clients import (
    LM, RM, ContextLengthExceeded, CountsTokens, E5Vectorizer, HashingVectorizer, OpenAIVectorizer, Passage, ReplayLM, ReplayRM,
    RequestRejected, RetriesExhausted, RetryPolicy, SamplesInBatch, ScoresOptions, ServiceError, UnrecordedRequest, Usage, Vectorizer,
)
from .clients.specs import lm_from_spec, rm_from_spec
from .compiling import (Compiled, CompileConfig, DemoSpace, Space, compile, load_compiled, register_program,
                        register_programs)
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
    "OpenAI", "GPT3", "LlamaCpp", "BM25", "DenseRM", "ColBERTv2", "ColBERTLocal", "HybridRM", "MilvusRM",
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
    "compile", "CompileConfig", "load_compiled", "Compiled", "Space", "DemoSpace", "register_program", "register_programs",
    # clients from text specs ("llamacpp", "openai:gpt-4o-mini", "bm25:passages.jsonl.gz", ...)
    "lm_from_spec", "rm_from_spec",
    "utils", "datasets", "stats", "__version__",
]

_LAZY_CLIENTS = ("OpenAI", "GPT3", "LlamaCpp", "BM25", "DenseRM", "ColBERTv2", "ColBERTLocal", "HybridRM", "MilvusRM",
                 "ModelFileError")


def __getattr__(name: str) -> Any:
    # Clients with heavy or optional dependencies load on first use (dsp.LlamaCpp, dsp.BM25, ...).
    if name in _LAZY_CLIENTS:
        return getattr(import_module(".clients", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
