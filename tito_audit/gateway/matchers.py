"""What counts as the same message when a client sends a session's history again (``--match``, one per server).

- ``strict`` (the default): every field the template renders — role, content, name, ``tool_call_id``, each call's id,
  name and arguments (compared as JSON values: a client that writes them with other spacing or key order sends the
  same call) — but the reasoning, which clients commonly drop (the session appends its own record of the turn).
- ``tool-call-format``: as ``strict``, but call ids and the results' ``tool_call_id`` are not compared (a harness
  that renames call ids, or a dialect that gives them its own form, sends the same turn).
- ``role-content``: the role and the text content only (tool calls and names are not compared).

Empty and missing content are alike under every matcher. A message that differs under the server's matcher is an
edit of history: refused (409) or, with ``--on-rewrite branch``, a new branch (:mod:`.branches`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tito_audit.gateway.protocol import comparable

MATCHERS = ("strict", "tool-call-format", "role-content")
Matcher = Callable[[dict], dict]


def matcher(name: str) -> Matcher:
    """The key function of the matcher ``name`` (two messages are the same when their keys are equal)."""
    if name not in MATCHERS:
        raise ValueError(f"--match must be one of {', '.join(MATCHERS)}, not {name!r}")
    return {"strict": comparable, "tool-call-format": _tool_call_format, "role-content": _role_content}[name]


def _tool_call_format(message: dict) -> dict:
    key: dict[str, Any] = comparable(message)
    key.pop("tool_call_id", None)
    if "tool_calls" in key:
        key["tool_calls"] = [{"name": c["name"], "arguments": c["arguments"]} for c in key["tool_calls"]]
    return key


def _role_content(message: dict) -> dict:
    return {"role": message.get("role"), "content": message.get("content") or ""}
