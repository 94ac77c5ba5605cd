"""Primitives: what a DSP program composes (Demonstrate, Search, Predict)."""

from .demonstrate import all_but, annotate, crossval, knn, sample
from .order import ORDER_STRATEGIES, OrderStrategy, order_passages
from .predict import branch, generate, majority
from .search import fused_retrieval, rank, retrieve, retrieveEnsemble
from .transformation import transformation

__all__ = [
    "generate", "majority", "branch",
    "retrieve", "fused_retrieval", "retrieveEnsemble", "rank", "order_passages", "ORDER_STRATEGIES", "OrderStrategy",
    "annotate", "sample", "knn", "crossval", "all_but",
    "transformation",
]
