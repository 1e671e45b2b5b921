"""Which declared tool the stand-in model calls, and with what: a model asked to look around a folder calls the tools
that look, with arguments drawn from the tool's JSON Schema
(:func:`tito_audit.conversations.schema_draw.draw_arguments`, as the audit draws them).

Tools fall in four kinds, by their name and parameters:

- **shell**: a tool that runs a command (a ``command``/``cmd``/``script`` property, a name or description about a
  shell, bash, a terminal or a command): called with a command that only reads (:data:`READ_ONLY_COMMANDS`), and its
  other required properties;
- **reading**: a tool named for reading, listing, searching or viewing;
- **answer**: the tool a harness asks the model to answer through (``final_answer``, ``submit``,
  ``attempt_completion``, …): the model's answer is a call to it, its text in the string arguments;
- **other**: any other tool a request declares (a framework's ``get_weather``), called when no shell or reading tool
  is there;
- **never called**: a tool named for writing, editing, deleting, the network (web, fetch, URLs, browsers), sub-agents,
  asking the user, entering or leaving a mode or a worktree, scheduling, reporting or running a workflow. A harness
  runs the stand-in's calls for real, in a folder of its own and with nothing reachable beyond the machine: the
  stand-in only ever asks it to read.

A property whose name says it holds a path gets a file the harness matrix's task folder has (``README.md``,
``notes.txt``, ``.``), rather than a drawn word.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Any

from tito_audit.conversations.schema_draw import SchemaDrawError, draw_arguments

READ_ONLY_COMMANDS = (
    "ls",
    "ls -la",
    "pwd",
    "cat README.md",
    "cat notes.txt",
    "head -n 5 README.md",
    "wc -l README.md notes.txt",
    "grep -rn TODO .",
    "find . -maxdepth 2 -type f",
)
"""Commands that only read: what the stand-in runs through a shell-like tool."""
TASK_FILES = ("README.md", "notes.txt")
"""The files of the harness matrix's task folder (:mod:`tito_audit.harnesses.task`)."""

SHELL = "shell"
ANSWER = "answer"
READING = "reading"
OTHER = "other"
NEVER = "never"

_COMMAND_KEYS = ("command", "cmd", "script", "commands")
_SHELL_WORDS = re.compile(r"shell|bash|terminal|command|exec|\bsh\b|run_", re.IGNORECASE)
_ANSWER_NAME = re.compile(r"^(final_answer|submit|finish|attempt_completion|task_complete|complete_task|done)$", re.I)
_NEVER_WORDS = re.compile(
    r"write|edit|patch|delete|remove|rename|move|create|update|replace|insert|web|fetch|http|url|browser|download|"
    r"upload|task|agent|spawn|kill|install|push|commit|send|mail|post|notebook|todo|plan|ask|question|exit|skill|"
    r"mcp|image|memory|save|subagent|handoff|transfer|worktree|workflow|report|schedule|wakeup|cron|enter|user_input",
    re.IGNORECASE,
)
_READING_WORDS = re.compile(r"read|list|ls|glob|grep|search|find|view|get|cat|look|show|stat|tree|open", re.IGNORECASE)
_PATH_WORDS = re.compile(r"path|file|dir|folder", re.IGNORECASE)


def function_of(declared: dict[str, Any]) -> dict[str, Any]:
    function = declared.get("function", declared)
    return function if isinstance(function, dict) else {}


def properties_of(declared: dict[str, Any]) -> dict[str, Any]:
    parameters = function_of(declared).get("parameters") or {}
    properties = parameters.get("properties") if isinstance(parameters, dict) else None
    return properties if isinstance(properties, dict) else {}


def command_key(declared: dict[str, Any]) -> str | None:
    """The property a shell-like tool takes its command in (a string, or an array of strings: ``argv``)."""
    properties = properties_of(declared)
    for key in _COMMAND_KEYS:
        schema = properties.get(key)
        if isinstance(schema, dict) and schema.get("type") in ("string", "array", None):
            return key
    return None


def kind_of(declared: dict[str, Any]) -> str:
    """The kind of a declared tool (see the module docstring)."""
    function = function_of(declared)
    name = str(function.get("name", ""))
    runs = command_key(declared) is not None
    if runs and _SHELL_WORDS.search(name):
        return SHELL
    if _ANSWER_NAME.match(name):
        return ANSWER
    if _NEVER_WORDS.search(name):  # named for something else, whatever its description says (Claude Code's Workflow)
        return NEVER
    if runs and _SHELL_WORDS.search(str(function.get("description", ""))[:400]):
        return SHELL
    if _READING_WORDS.search(name):
        return READING
    return OTHER


def callable_tools(tools: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tools the stand-in calls, by preference: shell-like and reading tools when there are any, else the tools
    of no kind to avoid; none when every tool is one never called."""
    kinds = [(kind_of(t), t) for t in tools]
    looking = [t for kind, t in kinds if kind in (SHELL, READING)]
    if looking:
        shells = [t for kind, t in kinds if kind == SHELL]
        return shells + [t for t in looking if t not in shells]
    return [t for kind, t in kinds if kind == OTHER]


def answer_tool(tools: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The tool the harness asks the model to answer through, if it declares one."""
    return next((t for t in tools if kind_of(t) == ANSWER), None)


def answer_arguments(rng: random.Random, declared: dict[str, Any], answer: str) -> dict[str, Any]:
    """Arguments of an answer tool: drawn from its schema, every string the answer's text."""
    drawn = draw_arguments(declared, rng)
    return {name: answer if isinstance(value, str) else value for name, value in drawn.items()}


def pick_tool(rng: random.Random, tools: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One of :func:`callable_tools` (non-empty): a shell-like tool two times in three when there is one."""
    shells = [t for t in tools if kind_of(t) == SHELL]
    if shells and (len(shells) == len(tools) or rng.random() < 2 / 3):
        return rng.choice(shells)
    others = [t for t in tools if t not in shells]
    return rng.choice(others or list(tools))


def arguments_for(rng: random.Random, declared: dict[str, Any]) -> dict[str, Any]:
    """Arguments drawn from the tool's schema; a shell-like tool keeps its required properties and gets a command
    that only reads; a path gets a file of the task folder. Raises :class:`SchemaDrawError` for a schema no draw
    honours."""
    drawn = draw_arguments(declared, rng)
    properties = properties_of(declared)
    key = command_key(declared) if kind_of(declared) == SHELL else None
    if key is not None:
        required = function_of(declared).get("parameters", {}).get("required") or []
        drawn = {name: value for name, value in drawn.items() if name in required}
        command = rng.choice(READ_ONLY_COMMANDS)
        schema = properties[key]
        drawn[key] = ["bash", "-lc", command] if schema.get("type") == "array" else command
    for name, value in list(drawn.items()):
        schema = properties.get(name)
        free = isinstance(schema, dict) and "enum" not in schema and "pattern" not in schema
        if name != key and isinstance(value, str) and free and _PATH_WORDS.search(name):
            drawn[name] = "." if re.search("dir|folder", name, re.IGNORECASE) else rng.choice(TASK_FILES)
    return drawn


__all__ = ["SchemaDrawError", "arguments_for", "callable_tools", "kind_of", "pick_tool"]
