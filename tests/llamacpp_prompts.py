"""Prompts the embedded-model tests share (`test_llamacpp.py`, `test_llamacpp_batch.py`)."""

__all__ = ["FRANCE", "LONG_CONTEXT", "LIST_QUESTION"]

FRANCE = (
    "Question: What is the capital of Italy?\nAnswer: Rome\n\n"
    "Question: What is the capital of Germany?\nAnswer: Berlin\n\n"
    "Question: What is the capital of France?\nAnswer:"
)
# Longer than two prompt chunks, so calls really reuse (and must not be perturbed by) earlier KV, and
# batched prompts are reused and copied between streams.
LONG_CONTEXT = " ".join(f"Item {i} of the list is the number {i * 7 % 100}." for i in range(42))
LIST_QUESTION = LONG_CONTEXT + "\nQuestion: What is item 3 of the list?\nAnswer:"
