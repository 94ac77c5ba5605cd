"""DetectiveQA (Xu et al., 2024, arXiv 2409.02465): multiple-choice questions on detective novels.

The suite loads the benchmark's own layout (`load_detectiveqa`), builds its prompt with the novel cut
to a token budget (`truncated_context`, `question_list`), runs any model with the benchmark's interface
(`DetectiveQAModel`; `LMModel` adapts a dsp LM), aligns replies to option letters and records how
(`align_reply`), scores reasoning with an LM judge (`ReasoningJudge`), and compares the truncation
baseline with a DSP program that retrieves paragraphs (`TruncateProgram`, `RetrieveProgram`).

>>> import dsp
>>> from pathlib import Path
>>> fixture = Path(__file__).parents[2] / "tests" / "fixtures" / "detectiveqa"  # the repository's fixture
>>> from programs.detectiveqa import load_detectiveqa, LMModel, TruncateProgram, run_program
>>> ds = load_detectiveqa(fixture, lang="en", anno_part="human_anno")

Then, with the embedded model (a model load, so shown, not run as a doctest)::

    program = TruncateProgram(ds.novels, LMModel(dsp.LlamaCpp()), q_len=1500, cut="answer")
    print(run_program(program, ds, out="runs/dqa/truncate").table)

From the shell: ``dsp detectiveqa --data-dir ... --lang en --anno-part human_anno --lm llamacpp --q-len 1500``
(`programs.detectiveqa.cli`).
"""

from .align import PATHS, Alignment, align_reply, letter_scores, lenient_letter, parse_json_reply, scores_from_logprobs
from .data import (
    ANNO_PARTS, LETTERS, DetectiveQAError, DetectiveQASet, Novel, Question, annotation_ids, load_detectiveqa,
    read_annotation, read_novel,
)
from .judge import SCALE, JudgeResult, ReasoningJudge, judge_prompt, parse_score
from .model import DetectiveQAModel, HasLM, LMModel, ask_model
from .program import INPUT_FIELDS, DetectiveQAProgram, ParagraphIndex, RetrieveProgram, TruncateProgram
from .prompt import (
    CUTS, INSTRUCTION, REPLY_FORMAT, ApproxTokenizer, Context, question_block, question_list, render_prompt,
    tokenizer_for, truncated_context,
)
from .run import FIELDS, RunResult, accuracy, clue_recall, run_identity, run_program, summarize, summary_markdown

__all__ = [
    # data
    "load_detectiveqa", "read_novel", "read_annotation", "annotation_ids", "DetectiveQASet", "Novel", "Question",
    "DetectiveQAError", "LETTERS", "ANNO_PARTS",
    # prompt and truncation
    "INSTRUCTION", "REPLY_FORMAT", "CUTS", "question_block", "question_list", "render_prompt", "truncated_context",
    "Context", "tokenizer_for", "ApproxTokenizer",
    # models and alignment
    "DetectiveQAModel", "HasLM", "LMModel", "ask_model", "align_reply", "Alignment", "PATHS", "parse_json_reply",
    "lenient_letter", "letter_scores", "scores_from_logprobs",
    # judge
    "ReasoningJudge", "JudgeResult", "judge_prompt", "parse_score", "SCALE",
    # programs and runs
    "DetectiveQAProgram", "TruncateProgram", "RetrieveProgram", "ParagraphIndex", "INPUT_FIELDS", "FIELDS",
    "run_program", "run_identity", "RunResult", "summarize", "summary_markdown", "accuracy", "clue_recall",
]
