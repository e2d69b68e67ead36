#!/usr/bin/env python3
"""Write the PersonaMem ``tiny`` fixture: ``questions_tiny.csv`` and ``shared_contexts_tiny.jsonl``.

The text is the sclate team's own invention (docs/personamem-notes.md §6, plus one
question); nothing comes from PersonaMem. The files have the release's schema, and the
ids and derived columns are computed here so they stay in sync with the messages:

* ``shared_context_id``: upstream's sha256 over ``" ".join(map(str, messages))``;
* ``context_length_in_letters``: ``len("".join(contents of context[:end]))``, as upstream;
* token columns: ``ceil(letters / 4)`` stand-ins (upstream counts gpt-4o tiktoken tokens);
* ``all_options``: ``str()`` of the option list, as upstream's CSV writer leaves it.

Usage: ``python scripts/personamem_fixture.py [--out DIR]`` (default: the adapter's
``scenarios/`` folder). A unit test checks the committed files equal what this writes.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import math
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "adapters" / "personamem" / "scenarios"
SIZE = "tiny"
COLUMNS = (
    "persona_id",
    "question_id",
    "question_type",
    "topic",
    "context_length_in_tokens",
    "context_length_in_letters",
    "distance_to_ref_in_blocks",
    "distance_to_ref_in_tokens",
    "num_irrelevant_tokens",
    "distance_to_ref_proportion_in_context",
    "user_question_or_message",
    "correct_answer",
    "all_options",
    "shared_context_id",
    "end_index_in_shared_context",
)

MIRA = (
    "Current user persona: Name: Mira Okafor\nGender Identity: Female\nRacial Identity: Black\n\n"
    "Mira Okafor is a 29-year-old civil engineer who cycles to work and cooks most evenings."
)
TOMAS = (
    "Current user persona: Name: Tomas Lindqvist\nGender Identity: Male\nRacial Identity: White\n\n"
    "Tomas Lindqvist is a 41-year-old high-school music teacher who plays in a weekend jazz trio."
)


def _m(role: str, content: str) -> dict[str, str]:
    return {"role": role, "content": content}


CONTEXTS: dict[str, list[dict[str, str]]] = {
    # Persona 0: block 0 food (spicy), block 1 filler then the change (mild, with a reason),
    # block 2 travel.
    "A": [
        _m("system", MIRA),
        _m("user", "User: I've been cooking a lot of very spicy Sichuan dishes lately; the hotter the better."),
        _m("assistant", "Assistant: Great! Mapo tofu and dan dan noodles are classic fiery options to try next."),
        _m("user", "User: I also joined a Saturday cooking club at the community centre."),
        _m("assistant", "Assistant: A cooking club is a nice way to pick up new techniques and meet people."),
        _m("system", MIRA),
        _m("user", "How many bones are in the adult human hand?"),
        _m("assistant", "An adult human hand has 27 bones."),
        _m(
            "user",
            "User: My doctor told me to cut out spicy food because of acid reflux, so now I prefer mild "
            "Japanese dishes.",
        ),
        _m("assistant", "Assistant: Sorry to hear that. Miso-glazed salmon and chawanmushi are gentle and flavourful."),
        _m("system", MIRA),
        _m("user", "User: I'm planning a cycling trip along the Danube next spring."),
        _m(
            "assistant",
            "Assistant: The Passau to Vienna stretch is flat and well signposted, ideal for a first tour.",
        ),
    ],
    # Persona 1: bossa nova, then hard bop.
    "B": [
        _m("system", TOMAS),
        _m("user", "User: Lately I only listen to bossa nova while grading papers."),
        _m("assistant", "Assistant: Joao Gilberto's early albums are a calm backdrop for focused work."),
        _m("system", TOMAS),
        _m("user", "User: I'm getting into hard bop now; my trio started learning Art Blakey tunes."),
        _m("assistant", "Assistant: Moanin' is a great one to start with for a trio arrangement."),
    ],
}

# ref: the message the question is about (for the distance columns); correct: its letter;
# options: in the order they are shown.
QUESTIONS: list[dict[str, Any]] = [
    {
        "persona_id": 0,
        "question_id": "00000000-0000-4000-8000-000000000001",
        "question_type": "acknowledge_latest_preferences",
        "topic": "foodRecommendation",
        "question": "A friend invited me to a hot-pot place with extra chili broth tonight.",
        "correct": "c",
        "options": [
            "Perfect for you, the spicier the better!",
            "Hot pot is fun, though I didn't know you cooked at all.",
            "Have fun! Maybe ask for the mild mushroom broth, since you've moved to gentler food for your reflux.",
            "Enjoy it, and take your bike there since you're training for the Danube trip.",
        ],
        "context": "A",
        "end": 12,
        "ref": 8,
    },
    {
        "persona_id": 0,
        "question_id": "00000000-0000-4000-8000-000000000002",
        "question_type": "track_full_preference_evolution",
        "topic": "foodRecommendation",
        "question": "Can you suggest a dinner I could make for my cooking club this weekend?",
        "correct": "a",
        "options": [
            "You used to love fiery Sichuan food but now prefer mild dishes, so a miso-glazed salmon would suit you.",
            "Since you've always loved the hottest Sichuan food, try an extra-spicy mapo tofu.",
            "Since you never cared for Asian cuisine, how about a classic roast chicken?",
            "You've always preferred mild food, so a plain pasta is a safe choice.",
        ],
        "context": "A",
        "end": 12,
        "ref": 1,
    },
    {
        "persona_id": 0,
        "question_id": "00000000-0000-4000-8000-000000000003",
        "question_type": "recall_user_shared_facts",
        "topic": "foodRecommendation",
        "question": "Any ideas for keeping up with hobbies while I'm away on the bike trip?",
        "correct": "b",
        "options": [
            "You could keep practising piano at hostels along the way.",
            "You could look for a local cooking class along the route, like the Saturday cooking club you joined.",
            "Maybe bring your knitting, since you said it relaxes you.",
            "You could find a chess club in each town you stop in.",
        ],
        "context": "A",
        "end": 13,
        "ref": 3,
    },
    {
        "persona_id": 1,
        "question_id": "00000000-0000-4000-8000-000000000004",
        "question_type": "provide_preference_aligned_recommendations",
        "topic": "musicRecommendation",
        "question": "I need something to listen to on the drive to tomorrow's rehearsal.",
        "correct": "d",
        "options": [
            "Some quiet bossa nova would keep you calm on the road.",
            "A lo-fi study playlist could help you focus.",
            "How about a Baroque harpsichord collection?",
            "Try Art Blakey and the Jazz Messengers' 'Free for All' to get in the hard-bop mood for rehearsal.",
        ],
        "context": "B",
        "end": 6,
        "ref": 1,
    },
    {
        # Asked in the middle of block 1 (day 2), right after the change, before its
        # recorded reply and before block 2.
        "persona_id": 0,
        "question_id": "00000000-0000-4000-8000-000000000005",
        "question_type": "revisit_reasons_behind_preference_updates",
        "topic": "foodRecommendation",
        "question": "Should I order the extra-spicy dan dan noodles at the new place near work?",
        "correct": "b",
        "options": [
            "Go for it, you've always said the hotter the better.",
            "Maybe pick something milder: your doctor told you to cut out spicy food because of acid reflux.",
            "Only if you cycle there, to work up an appetite.",
            "Yes, noodles are the best thing to eat before a cooking club.",
        ],
        "context": "A",
        "end": 9,
        "ref": 8,
    },
]


def shared_context_id(messages: list[dict[str, str]]) -> str:
    """Upstream's ``generate_shared_context_id``."""
    return hashlib.sha256(" ".join(map(str, messages)).encode()).hexdigest()


