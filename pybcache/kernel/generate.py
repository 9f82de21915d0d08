"""Patches the lab generates at build time (never kernel text in the repository): see GENERATED."""
from __future__ import annotations

from pathlib import Path

__all__ = ["GENERATED", "GenerateError", "generated_patch"]

GENERATED: dict[str, str] = {}


class GenerateError(Exception):
    """A generated patch could not be made."""


def generated_patch(name: str) -> Path:
    raise GenerateError(f"no generated patch {name!r}")
