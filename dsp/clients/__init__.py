"""Clients: everything that talks to a language model, an index or an embedding model."""

from .lm import LM, Usage
from .replay import ReplayLM, ReplayRM, UnrecordedRequest
from .rm import RM, Passage
from .vectorizers import HashingVectorizer, Vectorizer

__all__ = ["LM", "Usage", "RM", "Passage", "ReplayLM", "ReplayRM", "UnrecordedRequest", "Vectorizer", "HashingVectorizer"]
