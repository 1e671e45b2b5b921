"""Seeded generator of tool-calling conversations covering the shapes real rollouts hit.

Each conversation takes one cell of the cross product :data:`SHAPE_GRID`; the first ``len(SHAPE_GRID)``
conversations of a seed visit every cell once (in a seeded order, :func:`grid_order`, in which every 16 consecutive
conversations meet each appended step kind after each reasoning form), later ones start the grid again. Beside its cell,
each conversation draws the shapes harnesses send (:data:`HARNESS_SHAPES`: tool results without ``name``, results in
another order than the calls, a call id reused in a later turn, a ``developer`` message where the template renders
one). Everything else (texts, number of turns, arguments, observations) is drawn from a generator seeded by
``(seed, index)``, so conversation *i* is the same whatever ``count`` is.

What the model writes in its own turns is text a model could write after its prompt (the
:class:`~tito_audit.conversations.profile.GenerationProfile`): reasoning the prompt admits and that never holds the
reasoning closer or a control token, call ids in the form the model writes, arguments drawn from the called tool's
JSON Schema (:mod:`tito_audit.conversations.schema_draw`). Look-alike markup and literal special-token strings stay in
user, system and tool text.
"""

from __future__ import annotations

import functools
import itertools
import json
import random
from collections.abc import Iterator
from typing import Any

from tito_audit.conversations.conversation import ASSISTANT, SYSTEM, TOOL, USER, Conversation, Message
from tito_audit.conversations.profile import DEFAULT_PROFILE, SAMPLED_STRESS, GenerationProfile
from tito_audit.conversations.reasoning_forms import nearest_realizable, short_kind
from tito_audit.conversations.schema_draw import WORDS, draw_arguments
from tito_audit.conversations.stress import CONTROL_LOOKALIKES, PHRASES, STRESS_TEXTS, decorate

APPENDED = (TOOL, USER, SYSTEM, ASSISTANT)
CONTENT = ("empty", "none", "text")
REASONING = ("absent", "none", "empty", "present")
"""``none``: the message carries ``reasoning_content: None`` (a harness's way of writing no reasoning)."""
CALLS = ("one", "parallel")
ARGS = ("dict", "string")
TOOLS_SCHEMA = ("present", "absent")

SHAPE_AXES: dict[str, tuple[str, ...]] = {
    "appended": APPENDED,
    "content": CONTENT,
    "reasoning": REASONING,
    "calls": CALLS,
    "args": ARGS,
    "tools": TOOLS_SCHEMA,
}
SHAPE_GRID: tuple[dict[str, str], ...] = tuple(
    dict(zip(SHAPE_AXES, values, strict=True)) for values in itertools.product(*SHAPE_AXES.values())
)

RESULT_NAMES = "result names"
RESULT_ORDER = "result order"
CALL_IDS = "call ids"
LEAD = "lead"
HARNESS_SHAPES: dict[str, tuple[str, str]] = {
    RESULT_NAMES: ("kept", "absent"),
    RESULT_ORDER: ("as called", "reversed"),
    CALL_IDS: ("fresh", "reused"),
    LEAD: ("system", "developer"),
}
"""Shapes harnesses send, each (usual, odd): tool results without ``name``; the results of parallel calls in another
order than the calls; a later turn reusing an earlier call's id; a ``developer`` message instead of the system one
(only where the template renders it). The odd form is drawn for about one conversation in four."""
ODD_SHARE = 0.25

DEFAULT_MAX_TURNS = 4
MAX_TURNS_LIMIT = 100
"""``--max-turns`` at most: a longer generated conversation passes the audit's window (400 messages) anyway, and
generating 100,000 turns per conversation would take hours before the first progress line."""


def realizable_kind(kind: str, allowed: tuple[str, ...] | None) -> str:
    """``kind``, or the nearest kind in ``allowed`` (None allows every kind), as
    :func:`tito_audit.conversations.reasoning_forms.nearest_realizable` chooses it.

    >>> realizable_kind("present", ("absent", "empty")), realizable_kind("absent", ("empty", "present"))
    ('absent', 'present')
    """
    if allowed is None:
        return kind
    return short_kind(nearest_realizable(f"reasoning {kind}", [f"reasoning {k}" for k in allowed]))


