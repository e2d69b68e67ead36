"""LongMemEval's answer check, reproduced from upstream.

Upstream: xiaowu0162/LongMemEval ``src/evaluation/evaluate_qa.py``,
``get_anscheck_prompt(task, question, answer, response, abstention)``; the
label is ``'yes' in judge_reply.lower()``. Templates are verbatim (including
their spacing) so verdicts are comparable with published numbers.
"""

from __future__ import annotations

import re
import string

from sclated.errors import InvalidArgument

__all__ = ["QUESTION_TYPES", "anscheck_prompt", "contains_match", "exact_match", "judge_label"]

QUESTION_TYPES = (
    "single-session-user",
    "single-session-assistant",
    "single-session-preference",
    "temporal-reasoning",
    "knowledge-update",
    "multi-session",
)

_BASIC = (
    "I will give you a question, a correct answer, and a response from a model. Please answer yes "
    "if the response contains the correct answer. Otherwise, answer no. If the response is "
    "equivalent to the correct answer or contains all the intermediate steps to get the correct "
    "answer, you should also answer yes. If the response only contains a subset of the information "
    "required by the answer, answer no. \n\nQuestion: {}\n\nCorrect Answer: {}\n\nModel Response: "
    "{}\n\nIs the model response correct? Answer yes or no only."
)
_TEMPORAL = (
    "I will give you a question, a correct answer, and a response from a model. Please answer yes "
    "if the response contains the correct answer. Otherwise, answer no. If the response is "
    "equivalent to the correct answer or contains all the intermediate steps to get the correct "
    "answer, you should also answer yes. If the response only contains a subset of the information "
    "required by the answer, answer no. In addition, do not penalize off-by-one errors for the "
    "number of days. If the question asks for the number of days/weeks/months, etc., and the model "
    "makes off-by-one errors (e.g., predicting 19 days when the answer is 18), the model's "
    "response is still correct. \n\nQuestion: {}\n\nCorrect Answer: {}\n\nModel Response: {}"
    "\n\nIs the model response correct? Answer yes or no only."
)
_KNOWLEDGE_UPDATE = (
    "I will give you a question, a correct answer, and a response from a model. Please answer yes "
    "if the response contains the correct answer. Otherwise, answer no. If the response contains "
    "some previous information along with an updated answer, the response should be considered as "
    "correct as long as the updated answer is the required answer.\n\nQuestion: {}\n\nCorrect "
    "Answer: {}\n\nModel Response: {}\n\nIs the model response correct? Answer yes or no only."
)
_PREFERENCE = (
    "I will give you a question, a rubric for desired personalized response, and a response from a "
    "model. Please answer yes if the response satisfies the desired response. Otherwise, answer "
    "no. The model does not need to reflect all the points in the rubric. The response is correct "
    "as long as it recalls and utilizes the user's personal information correctly.\n\nQuestion: {}"
    "\n\nRubric: {}\n\nModel Response: {}\n\nIs the model response correct? Answer yes or no only."
)
_ABSTENTION = (
    "I will give you an unanswerable question, an explanation, and a response from a model. Please "
    "answer yes if the model correctly identifies the question as unanswerable. The model could "
    "say that the information is incomplete, or some other information is given but the asked "
    "information is not.\n\nQuestion: {}\n\nExplanation: {}\n\nModel Response: {}\n\nDoes the "
    "model correctly identify the question as unanswerable? Answer yes or no only."
)


def anscheck_prompt(task: str, question: str, answer: object, response: str, abstention: bool = False) -> str:
    """The judge prompt for one answer, exactly as upstream builds it."""
    if abstention:
        return _ABSTENTION.format(question, answer, response)
    if task in ("single-session-user", "single-session-assistant", "multi-session"):
        return _BASIC.format(question, answer, response)
    if task == "temporal-reasoning":
        return _TEMPORAL.format(question, answer, response)
    if task == "knowledge-update":
        return _KNOWLEDGE_UPDATE.format(question, answer, response)
    if task == "single-session-preference":
        return _PREFERENCE.format(question, answer, response)
    # Upstream raises NotImplementedError here; in sclate it is the data that is wrong.
    raise InvalidArgument(f"LongMemEval has no judge prompt for question type {task!r}", field="question_type")


def judge_label(judge_reply: str) -> bool:
    """Upstream's reading of the judge: any ``yes`` in the reply."""
    return "yes" in judge_reply.lower()


_PUNCT = str.maketrans("", "", string.punctuation)


def _normalize(text: str) -> str:
    # SQuAD-style normalisation: case, punctuation, articles and spacing do not matter.
    text = text.lower().translate(_PUNCT)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def exact_match(answer: object, response: str) -> bool:
    return _normalize(str(answer)) == _normalize(response)


def contains_match(answer: object, response: str) -> bool:
    needle = _normalize(str(answer))
    return bool(needle) and needle in _normalize(response)
