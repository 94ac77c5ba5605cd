"""The Lost in the Middle prompt format (Liu et al., 2023), byte-identical to the paper's templates.

`Document`, `get_qa_prompt`, `get_closedbook_qa_prompt` and `get_kv_retrieval_prompt` keep the paper's
names and signatures, so its prompts can be built in any program. The study itself (data by gold
position, runs, scoring, tables and the plot, `dsp litm ...`) is an application of the library and lives
in `programs.litm`.

>>> from dsp.litm import Document, get_qa_prompt
>>> print(get_qa_prompt("who wrote hamlet", [Document(title="Hamlet", text="Hamlet is a tragedy by Shakespeare.")]))
Write a high-quality answer for the given question using only the provided search results (some of which might be irrelevant).
<BLANKLINE>
Document [1](Title: Hamlet) Hamlet is a tragedy by Shakespeare.
<BLANKLINE>
Question: who wrote hamlet
Answer:
"""

from .prompts import (
    PROMPTS_DIR, TEMPLATE_NAMES, Document, format_documents, format_kv_records, get_closedbook_qa_prompt,
    get_kv_retrieval_prompt, get_qa_prompt, load_template,
)

__all__ = [
    "Document", "get_qa_prompt", "get_closedbook_qa_prompt", "get_kv_retrieval_prompt",
    "format_documents", "format_kv_records", "load_template", "PROMPTS_DIR", "TEMPLATE_NAMES",
]