class _Builder:
    def __init__(
        self, shape: dict[str, str], rng: random.Random, profile: GenerationProfile, habit_rng: random.Random
    ) -> None:
        self.shape = shape
        self.rng = rng
        self.habit_rng = habit_rng
        """Draws the rare form of a habit (its own generator: the other draws stay as they are)."""
        self.profile = profile
        self.messages: list[Message] = []
        self.must_appear: list[str] = []
        self.calls_made = 0
        self.call_turns = 0
        self.first_id: str | None = None
        self.dropped_reasoning = False

    def add(self, message: Message, *needles: str) -> None:
        self.must_appear.extend(n for n in needles if n and n not in self.must_appear)
        self.messages.append(message)

    # -- what the model writes -------------------------------------------------------------------------------------
    def sampled_stress(self) -> str:
        return self.profile.pick_sampled(self.rng, [STRESS_TEXTS[name] for name in SAMPLED_STRESS])

    def argument_string(self, rng: random.Random) -> str:
        if rng.random() < 0.25:
            return self.profile.pick_sampled(rng, [STRESS_TEXTS[name] for name in SAMPLED_STRESS])
        return self.profile.pick_sampled(rng, WORDS)

    def assistant_text(self) -> str:
        rng = self.rng
        base = rng.choice(
            ["Let me look that up.", "I will check.", "Here is what I found.", "Done: the task is complete."]
        )
        if rng.random() < 0.5:
            fragment = self.sampled_stress()
            base = base + " " + fragment if rng.random() < 0.5 else fragment + base
        return base

    def reasoning(self, message: Message) -> None:
        """Give ``message`` the reasoning of the conversation's cell, in a form the prompt admits. The random draws
        depend only on the cell's kind, so a conversation whose reasoning a variant does not allow differs from the
        unrestricted one in its reasoning alone."""
        cell, kind = self.shape["reasoning"], self._habitual_kind(message)
        text = self._reasoning_text(self.rng) if cell == "present" else None  # the cell's draws, whatever the habit
        if kind == "present" and text is None:  # reasoning the habit adds draws apart, leaving every other draw
            text = self._reasoning_text(self.habit_rng)
        if self.profile.prompt_opens_reasoning and kind in ("absent", "none"):
            # the model closed the block at once; the harness sends the empty reasoning back absent or None
            self.dropped_reasoning = True
            if kind == "none":
                message["reasoning_content"] = None
            return
        realized = realizable_kind("absent" if kind == "none" else kind, self.profile.reasoning)
        if realized == "absent":
            if kind == "none" and self.profile.reasoning is None:
                message["reasoning_content"] = None
            return
        if realized == "empty":
            message["reasoning_content"] = ""
            return
        message["reasoning_content"] = text if text is not None else "Let me think about which tool to use."

    def _reasoning_text(self, rng: random.Random) -> str:
        text = rng.choice(["The user wants data; call the tool.", "I should verify the result first."])
        if rng.random() < 0.5:
            fragment = self.profile.pick_sampled(rng, [STRESS_TEXTS[name] for name in SAMPLED_STRESS])
            text = fragment + text if rng.random() < 0.5 else text + fragment
        return text

    def _habitual_kind(self, message: Message) -> str:
        """The cell's reasoning kind, or, for a call turn with no content of a model that writes text before each
        call (:attr:`GenerationProfile.text_before_calls`), reasoning: present, but for the rare share drawn without
        (the cell's kind when it has none, else absent)."""
        kind, share = self.shape["reasoning"], self.profile.text_before_calls
        if share is None or not message.get("tool_calls") or message.get("content"):
            return kind
        if self.habit_rng.random() < share:
            return "absent" if kind == "present" else kind
        return "present"

    def call_id(self, function: str, first_of_turn: bool) -> str:
        """The next call's id; with the ``reused`` harness shape, the first call of the second tool-call turn takes
        the conversation's first id again (a numbered form restarts its count)."""
        form = self.profile.call_ids
        index = self.calls_made
        self.calls_made += 1
        if self.shape[CALL_IDS] == "reused" and first_of_turn and self.call_turns == 2 and self.first_id is not None:
            return self.first_id
        made = form.make(self.rng, function, index)
        if self.first_id is None:
            self.first_id = made
        return made

    # -- turns ----------------------------------------------------------------------------------------------------
    def tool_call_turn(self) -> None:
        rng, shape, tools = self.rng, self.shape, self.profile.tools
        count = 1 if shape["calls"] == "one" else rng.choice([2, 3])
        chosen = [rng.choice(tools.tools) for _ in range(count)]
        calls: list[dict[str, Any]] = []
        self.call_turns += 1
        for number, tool in enumerate(chosen):
            name = tool["function"]["name"]
            args = draw_arguments(tool, rng, self.argument_string)
            calls.append(
                {
                    "id": self.call_id(name, number == 0),
                    "type": "function",
                    "function": {
                        "name": name,
                        "arguments": args if shape["args"] == "dict" else json.dumps(args, ensure_ascii=False),
                    },
                }
            )
        content: str | None = {"empty": "", "none": None, "text": self.assistant_text()}[shape["content"]]
        message: Message = {"role": ASSISTANT, "content": content, "tool_calls": calls}
        self.reasoning(message)
        self.add(message)
        results = []
        for call in calls:
            phrase = rng.choice(PHRASES)
            name = call["function"]["name"]
            result: Message = {"role": TOOL, "tool_call_id": call["id"], "name": name}
            if shape[RESULT_NAMES] == "absent":
                del result["name"]
            result["content"] = self.tool_result(name, phrase)
            results.append((result, phrase))
        if shape[RESULT_ORDER] == "reversed":
            results.reverse()
        for result, phrase in results:
            self.add(result, phrase)

    def tool_result(self, name: str, phrase: str) -> str:
        rng = self.rng
        observation = self.profile.tools.observation(name, rng)
        if rng.random() < 0.3:
            body = json.dumps({"result": phrase, "observation": observation}, ensure_ascii=False)
        else:
            body = f"{phrase}\n{observation}"
        body = decorate(body, rng, probability=0.4)
        if rng.random() < 0.1:
            body += rng.choice(CONTROL_LOOKALIKES)
        return body

    def final_turn(self) -> None:
        message: Message = {"role": ASSISTANT, "content": self.assistant_text()}
        self.reasoning(message)
        self.add(message)

    def user_text(self) -> str:
        rng = self.rng
        text = rng.choice(
            [
                "What's the weather in Paris?",
                "Find me running shoes under $50.",
                "Fix the failing test.",
                "Push the box.",
            ]
        )
        text = decorate(text, rng)
        if rng.random() < 0.15:
            text += " " + rng.choice(CONTROL_LOOKALIKES)
        return text


