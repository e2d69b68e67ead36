"""Memory systems (Mem0, Hindsight) beside a harness, each a real program in its sandbox."""

from adapters.memory._systems import (
    HINDSIGHT,
    MEM0,
    MEMORY_SYSTEMS,
    NATIVE,
    MemoryServer,
    MemorySystem,
    memory_environment,
    memory_routines,
    memory_system,
)
from adapters.memory.image import memory_image, register_memory_image

__all__ = [
    "HINDSIGHT",
    "MEM0",
    "MEMORY_SYSTEMS",
    "NATIVE",
    "MemoryServer",
    "MemorySystem",
    "memory_environment",
    "memory_image",
    "memory_routines",
    "memory_system",
    "register_memory_image",
]
