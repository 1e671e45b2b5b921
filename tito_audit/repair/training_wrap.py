"""A template's training form, as source: the same text, with a ``{% generation %}`` block around what the model
samples in each assistant turn.

What the model samples in an assistant turn is what the template writes for it after the generation prompt, through
its first stop token (docs/contract.md "The simulated rollout"). The form is made without guessing at the template's
expressions:

1. ``{% generation %}``/``{% endgeneration %}`` tags already there become ``{% if true %}``/``{% endif %}`` (same
   whitespace control, no output): the blocks are placed again below.
2. In each branch of the message loop that writes assistant messages (found from Jinja's tokens,
   :mod:`tito_audit.repair.fixes.source`), the branch's output is captured (``{% set tito_turn %}…{% endset %}``),
   and so is the template's own generation prompt (the body of its ``{% if add_generation_prompt %}``, copied); the
   turn is then written again in three pieces: the part it shares with the generation prompt, the sampled part in a
   generation block (up to and including the first of the stop tokens), and the rest. A template that writes every
   role in shared branches has the body of its loop over the messages captured instead, split for assistant messages
   only.

The inserted tags mirror the whitespace control of the tags they sit beside, so the form renders byte-identically to
the template (lines are added only where the generation prompt section is copied);
:mod:`tito_audit.repair.training_form` verifies that and the mask.

Example: ``{%- if m.role == 'assistant' -%}<|im_start|>assistant\\n{{ m.content }}<|im_end|>\\n{%- elif … %}`` writes
``<|im_start|>assistant\\n`` (the generation prompt), then ``Hi<|im_end|>`` in a generation block, then ``\\n``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tito_audit.conversations.conversation import ASSISTANT
from tito_audit.repair.fixes.fold import fold
from tito_audit.repair.fixes.source import Edit, TemplateSource, Token

_OPENERS = {"if", "for", "macro", "call", "filter", "block", "raw", "with", "autoescape", "generation"}
TURN, PROMPT, STATE = "tito_turn", "tito_prompt", "tito_mask"
"""Names the form adds (a template that uses them is not wrapped)."""


class WrapError(ValueError):
    """The template has no construct the form can be made from; ``str(err)`` says which."""


@dataclass(frozen=True)
class Tag:
    """One ``{% … %}`` tag: where it starts and ends in the source, its opening and closing marks and its words."""

    start: int
    end: int
    opening: str
    """``{%`` or ``{%-``."""
    closing: str
    """``%}`` or ``-%}``."""
    keyword: str
    words: tuple[str, ...]
    first: Token
    """Its first token (roles and loop of the tag itself)."""
    following: Token | None
    """The token right after it (roles and loop of what it opens)."""


def tags_of(template: TemplateSource) -> list[Tag]:
    tokens = template.tokens
    tags: list[Tag] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token.kind != "block_begin":
            index += 1
            continue
        closing = index
        while closing < len(tokens) and tokens[closing].kind != "block_end":
            closing += 1
        if closing == len(tokens):
            break
        words = tuple(t.text for t in tokens[index + 1 : closing] if t.kind not in ("whitespace",))
        following = tokens[closing + 1] if closing + 1 < len(tokens) else None
        end = tokens[closing]
        tags.append(Tag(token.start, end.end, token.text, end.text, words[0] if words else "", words, token, following))
        index = closing + 1
    return tags


def _is_block_set(tag: Tag) -> bool:
    return tag.keyword == "set" and "=" not in tag.words


def _closing_tag(tags: Sequence[Tag], opened: int, closers: tuple[str, ...], never_closed: str) -> int:
    """Index of the first tag among ``closers`` at the depth of ``tags[opened]``, skipping nested blocks."""
    depth = 0
    for index in range(opened + 1, len(tags)):
        tag = tags[index]
        if tag.keyword in _OPENERS or _is_block_set(tag):
            depth += 1
        elif tag.keyword.startswith("end") and depth:
            depth -= 1
        elif depth == 0 and tag.keyword in closers:
            return index
    raise WrapError(never_closed)


def _body_end(tags: Sequence[Tag], opened: int) -> int:
    """Index of the ``elif``/``else``/``endif`` that ends the branch opened by ``tags[opened]``."""
    return _closing_tag(tags, opened, ("elif", "else", "endif"), "an assistant branch is never closed")


def assistant_branches(tags: Sequence[Tag]) -> list[tuple[int, int, None]]:
    """(opening tag, closing tag, None) of each outermost message-loop branch that writes assistant messages only."""
    only = frozenset({ASSISTANT})
    found: list[tuple[int, int, None]] = []
    for index, tag in enumerate(tags):
        following = tag.following
        if tag.keyword not in ("if", "elif", "else") or following is None or following.roles != only:
            continue
        if tag.first.roles == only or not following.in_message_loop:
            continue
        closing = _body_end(tags, index)
        if not any(a <= index < b for a, b, _ in found):
            found.append((index, closing, None))
    return found


def _message_loops(tags: Sequence[Tag], source: str) -> list[tuple[int, int, str]]:
    """(``for`` tag, its ``endfor``, the loop variable) of each top-level loop over the messages that writes output
    (``{{ … }}`` in its body; a loop that only computes is left alone), for templates that
    write every role in shared branches (Llama 3: ``'<|start_header_id|>' + message['role'] + …``): the loop's body
    is captured and an assistant message's output split (:func:`_emit_if_assistant`)."""
    found: list[tuple[int, int, str]] = []
    depth = 0
    for index, tag in enumerate(tags):
        words = tag.words
        if depth == 0 and tag.keyword == "for" and "in" in words and words.index("in") == 2:
            over = "".join(words[3:])
            end = _loop_end(tags, index) if "messages" in over or "msgs" in over else None
            if end is not None and "{{" in source[tag.end : tags[end].start]:  # a loop that writes something
                found.append((index, end, words[1]))
        if tag.keyword in _OPENERS or _is_block_set(tag):
            depth += 1
        elif tag.keyword.startswith("end") and depth:
            depth -= 1
    return found


