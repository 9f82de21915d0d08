"""The report's prose lives in ``templates/*.md``; this renders it, and a missing value is an error.

A template file holds named blocks, each opened by a line ``<!-- block NAME -->``. A block is Markdown with
``str.format`` fields (``{name}``, ``{name:.2f}``, ``{row[key]:,}``; ``{{`` and ``}}`` for literal braces).
Paragraphs may be wrapped in the file: a line is joined to the previous one with a space unless it is blank,
follows a blank line, starts a Markdown block (``#``, ``- ``, ``|``, a fence, an image) or is inside a
fence; so the output has one line per paragraph, as before, while the templates stay readable.

:func:`render` raises :class:`MissingValue` (a ``KeyError``) naming the template and the field when a value
is absent: a missing experiment can never print as 0.
"""
from __future__ import annotations

import re
import string
from functools import lru_cache
from importlib import resources
from typing import Any

__all__ = ["MissingValue", "render"]

_BLOCK = re.compile(r"^<!-- block ([a-z0-9_]+) -->\n", re.MULTILINE)
_STARTS_BLOCK = ("#", "- ", "|", "```", "![")


class MissingValue(KeyError):
    """A template field had no value (the message names the template block and the field)."""

    def __str__(self) -> str:  # KeyError's own str() quotes the message
        return str(self.args[0])


def _unwrap(text: str) -> str:
    out: list[str] = []
    fenced = False
    for line in text.split("\n"):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and out and out[-1] and line and not line.startswith(_STARTS_BLOCK) \
                and not out[-1].startswith("```"):
            out[-1] += " " + line
            continue
        out.append(line)
    return "\n".join(out)


@lru_cache(maxsize=None)
def _blocks(file: str) -> dict[str, str]:
    text = resources.files(__package__).joinpath("templates", f"{file}.md").read_text(encoding="utf-8")
    parts = _BLOCK.split(text)
    if parts[0].strip():
        raise ValueError(f"report template {file}.md: text before the first '<!-- block NAME -->' line")
    blocks: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2]):
        if name in blocks:
            raise ValueError(f"report template {file}.md: block {name!r} defined twice")
        blocks[name] = _unwrap(body.rstrip("\n"))
    return blocks


def render(template: str, /, **values: Any) -> str:
    """The block ``template`` (``"file.block"``: block ``block`` of ``templates/file.md``) with ``values``
    substituted.

    :raises MissingValue: if a field names a value (or a key or attribute of one) that was not given.
    :raises KeyError: if there is no such template block.
    """
    file, _, block = template.partition(".")
    try:
        text = _blocks(file)[block]
    except KeyError:
        raise KeyError(f"no report template block {template!r}") from None
    try:
        return text.format_map(values)
    except (KeyError, IndexError, AttributeError) as exc:
        raise MissingValue(f"report template {template!r}: no value for {_failing_field(text, values, exc)!r}") \
            from None


def _failing_field(text: str, values: dict[str, Any], exc: Exception) -> str:
    """The first replacement field of ``text`` that cannot be looked up in ``values``, as written (``n``,
    ``row[k]``, ``n[0]``, ``obj.attr``); else (a field inside a format spec) what the lookup error said."""
    fmt = string.Formatter()
    for _, name, _, _ in fmt.parse(text):
        if name is None:
            continue
        try:
            fmt.get_field(name, (), values)
        except (KeyError, IndexError, AttributeError):
            return name
    return str(exc.args[0]) if exc.args else "?"
