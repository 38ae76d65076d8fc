"""A rollout's conversation as turns placed on its prompt and response: from token spans
(`{"role", "start", "end"}` over prompt + response tokens, or characters over the texts when there are no
tokens) or from chat messages (`{"role", "content"}`, ShareGPT's `{"from", "value"}`), each message found in
the part it was said in. Roles are normalised to system / user / assistant / tool; a turn that calls a tool
(`tool_calls`, `function_call`, `"type": "tool_call"`) is marked.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

import numpy as np

__all__ = ["Turn", "Part", "turns_of", "part_of_text", "part_of_tokens", "ROLES"]

ROLES = ("system", "user", "assistant", "tool")
_ROLE_ALIASES = {"human": "user", "gpt": "assistant", "model": "assistant", "bot": "assistant", "ai": "assistant",
                 "function": "tool", "ipython": "tool", "observation": "tool", "environment": "tool", "env": "tool",
                 "tool_output": "tool", "tool_response": "tool", "developer": "system"}
_TOOL_CALL_KEYS = ("tool_calls", "tool_call", "function_call")
_TOOL_CALL_TYPES = ("tool_call", "function_call", "tool_use")


@dataclass(frozen=True)
class Turn:
    """One turn on one part: positions `start`..`end` count that part's tokens (its characters when the
    rollout has text only); -1, -1 when a message could not be found in the part."""

    role: str          # system / user / assistant / tool (another stored role is kept, lower-cased)
    part: str          # "prompt" or "response"
    start: int
    end: int
    text: str
    tool_call: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Part:
    """What turns are placed on: a part's length in positions, its bytes, each position's byte end, and how
    a span of positions reads as text."""

    name: str
    length: int
    data: bytes
    ends: np.ndarray                      # byte end of each position
    text_of: Callable[[int, int], str]


def turns_of(value: Any, prompt: Part, response: Part) -> list[Turn]:
    """The turns a stored `turns` value describes (a list, or JSON text of one); [] for anything else."""
    items = _items(value)
    out: list[Turn] = []
    cursor = {prompt.name: 0, response.name: 0}
    for item in items:
        role = _role(item)
        tool = _tool_call(item)
        if _is_span(item):
            out += _span_turns(role, int(item["start"]), int(item["end"]), tool, prompt, response)
        else:
            out.append(_message_turn(role, _content(item), tool, prompt, response, cursor))
    return out


def _items(value: Any) -> list[dict]:
    if isinstance(value, (str, bytes)):
        try:
            value = json.loads(value)
        except ValueError:
            return []
    if isinstance(value, dict):
        value = value.get("messages") or value.get("turns") or []
    if not isinstance(value, list):
        return []
    return [item for item in value if isinstance(item, dict)]


def _role(item: dict) -> str:
    role = str(item.get("role") or item.get("from") or item.get("speaker") or "").strip().lower()
    return _ROLE_ALIASES.get(role, role) or "unknown"


def _tool_call(item: dict) -> bool:
    if any(item.get(key) for key in _TOOL_CALL_KEYS):
        return True
    if str(item.get("type", "")).lower() in _TOOL_CALL_TYPES:
        return True
    content = item.get("content")
    return isinstance(content, list) and any(isinstance(c, dict) and str(c.get("type", "")).lower()
                                             in _TOOL_CALL_TYPES for c in content)


def _is_span(item: dict) -> bool:
    return all(isinstance(item.get(k), int) and not isinstance(item.get(k), bool) for k in ("start", "end"))


def _content(item: dict) -> str:
    content = item.get("content", item.get("value", item.get("text")))
    if isinstance(content, list):  # OpenAI content parts
        content = "".join(str(c.get("text", "")) if isinstance(c, dict) else str(c) for c in content)
    if content is None and item.get("tool_calls"):
        content = json.dumps(item["tool_calls"], ensure_ascii=False)
    return "" if content is None else str(content)


def _span_turns(role: str, start: int, end: int, tool: bool, prompt: Part, response: Part) -> list[Turn]:
    """A span over prompt + response, cut at the boundary into one turn per part it covers (an empty span:
    one empty turn where it starts)."""
    if end <= start:
        part, at = (prompt, start) if start < prompt.length else (response, start - prompt.length)
        at = min(max(at, 0), part.length)
        return [Turn(role, part.name, at, at, "", tool)]
    out = []
    for part, offset in ((prompt, 0), (response, prompt.length)):
        lo, hi = max(start - offset, 0), min(end - offset, part.length)
        if lo < hi:
            out.append(Turn(role, part.name, lo, hi, part.text_of(lo, hi), tool))
    return out


def _message_turn(role: str, content: str, tool: bool, prompt: Part, response: Part,
                  cursor: dict[str, int]) -> Turn:
    """A message placed where its text occurs, after the last message placed in the same part; searched in
    the prompt first (a system or user message) or the response first (assistant and tool turns)."""
    needle = content.encode("utf-8")
    order = (response, prompt) if role in ("assistant", "tool") else (prompt, response)
    for part in order:
        if not needle:
            break
        at = part.data.find(needle, _byte_of(part, cursor[part.name]))
        if at >= 0:
            start = int(np.searchsorted(part.ends, at, side="right"))
            end = int(np.searchsorted(part.ends, at + len(needle), side="left")) + 1
            end = min(max(end, start + 1), part.length)
            cursor[part.name] = end
            return Turn(role, part.name, start, end, part.text_of(start, end), tool)
    return Turn(role, order[0].name, -1, -1, content, tool)


def _byte_of(part: Part, position: int) -> int:
    return 0 if position <= 0 or not len(part.ends) else int(part.ends[min(position, len(part.ends)) - 1])


def part_of_text(name: str, text: str, visible: Callable[[str], str]) -> Part:
    """A part made of text alone: one position per character."""
    data = text.encode("utf-8", "surrogatepass")
    ends = np.cumsum([len(c.encode("utf-8", "surrogatepass")) for c in text], dtype=np.int64)
    return Part(name, len(text), data, ends, lambda a, b: visible(text[a:b]))


def part_of_tokens(name: str, pieces: Sequence[bytes], visible: Callable[[str], str]) -> Part:
    """A part made of token pieces (their exact bytes; b"" for an id without one)."""
    data = b"".join(pieces)
    ends = np.cumsum([len(p) for p in pieces], dtype=np.int64)

    def text_of(a: int, b: int) -> str:
        lo = int(ends[a - 1]) if a > 0 else 0
        hi = int(ends[b - 1]) if b > 0 else 0
        return visible(data[lo:hi].decode("utf-8", "replace"))
    return Part(name, len(pieces), data, ends, text_of)