STRATA = ("appended", "reasoning")
"""The axes every block of consecutive conversations covers in full (each appended step kind after each reasoning
form), so that a small count already meets every pair."""


@functools.lru_cache(maxsize=64)
def grid_order(seed: int, round_number: int) -> tuple[int, ...]:
    """The order in which one round of conversations visits :data:`SHAPE_GRID`: seeded, every cell once, and every
    run of ``len(APPENDED) * len(REASONING)`` consecutive conversations covering each pair of the :data:`STRATA`."""
    rng = random.Random(f"grid:{seed}:{round_number}")
    groups: dict[tuple[str, ...], list[int]] = {}
    for number, cell in enumerate(SHAPE_GRID):
        groups.setdefault(tuple(cell[axis] for axis in STRATA), []).append(number)
    for members in groups.values():
        rng.shuffle(members)
    order: list[int] = []
    for position in range(max(len(members) for members in groups.values())):
        keys = sorted(groups)
        rng.shuffle(keys)
        order += [groups[key][position] for key in keys if position < len(groups[key])]
    return tuple(order)


def _harness_shapes(rng: random.Random, profile: GenerationProfile) -> dict[str, str]:
    """The harness shapes of one conversation (drawn whatever the profile, so that conversations stay aligned across
    profiles); a shape the profile rules out keeps its usual form: no ``developer`` message where the template does
    not render one, no reused id where the model writes the ids itself."""
    drawn = {name: (odd if rng.random() < ODD_SHARE else usual) for name, (usual, odd) in HARNESS_SHAPES.items()}
    if not profile.developer:
        drawn[LEAD] = "system"
    if profile.model_writes_ids:
        drawn[CALL_IDS] = "fresh"
    return drawn


