"""What a prompt asks of the turn in words, read as a model reads it: the stand-in model follows the instructions an
agent harness writes, where a served model would.

- **A summary** (a compaction): the last message asks for a summary of the conversation so far (Codex's "CONTEXT
  CHECKPOINT COMPACTION ... handoff summary", Claude Code's ``/compact``: "create a detailed summary of the
  conversation so far"). A model writes the summary as text, never a tool call, whatever tools the prompt declares;
  wrapped in ``<summary>`` tags when the request asks for them.
- **Text only**: the last message forbids tool calls ("Respond with TEXT ONLY. Do NOT call any tools"): an answer in
  text.
- **Actions as text**: a prompt that declares no tools but tells the model to answer with a command in a fenced
  block (mini-swe-agent's text-based loop: "exactly ONE bash code block", its example fenced as
  ````` ```mswea_bash_command `````): the command is written in that fence, and the command the instructions name to
  finish (``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``) once the work is done.
- **Work already done**: a summary the model wrote earlier (:func:`summary_text`) says how many commands it ran; a
  prompt that restarts from it (a compaction's restart) goes on from there rather than from nothing.

Only what a model reads is used: the text of the prompt (its instructions before the first assistant turn, its last
message), never the request's fields.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

_ASKS_FOR_A_SUMMARY = re.compile(
    r"\b(?:create|write|provide|produce|generate|give|make)\b[^.\n]{0,60}\bsummary\b|\bsummari[sz]e\b",
    re.IGNORECASE,
)
"""A summary asked for (not one described: "produced a summary", "the summary below")."""
_OF_THE_CONVERSATION = re.compile(r"conversation|so far|context|compact|checkpoint|hand-?off|resume", re.IGNORECASE)
_NO_TOOLS = re.compile(
    r"text only|do not (?:call|use) (?:any )?tools?|without (?:calling|using) (?:any )?tools?|no tool calls",
    re.IGNORECASE,
)
_SUMMARY_TAG = "<summary>"
_FENCE = re.compile(r"```([A-Za-z][\w\-]*)[ \t]*\n")
_ASKS_FOR_A_BLOCK = re.compile(r"code block|backticks|fenced", re.IGNORECASE)
_FINISH_COMMAND = re.compile(r"(?:submit|finish|complete)[^`]{0,200}?`([^`\n]{3,120})`", re.IGNORECASE)
_DONE = re.compile(r"I ran (\d+) commands? that only read")


@dataclass(frozen=True)
class Asked:
    """What the prompt's words ask of the turn (see the module docstring)."""

    summary: bool = False
    """The last message asks for a summary of the conversation so far."""
    text_only: bool = False
    """The last message forbids tool calls."""
    summary_tags: bool = False
    """The summary is asked for inside ``<summary>`` tags."""
    fence: str | None = None
    """Actions as text: the info string of the fence the instructions show commands in."""
    finish: str | None = None
    """Actions as text: the command the instructions say ends the task."""
    done: int = 0
    """Commands a summary in the prompt says the model ran before it (0: none)."""
    done_at: int = -1
    """Where in the prompt's text that summary ends (-1: none): the turns after it are counted on top."""

    @property
    def no_calls(self) -> bool:
        return self.summary or self.text_only

    @property
    def key(self) -> str:
        """What the turn is asked for, in a word (a part of the stand-in's draw key)."""
        return "summary" if self.summary else "text" if self.text_only else "fenced" if self.fence else "turn"


def read_asked(instructions: str, last: str, text: str, tools_declared: bool) -> Asked:
    """What the prompt asks: ``instructions`` (its text before the first assistant turn), ``last`` (its last
    message's text), ``text`` (the whole prompt); ``tools_declared``: whether the prompt declares a tool the model
    reads."""
    summary = bool(_ASKS_FOR_A_SUMMARY.search(last)) and bool(_OF_THE_CONVERSATION.search(last))
    fence = None if tools_declared else _fence(instructions)
    finish = _FINISH_COMMAND.search(instructions) if fence is not None else None
    done, done_at = 0, -1
    for match in _DONE.finditer(text):
        done, done_at = int(match.group(1)), match.end()
    return Asked(
        summary=summary,
        text_only=bool(_NO_TOOLS.search(last)),
        summary_tags=summary and _SUMMARY_TAG in last,
        fence=fence,
        finish=finish.group(1).strip() if finish is not None else None,
        done=done,
        done_at=done_at,
    )


def _fence(instructions: str) -> str | None:
    """The fence the instructions show commands in, when they ask for a fenced block: the info string they use
    most."""
    if not _ASKS_FOR_A_BLOCK.search(instructions):
        return None
    counts = Counter(match.group(1) for match in _FENCE.finditer(instructions))
    if not counts:
        return None
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[0][0]


def summary_text(done: int, tags: bool) -> str:
    """The summary the stand-in model writes when asked for one: what it was asked, how many commands it ran (read
    back by :func:`read_asked` from a prompt that restarts from it), what it found and what is left."""
    body = (
        "The user asked what is in this folder. "
        f"I ran {done} commands that only read the folder: it holds README.md and notes.txt, "
        "and the notes list two TODO items. What is left: answer the user in one sentence."
    )
    if not tags:
        return body
    return f"<analysis>\nOne request, answered by reading the folder.\n</analysis>\n\n<summary>\n{body}\n</summary>"


def fenced(fence: str, command: str, thought: str) -> str:
    """An action written as text: a thought, then the command in the instructions' fence."""
    return f"THOUGHT: {thought}\n\n```{fence}\n{command}\n```"
