"""Templates of the bundled open-domain, multi-hop and conversational QA programs.

The field types are the DSP v1 intro notebook's (same prefixes and descriptions), so demonstrations
annotated by one program read naturally in another.
"""

import dsp
from templates.intro import (
    QA_INSTRUCTIONS, SEARCH_INSTRUCTIONS, Answer, CondSearchRationale, Context, Question, Rationale, SearchQuery,
    SearchRationale,
)

__all__ = [
    "qa", "qa_with_context", "qa_with_cot", "rewrite", "hop", "summarize",
    "conv_qa", "conv_qa_with_context", "conv_rewrite", "History",
    "SELF_ASK_INSTRUCTIONS", "SELF_ASK_DEMOS",
]

qa = dsp.Template(QA_INSTRUCTIONS, question=Question(), answer=Answer())
qa_with_context = dsp.Template(QA_INSTRUCTIONS, context=Context(), question=Question(), answer=Answer())
qa_with_cot = dsp.Template(QA_INSTRUCTIONS, context=Context(), question=Question(), rationale=Rationale(),
                           answer=Answer())

rewrite = dsp.Template(SEARCH_INSTRUCTIONS, question=Question(), rationale=SearchRationale(), query=SearchQuery())
hop = dsp.Template(SEARCH_INSTRUCTIONS, context=Context(), question=Question(), rationale=CondSearchRationale(),
                   query=SearchQuery())

# Multi-hop: what a hop learned, carried to the next hop and to the answer as a short summary.
Summary = dsp.Type(prefix="Summary:", desc="${the facts from the context that help answer the question, in one or two sentences}")
summarize = dsp.Template("Summarize the facts in the context that help answer the question.",
                         context=Context(), question=Question(), summary=Summary)

# Conversational QA: the earlier turns as one text, most recent last.
def _lines(text: str) -> str:
    """Keep one turn per line (the default formatter would join the turns into one line)."""
    return "\n".join(" ".join(line.split()) for line in text.strip().splitlines() if line.strip())


History = dsp.Type(prefix="Conversation:\n", desc="${the earlier turns of the conversation}", format=_lines)
conv_qa = dsp.Template("Answer the user's last question in the conversation with a short, informative answer.",
                       history=History, question=Question(), answer=Answer(desc="${a short answer, often one sentence}"))
conv_qa_with_context = dsp.Template(
    "Answer the user's last question in the conversation with a short, informative answer.",
    context=Context(), history=History, question=Question(), answer=Answer(desc="${a short answer, often one sentence}"))
conv_rewrite = dsp.Template(
    "Rewrite the user's last question as a stand-alone search query that needs no conversation to be understood.",
    history=History, question=Question(), query=SearchQuery(desc="${the question rewritten to stand alone}"))

# Self-ask (Press et al., 2022): the model decomposes the question into follow-ups; our RM answers them.
SELF_ASK_INSTRUCTIONS = "Answer the question. Ask follow-up questions when they help."
SELF_ASK_DEMOS = """Question: Which river is longer, the Danube or the Thames?
Are follow up questions needed here: Yes.
Follow up: How long is the Danube?
Intermediate answer: The Danube is about 2,850 km long.
Follow up: How long is the Thames?
Intermediate answer: The Thames is about 346 km long.
So the final answer is: the Danube

Question: In what country was the composer of the opera Carmen born?
Are follow up questions needed here: Yes.
Follow up: Who composed the opera Carmen?
Intermediate answer: Georges Bizet.
Follow up: Where was Georges Bizet born?
Intermediate answer: Paris, France.
So the final answer is: France

Question: What is the capital of Japan?
Are follow up questions needed here: No.
So the final answer is: Tokyo"""