def _blocks(messages: list[dict[str, str]]) -> list[int]:
    """Each message's block (the k-th system message starts block k)."""
    out, k = [], -1
    for m in messages:
        k += m["role"] == "system"
        out.append(max(k, 0))
    return out


def _tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def _joined(messages: list[dict[str, str]]) -> str:
    return "".join(m["content"] for m in messages)


def _irrelevant(messages: list[dict[str, str]]) -> int:
    """Tokens of the filler Q&A (user/assistant messages without a speaker prefix)."""
    filler = [m for m in messages if m["role"] != "system" and not m["content"].startswith(("User: ", "Assistant: "))]
    return _tokens(_joined(filler))


def rows() -> list[dict[str, Any]]:
    ids = {key: shared_context_id(msgs) for key, msgs in CONTEXTS.items()}
    out: list[dict[str, Any]] = []
    for q in QUESTIONS:
        msgs = CONTEXTS[q["context"]]
        end, ref, question = q["end"], q["ref"], q["question"]
        blocks = _blocks(msgs)
        tokens = _tokens(_joined(msgs[:end]) + question)
        distance = _tokens(_joined(msgs[ref:end]) + question)
        options = [f"({letter}) {text}" for letter, text in zip("abcd", q["options"], strict=True)]
        out.append(
            {
                "persona_id": q["persona_id"],
                "question_id": q["question_id"],
                "question_type": q["question_type"],
                "topic": q["topic"],
                "context_length_in_tokens": tokens,
                "context_length_in_letters": len(_joined(msgs[:end])),
                "distance_to_ref_in_blocks": blocks[end - 1] - blocks[ref],
                "distance_to_ref_in_tokens": distance,
                "num_irrelevant_tokens": _irrelevant(msgs),
                "distance_to_ref_proportion_in_context": f"{distance / tokens * 100:.2f}%",
                "user_question_or_message": question,
                "correct_answer": f"({q['correct']})",
                "all_options": str(options),
                "shared_context_id": ids[q["context"]],
                "end_index_in_shared_context": end,
            }
        )
    return out


def questions_csv() -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows())
    return buf.getvalue()


def contexts_jsonl() -> str:
    return "".join(json.dumps({shared_context_id(msgs): msgs}) + "\n" for msgs in CONTEXTS.values())


def files() -> dict[str, str]:
    """File name -> content."""
    return {f"questions_{SIZE}.csv": questions_csv(), f"shared_contexts_{SIZE}.jsonl": contexts_jsonl()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"folder to write to (default {OUT})")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in files().items():
        (args.out / name).write_text(text, encoding="utf-8")
        print(args.out / name)


if __name__ == "__main__":
    main()