def _loop_end(tags: Sequence[Tag], opened: int) -> int:
    """Index of the ``endfor`` (or the loop's own ``else``) of the loop opened by ``tags[opened]``."""
    return _closing_tag(tags, opened, ("else", "endfor"), "a loop over the messages is never closed")


def _prompt_section(tags: Sequence[Tag], after: int, branches: Sequence[tuple[int, int]]) -> tuple[int, int]:
    """(opening tag, closing tag) of the template's generation prompt section: the last top-level
    ``{% if add_generation_prompt %}`` after tag ``after``, else the last ``if`` that tests ``add_generation_prompt``
    anywhere outside ``branches`` (Apriel writes it in the message loop, after the last message)."""
    depth, top, anywhere = 0, None, None
    for index, tag in enumerate(tags):
        if tag.keyword == "if" and "add_generation_prompt" in tag.words:
            if depth == 0 and index > after:
                top = index
            elif not any(a <= index <= b for a, b in branches):
                anywhere = index
        if tag.keyword in _OPENERS or _is_block_set(tag):
            depth += 1
        elif tag.keyword.startswith("end") and depth:
            depth -= 1
    chosen = top if top is not None else anywhere
    if chosen is None:
        raise WrapError("no {% if add_generation_prompt %} section to read the generation prompt from")
    return chosen, _body_end(tags, chosen)


def _emit(stops: Sequence[str]) -> str:
    """The turn written again: the part it shares with the prompt, the sampled part in a block, the rest. One statement
    a line (every tag strips the newline after the one before it), so that no line of the form is long."""
    listed = "[" + ", ".join(_literal(s) for s in stops) + "]"
    lines = [
        f"{{%- set {STATE} = namespace(head=0, end={TURN} | length, stop=-1) -%}}",
        f"{{%- for c in {PROMPT} -%}}",
        f"{{%- if {STATE}.head == loop.index0 and {TURN}[loop.index0:loop.index] == c -%}}",
        f"{{%- set {STATE}.head = loop.index -%}}",
        "{%- endif -%}",
        "{%- endfor -%}",
        f"{{%- for s in {listed} -%}}",
        f"{{%- set at = {TURN}.find(s, {STATE}.head) -%}}",
        f"{{%- if at >= 0 and ({STATE}.stop < 0 or at < {STATE}.stop) -%}}",
        f"{{%- set {STATE}.stop = at -%}}",
        f"{{%- set {STATE}.end = at + s | length -%}}",
        "{%- endif -%}",
        "{%- endfor -%}",
        f"{{{{- {TURN}[:{STATE}.head] -}}}}",
        f"{{%- generation -%}}{{{{- {TURN}[{STATE}.head:{STATE}.end] -}}}}{{%- endgeneration -%}}",
        f"{{{{- {TURN}[{STATE}.end:] -}}}}",
    ]
    return "\n" + "\n".join(lines) + "\n"


