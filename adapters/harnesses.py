"""Every sandboxed harness the project ships, declared once.

The daemon's registry, ``sclated images build`` and ``sclated doctor`` read
this table: a harness added here is offered by ``sclate agents list``, its
image is built with the others and checked by the doctor, and so is the image
of each memory system it declares (``adapters.memory``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from adapters._base import HarnessDeclaration, SandboxHarness
from adapters.memory import MEMORY_SYSTEMS, MemorySystem, register_memory_image

__all__ = ["HARNESSES", "HarnessEntry", "register_harness_images"]


@dataclass(frozen=True, slots=True)
class HarnessEntry:
    declaration: HarnessDeclaration
    make: Callable[[Mapping[str, Any], MemorySystem | None], SandboxHarness]


def _entries() -> tuple[HarnessEntry, ...]:
    from adapters.claude_code import DECLARATION as CLAUDE_CODE
    from adapters.claude_code import ClaudeCodeHarness
    from adapters.codex import DECLARATION as CODEX
    from adapters.codex import CodexHarness
    from adapters.hermes import DECLARATION as HERMES
    from adapters.hermes import HermesHarness
    from adapters.openclaw import DECLARATION as OPENCLAW
    from adapters.openclaw import OpenClawHarness
    from adapters.reference_harness import DECLARATION as REFERENCE
    from adapters.reference_harness import ReferenceHarness

    return (
        HarnessEntry(REFERENCE, ReferenceHarness),
        HarnessEntry(HERMES, HermesHarness),
        HarnessEntry(OPENCLAW, OpenClawHarness),
        HarnessEntry(CODEX, CodexHarness),
        HarnessEntry(CLAUDE_CODE, ClaudeCodeHarness),
    )


HARNESSES: tuple[HarnessEntry, ...] = _entries()


def register_harness_images() -> None:
    """Make the image builder know every harness's image (importing a harness registers it)."""
    from adapters.claude_code.image import register_image as claude_code_image
    from adapters.codex.image import register_image as codex_image
    from adapters.hermes.image import register_image as hermes_image
    from adapters.openclaw.image import register_image as openclaw_image
    from adapters.reference_harness.image import register_image as reference_image

    reference_image()
    hermes_image()
    openclaw_image()
    codex_image()
    claude_code_image()
    for harness in HARNESSES:
        for name in harness.declaration.memory_systems:
            if name in MEMORY_SYSTEMS:
                register_memory_image(harness.declaration.image, MEMORY_SYSTEMS[name])
