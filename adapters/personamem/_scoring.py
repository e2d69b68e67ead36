"""Upstream's question prompt and answer check, re-implemented (no upstream code copied).

Upstream (``inference.py`` / ``inference_standalone_openai.py``, ``Evaluation``):

* the question is one user message: ``question + "\\n\\n" + INSTRUCTIONS + "\\n\\n" +
  all_options``, where ``all_options`` is the CSV column's raw text (a list literal);
* ``extract_answer``: the text after the last ``<final_answer>`` (and before a trailing
  ``</final_answer>``) gives a set of option letters: the parenthesised ``(a)``-``(d)``
  found in it, or, when there are none, the bare letters ``a``-``d`` standing as words
  (lowercased first). The answer is right when that set is exactly ``{correct}``;
  if not, the same test is made on the whole reply. Naming two letters is wrong.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["INSTRUCTIONS", "AnswerCheck", "check_answer", "extract_options", "question_prompt"]

INSTRUCTIONS = (
    "Find the most appropriate model response and give your final answer (a), (b), (c), or (d) "
    "after the special token <final_answer>."
)
_FINAL = "<final_answer>"
_FINAL_END = "</final_answer>"
_IN_PARENS = re.compile(r"\(([a-d])\)")
_BARE = re.compile(r"\b([a-d])\b")


def question_prompt(question: str, all_options: str) -> str:
    """The user message upstream sends for one question (``Evaluation.query_llm``)."""
    return f"{question}\n\n{INSTRUCTIONS}\n\n{all_options}"


def extract_options(text: str) -> frozenset[str]:
    """Upstream's ``_extract_only_options``: parenthesised letters, else bare ones."""
    lowered = text.lower()
    in_parens = _IN_PARENS.findall(lowered)
    if in_parens:
        return frozenset(in_parens)
    return frozenset(_BARE.findall(lowered))


@dataclass(frozen=True, slots=True)
class AnswerCheck:
    correct: bool
    predicted_answer: str
    """The reply's text after the last ``<final_answer>`` (upstream's ``predicted_answer``)."""
    predicted_options: frozenset[str]
    """The letters that decided: the final answer's, or the whole reply's when only the
    fallback matched."""
    matched_on: str
    """``final_answer`` (the cut text matched), ``full_response`` (the fallback did) or ``""``."""


def check_answer(reply: str, correct_answer: str) -> AnswerCheck:
    """Upstream's ``extract_answer(predicted, correct)``."""
    correct = correct_answer.lower().strip("() ")
    predicted = reply.strip()
    if _FINAL in predicted:
        predicted = predicted.split(_FINAL)[-1].strip()
    if predicted.endswith(_FINAL_END):
        predicted = predicted[: -len(_FINAL_END)].strip()
    options = extract_options(predicted)
    if options == {correct}:
        return AnswerCheck(True, predicted, options, "final_answer")
    whole = extract_options(reply)
    if whole == {correct}:
        return AnswerCheck(True, predicted, whole, "full_response")
    return AnswerCheck(False, predicted, options, "")