def _emit_if_assistant(stops: Sequence[str], variable: str) -> str:
    """:func:`_emit` for an assistant message of a loop over the messages, its output as it was for the others."""
    return (
        f"\n{{%- if {variable}.role == 'assistant' -%}}{_emit(stops)}{{%- else -%}}\n{{{{- {TURN} -}}}}\n"
        "{%- endif -%}\n"
    )


def _literal(text: str) -> str:
    """A Jinja string literal for ``text``."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n").replace("\r", "\\r") + "'"


def _after(tag: Tag) -> str:
    """The closing of a tag placed right after ``tag``, and what follows it, so that the text after stays as ``tag``
    left it: stripped when ``tag`` strips (``-%}``); when ``tag`` ate the newline after it (``trim_blocks``: the
    lexer's closing token holds it), a newline of our own for our tag to eat, so that the next line still starts a
    line (``lstrip_blocks`` strips its indentation before a tag there); otherwise nothing more is eaten."""
    if tag.closing.startswith("-"):
        return "-%}"
    if tag.closing.startswith("+"):
        return "+%}"
    return "%}\n" if tag.closing.endswith("\n") else "%}"


def _left(tag: Tag) -> str:
    return "{%-" if tag.opening.endswith("-") else "{%"


def wrap(source: str, stops: Sequence[str], whole_messages: bool = False) -> str:
    """The training form of ``source`` (see the module docstring); ``whole_messages``: capture the body of the loop
    over the messages even where an assistant branch exists (a template that writes an assistant turn's end token
    after its role branches, as Kimi K2 does). Raises :class:`WrapError` when the template has neither, or no
    generation prompt section, or already uses the names the form adds."""
    if not stops:
        raise WrapError("no stop token is known: the end of what the model samples cannot be marked")
    if any(name in source for name in (TURN, PROMPT, STATE)):
        raise WrapError(f"the template already uses one of the names {TURN}, {PROMPT}, {STATE}")
    template = TemplateSource.parse(source)
    tags = tags_of(template)
    edits = [neutral(tag) for tag in tags if tag.keyword in ("generation", "endgeneration")]
    branches = [] if whole_messages else assistant_branches(tags)
    loops = [] if branches else _message_loops(tags, source)
    if not branches and not loops:
        raise WrapError("no loop over the messages writes them (nor a branch of one writes assistant messages alone)")
    opened, closed = _prompt_section(tags, max(b for _, b, _ in branches or loops), [(a, b) for a, b, _ in branches])
    prompt_body = source[tags[opened].end : tags[closed].start]
    for tag in (tags[opened], tags[closed]):
        if tag.keyword in ("generation", "endgeneration"):
            raise WrapError("the generation prompt section holds a generation tag")
    # the capture's own tags strip as the section's did (a block tag in the place of a block tag): the prompt is
    # copied as the template writes it, without a constant branch around it
    prompt = f"{{% set {PROMPT} {_after(tags[opened])}{wrap_free(prompt_body)}{_left(tags[closed])} endset %}}"
    for start, end, variable in branches or loops:
        head, tail = tags[start], tags[end]
        written = _emit(stops) if variable is None else _emit_if_assistant(stops, variable)
        edits.append(Edit(head.end, head.end, f"{prompt}{{% set {TURN} {_after(head)}", "training"))
        edits.append(Edit(tail.start, tail.start, f"{_left(tail)} endset %}}{written}", "training"))
    return folded(template.apply(sorted(edits, key=lambda edit: (edit.start, edit.end))), source)


def folded(form: str, source: str) -> str:
    """``form`` with the constant branches the neutral generation tags leave folded
    (:func:`~tito_audit.repair.fixes.fold.fold`), unless the template has constants of its own to fold: the form's diff
    then shows only what the form changes."""
    return fold(form) if fold(source) == source else form


def neutral(tag: Tag) -> Edit:
    """A generation tag as a tag with the same whitespace control and no output (the tag's delimiters only: the
    whitespace its closing strips stays out of the edit, free for an insertion beside it)."""
    word = "if true" if tag.keyword == "generation" else "endif"
    delimiter = next(d for d in ("-%}", "+%}", "%}") if tag.closing.startswith(d))
    end = tag.end - len(tag.closing) + len(delimiter)
    return Edit(tag.start, end, f"{tag.opening} {word} {delimiter}", "training")


def wrap_free(source: str) -> str:
    """``source`` with every generation tag neutral: the same text, no mask (the prompt section is copied with it)."""
    template = TemplateSource.parse(source)
    return template.apply(neutral(tag) for tag in tags_of(template) if tag.keyword in ("generation", "endgeneration"))