def generate_conversation(
    index: int, seed: int, max_turns: int = DEFAULT_MAX_TURNS, profile: GenerationProfile = DEFAULT_PROFILE
) -> Conversation:
    """Conversation ``index`` of the seeded sequence (independent of how many are generated).

    ``profile`` says what a model behind the audited template writes (see the module docstring); a grid cell asking
    for reasoning the variant's prompt does not admit gets the nearest admitted kind, recorded in the conversation's
    shape.
    """
    order = grid_order(seed, index // len(SHAPE_GRID))
    shape = dict(SHAPE_GRID[order[index % len(SHAPE_GRID)]])
    rng = random.Random(f"conversation:{seed}:{index}")
    shape.update(_harness_shapes(random.Random(f"harness:{seed}:{index}"), profile))
    build = _Builder(shape, rng, profile, random.Random(f"habit:{seed}:{index}"))
    if rng.random() < 0.7:
        lead = "developer" if shape[LEAD] == "developer" else SYSTEM
        build.add({"role": lead, "content": decorate("You are a helpful agent with tools.", rng, 0.3)})
    else:
        shape[LEAD] = "none"
    build.add({"role": USER, "content": build.user_text()})
    turns = rng.randint(2, max(2, max_turns))
    for turn in range(turns):
        last = turn == turns - 1
        if last:
            build.final_turn()
            break
        if shape["appended"] == ASSISTANT and turn == 0:
            build.final_turn()  # an assistant message directly followed by another assistant turn
            continue
        if shape["appended"] == USER and rng.random() < 0.4:
            build.final_turn()  # an answer, then the user asks again
            build.add({"role": USER, "content": build.user_text()})
            continue
        build.tool_call_turn()
        if shape["appended"] == USER and rng.random() < 0.7:
            build.add({"role": USER, "content": build.user_text()})
        elif shape["appended"] == SYSTEM and rng.random() < 0.7:
            build.add({"role": SYSTEM, "content": decorate("Note: the tool budget is 3 calls.", rng, 0.3)})
    _settle_shape(shape, build, profile)
    called = {c["function"]["name"] for m in build.messages for c in m.get("tool_calls") or []}
    declared = profile.tools.declared(called, random.Random(f"declared:{seed}:{index}"))
    return Conversation(
        id=f"c{index:04d}",
        messages=build.messages,
        tools=declared if shape["tools"] == "present" else None,
        shape=shape,
        must_appear=build.must_appear,
        reasoning_dropped_by_harness=build.dropped_reasoning,
    )


def _settle_shape(shape: dict[str, str], build: _Builder, profile: GenerationProfile) -> None:
    """The shape as generated: the reasoning kind audited, and the harness shapes this conversation could not show
    (no parallel calls to reorder, no second call to reuse an id) back to their usual form."""
    kind = shape["reasoning"]
    if not build.dropped_reasoning:
        shape["reasoning"] = realizable_kind("absent" if kind == "none" else kind, profile.reasoning)
        if kind == "none" and shape["reasoning"] == "absent":
            shape["reasoning"] = "none"
    calls = [m.get("tool_calls") or [] for m in build.messages]
    if not any(len(c) > 1 for c in calls):
        shape[RESULT_ORDER] = "as called"
    if build.call_turns < 2:
        shape[CALL_IDS] = "fresh"
    if not any(c for c in calls):
        shape[RESULT_NAMES] = "kept"


def generate(
    count: int, seed: int = 0, max_turns: int = DEFAULT_MAX_TURNS, profile: GenerationProfile = DEFAULT_PROFILE
) -> Iterator[Conversation]:
    """``count`` conversations for ``seed``; the same seed (and ``profile``) always gives the same ones."""
    for index in range(count):
        yield generate_conversation(index, seed, max_turns, profile)
