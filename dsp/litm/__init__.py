"""Lost in the Middle (Liu et al., 2023): how language models use long contexts, on any dsp LM.

The paper's prompts (byte-identical, `get_qa_prompt`, `get_closedbook_qa_prompt`,
`get_kv_retrieval_prompt`, `Document`), its data generation (multi-document QA with the gold passage
at a chosen index among retrieved distractors without the answer; key-value retrieval), its scoring
(best subspan EM on the first line of the answer; KV accuracy), per-position tables and the
accuracy-vs-position plot, plus `order_passages` to put the most relevant passages at both ends.

>>> from dsp.litm import Document, get_qa_prompt
>>> print(get_qa_prompt("who wrote hamlet", [Document(title="Hamlet", text="Hamlet is a tragedy by Shakespeare.")]))
Write a high-quality answer for the given question using only the provided search results (some of which might be irrelevant).
<BLANKLINE>
Document [1](Title: Hamlet) Hamlet is a tragedy by Shakespeare.
<BLANKLINE>
Question: who wrote hamlet
Answer:

From the shell: ``dsp litm qa --total-docs 20 --gold-positions 0,4,9,14,19 --limit 200`` (see `dsp.litm.cli`).
"""

from ..primitives.order import ORDER_STRATEGIES, order_passages
from .data import (
    KV_FILE_PATTERN, QA_FILE_PATTERN, evenly_spaced_positions, gold_chunk, kv_records_with_gold_at, make_kv_records,
    make_qa_data, make_qa_example, randomize_distractors, read_kv_records, read_qa_records, relevance_ranked,
    retrieve_candidates, write_records,
)
from .evaluate import (
    PromptTooLongError, Run, check_prompts_fit, closedbook_run, first_line, kv_run, kv_score, load_summaries,
    mcnemar_exact, oracle_run, plot_positions, qa_run, qa_score, reorder_run, results_markdown, run_setting, summarize,
    wilson_interval,
)
from .prompts import (
    PROMPTS_DIR, TEMPLATE_NAMES, Document, format_documents, format_kv_records, get_closedbook_qa_prompt,
    get_kv_retrieval_prompt, get_qa_prompt, load_template,
)

__all__ = [
    # prompts (the paper's names and signatures)
    "Document", "get_qa_prompt", "get_closedbook_qa_prompt", "get_kv_retrieval_prompt",
    "format_documents", "format_kv_records", "load_template", "PROMPTS_DIR", "TEMPLATE_NAMES",
    # data
    "read_qa_records", "read_kv_records", "write_records", "gold_chunk", "retrieve_candidates", "make_qa_example",
    "make_qa_data", "randomize_distractors", "relevance_ranked", "make_kv_records", "kv_records_with_gold_at",
    "evenly_spaced_positions", "QA_FILE_PATTERN", "KV_FILE_PATTERN",
    # scoring, runs, reports
    "qa_score", "kv_score", "first_line", "Run", "closedbook_run", "oracle_run", "qa_run", "kv_run", "reorder_run",
    "check_prompts_fit", "PromptTooLongError", "run_setting", "summarize", "wilson_interval", "mcnemar_exact",
    "load_summaries", "results_markdown", "plot_positions",
    # beyond the paper
    "order_passages", "ORDER_STRATEGIES",
]
