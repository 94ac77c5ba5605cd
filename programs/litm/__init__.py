"""Lost in the Middle (Liu et al., 2023): how language models use long contexts, on any dsp LM.

The paper's prompts (byte-identical, `get_qa_prompt`, `get_closedbook_qa_prompt`,
`get_kv_retrieval_prompt`, `Document`), its data generation (multi-document QA with the gold passage
at a chosen index among retrieved distractors without the answer; key-value retrieval), its scoring
(best subspan EM on the first line of the answer; KV accuracy), per-position tables and the
accuracy-vs-position plot, plus `order_passages` to put the most relevant passages at both ends.

>>> from programs.litm import Document, get_qa_prompt
>>> print(get_qa_prompt("who wrote hamlet", [Document(title="Hamlet", text="Hamlet is a tragedy by Shakespeare.")]))
Write a high-quality answer for the given question using only the provided search results (some of which might be irrelevant).
<BLANKLINE>
Document [1](Title: Hamlet) Hamlet is a tragedy by Shakespeare.
<BLANKLINE>
Question: who wrote hamlet
Answer:

The prompt builders are the library's (`dsp.litm`), so are the statistics (`dsp.stats`); everything else
here is built on the public API: `data` (the paper's data), `runs` (settings as prompts), `scoring` (the
paper's metrics), `execute` (running a setting through `dsp.evaluate`), `summary` (per-position cells,
paired tests), `report` (tables and the plot), `cli` (``dsp litm``). From the shell:
``dsp litm qa --total-docs 20 --gold-positions 0,4,9,14,19 --n 200`` (see `programs.litm.cli`).
"""

from dsp import ORDER_STRATEGIES, order_passages
from dsp.litm import (
    PROMPTS_DIR, TEMPLATE_NAMES, Document, format_documents, format_kv_records, get_closedbook_qa_prompt,
    get_kv_retrieval_prompt, get_qa_prompt, load_template,
)

from .data import (
    KV_FILE_PATTERN, QA_FILE_PATTERN, evenly_spaced_positions, gold_chunk, kv_records_with_gold_at, make_kv_records,
    make_qa_data, make_qa_example, randomize_distractors, read_kv_records, read_qa_records, relevance_ranked,
    retrieve_candidates, write_records,
)
from .execute import DEFAULT_MAX_TOKENS, check_prompts_fit, first_error, results_path, run_setting
from .report import PlotUnavailable, load_summaries, plot_positions, results_markdown
from .runs import Run, closedbook_run, kv_run, oracle_run, qa_run, qa_setting_name, reorder_run
from .scoring import first_line, kv_score, qa_score
from .summary import question_id, summarize

__all__ = [
    # prompts (the paper's names and signatures)
    "Document", "get_qa_prompt", "get_closedbook_qa_prompt", "get_kv_retrieval_prompt",
    "format_documents", "format_kv_records", "load_template", "PROMPTS_DIR", "TEMPLATE_NAMES",
    # data
    "read_qa_records", "read_kv_records", "write_records", "gold_chunk", "retrieve_candidates", "make_qa_example",
    "make_qa_data", "randomize_distractors", "relevance_ranked", "make_kv_records", "kv_records_with_gold_at",
    "evenly_spaced_positions", "QA_FILE_PATTERN", "KV_FILE_PATTERN",
    # scoring (scoring.py), runs (runs.py), running (execute.py), summaries (summary.py), reports (report.py);
    # intervals and paired tests are dsp.stats'
    "qa_score", "kv_score", "first_line", "Run", "closedbook_run", "oracle_run", "qa_run", "kv_run", "reorder_run",
    "qa_setting_name", "check_prompts_fit", "run_setting", "results_path", "first_error", "DEFAULT_MAX_TOKENS",
    "summarize", "question_id", "load_summaries", "results_markdown", "plot_positions", "PlotUnavailable",
    # beyond the paper
    "order_passages", "ORDER_STRATEGIES",
]
