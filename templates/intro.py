"""The templates of the DSP v1 intro notebook (exact strings: they decide the prompts byte for byte)."""

import dsp

__all__ = [
    "QA_INSTRUCTIONS", "SEARCH_INSTRUCTIONS", "Question", "Answer", "Context", "Rationale", "SearchRationale", "CondSearchRationale", "SearchQuery",
    "qa_template", "qa_template_with_passages", "qa_template_with_CoT", "rewrite_template", "hop_template",
]

QA_INSTRUCTIONS = "Answer questions with short factoid answers."
SEARCH_INSTRUCTIONS = "Write a search query that will help answer a complex question."

Question = dsp.Type(prefix="Question:", desc="${the question to be answered}")
Answer = dsp.Type(prefix="Answer:", desc="${a short factoid answer, often between 1 and 5 words}",
                  format=dsp.format_answers)
Context = dsp.Type(prefix="Context:\n", desc="${sources that may contain relevant content}",
                   format=dsp.passages2text)
Rationale = dsp.Type(
    prefix="Rationale: Let's think step by step.",
    desc="${a step-by-step deduction that identifies the correct response, which will be provided below}",
)
SearchRationale = dsp.Type(
    prefix="Rationale: Let's think step by step. To answer this question, we first need to find out",
    desc="${the missing information}",
)
CondSearchRationale = dsp.Type(
    prefix="Rationale: Let's think step by step. Based on the context, we have learned the following.",
    desc="${information from the context that provides useful clues}",
)
SearchQuery = dsp.Type(prefix="Search Query:", desc="${a simple question for seeking the missing information}")

qa_template = dsp.Template(instructions=QA_INSTRUCTIONS, question=Question, answer=Answer)
qa_template_with_passages = dsp.Template(instructions=QA_INSTRUCTIONS, context=Context(), question=Question(),
                                         answer=Answer())
qa_template_with_CoT = dsp.Template(instructions=QA_INSTRUCTIONS, context=Context(), question=Question(),
                                    rationale=Rationale(), answer=Answer())
rewrite_template = dsp.Template(instructions=SEARCH_INSTRUCTIONS, question=Question(),
                                rationale=SearchRationale, query=SearchQuery)
hop_template = dsp.Template(instructions=SEARCH_INSTRUCTIONS, context=Context(), question=Question(),
                            rationale=CondSearchRationale, query=SearchQuery())
