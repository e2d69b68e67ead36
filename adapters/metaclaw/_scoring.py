"""MetaClaw-Bench scoring and feedback, reproducing upstream exactly.

Upstream: aiming-lab/MetaClaw ``benchmark/src/scoring/scoring_cmd.py`` (scores)
and ``benchmark/src/infer/{infer_cmd,prompts}.py`` (the feedback shown to the
agent before its next round). The formulas and message texts are kept verbatim
so that scores here are comparable with scores reported upstream.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "CONTINUE_REMINDER",
    "FEEDBACK_MARKER",
    "FORMAT_ERROR",
    "extract_bbox",
    "file_check_feedback",
    "multi_choice_feedback",
    "multi_choice_metrics",
    "multi_choice_score",
    "normalize_answer",
    "standalone_feedback",
    "with_feedback",
]

CONTINUE_REMINDER = "Keep this in mind as you continue with the next task."
FORMAT_ERROR = (
    r"Note: your previous response did not include a \bbox{X} answer "
    r"(e.g. \bbox{A} for a single option, or \bbox{A,B} for multiple options). " + CONTINUE_REMINDER
)
FEEDBACK_MARKER = "[Previous Feedback]"

# Upstream accepts LaTeX's \boxed{} as an alias and reads only the first match.
_BBOX = re.compile(r"\\(?:bbox|boxed)\{([^}]*)\}")
_LETTER = re.compile(r"[A-Za-z]")


def extract_bbox(text: str | None) -> frozenset[str] | None:
    r"""Letters inside the first ``\bbox{...}``; None when there is none.

    Like upstream, every ASCII letter inside the braces counts, so
    ``\bbox{A and C}`` selects A, N, D and C (a malformed answer is penalised,
    not repaired).
    """
    if not text:
        return None
    match = _BBOX.search(text)
    if match is None:
        return None
    letters = _LETTER.findall(match.group(1))
    if not letters:
        return None
    return frozenset(letter.upper() for letter in letters)


def normalize_answer(answer: Any) -> frozenset[str]:
    """The ground truth (a list like ``["A", "C"]`` or a string) as a letter set."""
    if isinstance(answer, list | tuple):
        return frozenset(letter.upper() for item in answer for letter in _LETTER.findall(str(item)))
    if isinstance(answer, str):
        return frozenset(letter.upper() for letter in _LETTER.findall(answer))
    return frozenset()


def multi_choice_score(selected: Iterable[str] | None, correct: Iterable[str], n_options: int) -> float:
    """``1 - (false positives + false negatives) / number of options``.

    Upstream does not clamp: letters outside the options can push the score
    below zero, and that is reproduced. No answer (or no ground truth) is 0.
    """
    if selected is None:
        return 0.0
    got, truth = set(selected), set(correct)
    if not truth or n_options <= 0:
        return 0.0
    fp = len(got - truth)
    fn = len(truth - got)
    return 1 - (fp + fn) / n_options


def multi_choice_metrics(selected: Iterable[str] | None, correct: Iterable[str]) -> dict[str, float]:
    """Upstream's auxiliary metrics (iou, precision, recall, f1, exact_match)."""
    truth = set(correct)
    if selected is None or not truth:
        return {}
    got = set(selected)
    tp = len(got & truth)
    fp = len(got - truth)
    fn = len(truth - got)
    union = len(got | truth)
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "iou": tp / union if union else 0.0,
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "exact_match": 1.0 if got == truth else 0.0,
    }


def _missed(opt: str, explanation: str) -> str:
    return f"You missed option {opt}: {explanation}"


def _wrong(opt: str, explanation: str) -> str:
    return f"You incorrectly selected option {opt}: {explanation}"


def multi_choice_feedback(
    selected: Iterable[str],
    correct: Iterable[str],
    feedback: Mapping[str, Any],
    *,
    format_valid: bool = True,
) -> str:
    """The feedback upstream prefixes to the next round after a multi_choice round."""
    if not format_valid:
        return FORMAT_ERROR
    got, truth = set(selected), set(correct)
    if got == truth:
        return str(feedback.get("correct", ""))
    options_fb: Mapping[str, Any] = feedback.get("options", {}) or {}
    lines = [_missed(o, str(options_fb.get(o, ""))) for o in sorted(truth - got)]
    lines += [_wrong(o, str(options_fb.get(o, ""))) for o in sorted(got - truth)]
    lines.append(CONTINUE_REMINDER)
    return "\n".join(lines)


def file_check_feedback(passed: bool, feedback: Mapping[str, Any]) -> str:
    text = str(feedback.get("correct" if passed else "incorrect", ""))
    if not passed and text:
        text = f"{text}\n{CONTINUE_REMINDER}"
    return text


def with_feedback(feedback_text: str, question_text: str) -> str:
    return f"{FEEDBACK_MARKER} {feedback_text}\n\n{question_text}"


def standalone_feedback(feedback_text: str) -> str:
    return f"{FEEDBACK_MARKER} {feedback_text}"
