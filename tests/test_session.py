"""TitoSession on small templates: a ready template never breaks, each cause breaks at its turn with its label,
sampled ids are kept as they are, and the loss mask covers exactly the sampled ids.

Completions are made here independently of the session: the template's own text of the turn after its
generation prompt, tokenized by the tokenizer and cut after the first stop token (what an engine returns).
"""

from __future__ import annotations

import random
import warnings
from datetime import datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import templates
from tito_audit import TitoBreak, TitoBreakWarning, TitoSession
from tito_audit.audit.service import AuditOptions, audit
from tito_audit.conversations.conversation import Conversation
from tito_audit.conversations.stress import STRESS_TEXTS
from tito_audit.errors import BadInputError

CLOCK = datetime(2026, 1, 15, 9, 30)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look something up.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


def call(city: str, **extra) -> dict:
    arguments = {"city": city, **extra}
    return {"id": f"call_{city[:4]}", "type": "function", "function": {"name": "lookup", "arguments": arguments}}


def tool_loop(
    calls: int = 2, *, reasoning: str | None = None, content: str = "", arguments: dict | None = None
) -> list[dict]:
    """user, then ``calls`` assistant tool calls each answered by a tool result, then a final answer."""
    messages: list[dict] = [{"role": "user", "content": "What is the weather?"}]
    for n in range(calls):
        text = content if n == calls - 1 else ""
        assistant = {"role": "assistant", "content": text, "tool_calls": [call(f"City{n}")]}
        if arguments is not None and n == calls - 1:
            assistant["tool_calls"] = [call("Paris", **arguments)]
        if reasoning is not None:
            assistant["reasoning_content"] = reasoning
        messages += [assistant, {"role": "tool", "content": f"Sunny, {20 + n}C", "tool_call_id": f"call_City{n}"}]
    messages.append({"role": "assistant", "content": "It is sunny everywhere."})
    return messages


def sampled(model, messages: list[dict], j: int, stop_ids: frozenset[int]) -> list[int]:
    """What an engine returns for assistant turn ``j``: the turn's text after the generation prompt, tokenized by
    the tokenizer itself and cut after the first stop token."""
    tokenizer, source = model.tokenizer, model.template_source

    def render(ms, gp):
        return tokenizer.apply_chat_template(
            ms, tools=TOOLS, chat_template=source, add_generation_prompt=gp, tokenize=False
        )

    prompt, full = render(messages[:j], True), render(messages[: j + 1], False)
    start = next((n for n, (a, b) in enumerate(zip(prompt, full, strict=False)) if a != b), min(len(prompt), len(full)))
    ids = tokenizer.encode(full[start:], add_special_tokens=False)
    cut = next((n + 1 for n, t in enumerate(ids) if t in stop_ids), len(ids))
    return ids[:cut]


def drive(session: TitoSession, model, messages: list[dict], completions: dict[int, list[int]] | None = None):
    """Run ``messages`` through ``session`` as a generate/parse/tool loop; returns the completions used."""
    turns = [j for j, m in enumerate(messages) if m["role"] == "assistant"]
    used: dict[int, list[int]] = {}
    session.start(messages[: turns[0]])
    for n, j in enumerate(turns):
        completion = (completions or {}).get(j) or sampled(model, messages, j, session.stop_ids)
        used[j] = completion
        if n + 1 < len(turns):
            session.extend(completion, messages[j], messages[j + 1 : turns[n + 1]])
        else:
            session.finish(completion, messages[j])
    return used


def session_for(models, name: str, **options) -> tuple[TitoSession, object]:
    model, _ = models(name)
    options.setdefault("clock", CLOCK)
    return TitoSession.from_loaded(model, tools=TOOLS, **options), model


# -- a ready template --------------------------------------------------------------------------------------------
def test_buffer_is_prompt_plus_sampled_plus_bridges(models):
    session, model = session_for(models, "GOOD")
    messages = tool_loop(3, reasoning="Let me look.")
    used = drive(session, model, messages)
    assert not session.breaks
    buffer, mask = session.buffer, session.loss_mask
    for turn in session.turns:
        start, end = turn.completion
        assert buffer[start:end] == used[turn.message_index]
        assert turn.stopped is True
    sampled_positions = {p for t in session.turns for p in range(*t.completion)}
    assert {p for p, bit in enumerate(mask) if bit} == sampled_positions
    # the text of the buffer is the template's conversation, up to the last stop token
    full = model.tokenizer.apply_chat_template(
        messages, tools=TOOLS, chat_template=model.template_source, tokenize=False
    )
    assert full.startswith(session.codec.decode(buffer))
    assert full[len(session.codec.decode(buffer)) :] == "\n"


def test_noncanonical_completion_ids_are_kept_as_sampled(models):
    session, model = session_for(models, "GOOD")
    messages = tool_loop(2)
    codec = session.codec
    rng = random.Random(7)
    split = {}
    for j in (1, 3):
        canonical = sampled(model, messages, j, session.stop_ids)
        split[j] = codec.noncanonical(canonical, rng, rate=1.0)
        assert split[j] is not None and split[j] != canonical
    drive(session, model, messages, split)
    assert not session.breaks
    for turn in session.turns:
        if turn.message_index in split:
            start, end = turn.completion
            assert session.buffer[start:end] == split[turn.message_index]
            assert session.loss_mask[start:end] == [1] * (end - start)


stress = st.sampled_from(sorted(STRESS_TEXTS.values()))
observation = st.one_of(stress, st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40))


@st.composite
def random_tool_loop(draw) -> list[dict]:
    messages: list[dict] = [{"role": "user", "content": draw(stress)}]
    for n in range(draw(st.integers(1, 10))):
        calls = [call(f"C{n}x{k}") for k in range(draw(st.integers(1, 3)))]
        if draw(st.booleans()):
            for c in calls:
                c["function"]["arguments"] = '{"city": "' + c["function"]["arguments"]["city"] + '"}'
        content = draw(st.sampled_from(["", "Checking.", None]))
        assistant = {"role": "assistant", "content": content, "tool_calls": calls}
        if draw(st.booleans()):
            assistant["reasoning_content"] = draw(st.sampled_from(["Think.", "Step 1: look it up.\nStep 2: answer."]))
        messages.append(assistant)
        messages += [{"role": "tool", "content": draw(observation), "tool_call_id": c["id"]} for c in calls]
    messages.append({"role": "assistant", "content": draw(stress)})
    return messages


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages=random_tool_loop(), seed=st.integers(0, 1000))
def test_ready_template_never_breaks_over_random_tool_loops(models, messages, seed):
    session, model = session_for(models, "GOOD")
    rng = random.Random(seed)
    turns = [j for j, m in enumerate(messages) if m["role"] == "assistant"]
    completions = {}
    for j in turns:
        canonical = sampled(model, messages, j, session.stop_ids)
        completions[j] = (rng.random() < 0.5 and session.codec.noncanonical(canonical, rng)) or canonical
    drive(session, model, messages, completions)
    assert not session.breaks
    buffer, mask = session.buffer, session.loss_mask
    position, expected_mask = 0, []
    for turn in session.turns:
        start, end = turn.completion
        assert buffer[start:end] == completions[turn.message_index]
        expected_mask += [0] * (start - position) + [1] * (end - start)
        position = end
    assert mask == expected_mask + [0] * (len(buffer) - position)


# -- each cause breaks at its turn, with its label, where the audit says --------------------------------------------
CASES = [
    # template, messages, turn of the break, cause, message whose rendering changed
    ("STOP_TOKEN_SWAPPED_IN_HISTORY", tool_loop(2), 3, "stop-token-swap", 1),
    ("CONTENT_TRIMMED_IN_HISTORY", tool_loop(2, content="Let me check again.  "), 5, "content-rewritten", 3),
    ("ARGUMENTS_RESERIALIZED_IN_HISTORY", tool_loop(2, arguments={"a_unit": "c"}), 5, "tool-call-reformatted", 3),
    ("EMPTY_THINK_ONLY_WHEN_LAST", tool_loop(2), 3, "empty-think-dropped", 1),
    ("TOOL_CLOSED_DIFFERENTLY_WHEN_LAST", tool_loop(2), 5, "closing-rewritten", 2),
    ("PROMPT_CLOSES_THINK_HISTORY_NEVER_SHOWS", tool_loop(2), 3, "gen-prompt-mismatch", None),
    ("TOOL_RESULT_MERGES_WITH_END", tool_loop(2), 3, "bpe-seam", None),
    (
        "REASONING_AFTER_LAST_USER_ONLY",
        [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": "", "reasoning_content": "Look it up.", "tool_calls": [call("Rome")]},
            {"role": "tool", "content": "Sunny", "tool_call_id": "call_Rome"},
            {"role": "assistant", "content": "Sunny in Rome.", "reasoning_content": "Answer."},
            {"role": "user", "content": "Thanks. And Oslo?"},
            {"role": "assistant", "content": "Let me look."},
        ],
        5,
        "reasoning-pruned",
        1,
    ),
]


def audit_first_failure(models, name: str, messages: list[dict]):
    model, _ = models(name)
    conversation = Conversation("case", messages, TOOLS)
    report = audit(model, AuditOptions(conversations=[conversation], clock=CLOCK))
    failures = [f for f in report.variants[0].failures if f.check == "rollout" and f.aspect in ("text", "seam")]
    return min(failures, key=lambda f: f.turn) if failures else None


@pytest.mark.parametrize(("name", "messages", "turn", "cause", "owner"), CASES, ids=[c[0] for c in CASES])
def test_each_cause_breaks_at_its_turn(models, name, messages, turn, cause, owner):
    session, model = session_for(models, name)
    with pytest.raises(TitoBreak) as raised:
        drive(session, model, messages)
    details = raised.value.details
    assert details.turn == turn
    assert cause in details.causes
    assert details.message_index == owner
    assert details.buffer_text != details.template_text or details.aspect == "seam"
    # the audit of the same conversation reports its first failure at the same turn, with the same labels
    first = audit_first_failure(models, name, messages)
    assert first is not None and first.turn == turn
    assert set(first.causes) == set(details.causes)


def test_raise_leaves_the_session_as_it_was(models):
    session, model = session_for(models, "STOP_TOKEN_SWAPPED_IN_HISTORY")
    messages = tool_loop(2)
    session.start(messages[:1])
    before = (session.buffer, session.loss_mask, session.messages)
    with pytest.raises(TitoBreak):
        session.extend(sampled(model, messages, 1, session.stop_ids), messages[1], messages[2:3])
    assert (session.buffer, session.loss_mask, session.messages) == before


def test_template_refusal_raises_under_every_policy(models):
    for policy in ("raise", "warn", "rerender"):
        session, model = session_for(models, "NO_TOOL_ROLE", on_break=policy)
        messages = tool_loop(1)
        session.start(messages[:1])
        with pytest.raises(TitoBreak) as raised:
            session.extend(sampled(model, messages, 1, session.stop_ids), messages[1], messages[2:3])
        assert raised.value.causes == ["template-error"] and "no tool role" in raised.value.details.detail


# -- policies ---------------------------------------------------------------------------------------------------
def test_rerender_follows_the_template_and_masks_what_was_not_sampled(models):
    session, model = session_for(models, "STOP_TOKEN_SWAPPED_IN_HISTORY", on_break="rerender")
    messages = tool_loop(2)
    used = drive(session, model, messages)
    assert [b.turn for b in session.breaks] == [3, 5]
    # from the last break on the buffer is the template's prompt, then the last completion
    prompt = session.template_ids(messages[:5], add_generation_prompt=True)
    assert session.buffer == prompt + used[5]
    mask = session.loss_mask
    assert mask[len(prompt) :] == [1] * len(used[5])
    # earlier completions end with <|eot|> as sampled, but the template re-wrote them with <|im_end|>: masked
    eot = session.codec.id_of("<|eot|>")
    assert all(not bit for token, bit in zip(session.buffer[: len(prompt)], mask, strict=False) if token == eot)
    assert sum(mask[: len(prompt)]) < sum(len(used[j]) for j in (1, 3))


def test_warn_keeps_the_sampled_buffer_and_keeps_checking(models):
    session, model = session_for(models, "REASONING_AFTER_LAST_USER_ONLY", on_break="warn")
    messages = [
        *CASES[-1][1][:5],
        {"role": "assistant", "content": "", "reasoning_content": "Call.", "tool_calls": [call("Oslo")]},
        {"role": "tool", "content": "Snow", "tool_call_id": "call_Oslo"},
        {"role": "assistant", "content": "Snow in Oslo."},
    ]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        used = drive(session, model, messages)
    assert [w.category for w in caught] == [TitoBreakWarning]
    assert [b.turn for b in session.breaks] == [5]
    # append-only: every completion sits in the final buffer as sampled, each under the loss
    for turn in session.turns:
        start, end = turn.completion
        assert session.buffer[start:end] == used[turn.message_index]
        assert session.loss_mask[start:end] == [1] * (end - start)
    assert sum(session.loss_mask) == sum(len(c) for c in used.values())
    assert "Look it up." in session.codec.decode(session.buffer)  # reasoning the template would prune is kept


# -- truncated and unsampled turns ------------------------------------------------------------------------------
def test_truncated_completion_gets_its_terminator_from_the_bridge(models):
    session, model = session_for(models, "GOOD")
    messages = tool_loop(1)
    session.start(messages[:1])
    full = sampled(model, messages, 1, session.stop_ids)
    cut = full[:-1]  # the engine stopped at its length limit, before <|im_end|>
    prompt = session.extend(cut, messages[1], messages[2:3])
    turn = session.turns[-1]
    assert turn.stopped is False
    start, end = turn.completion
    assert prompt[start:end] == cut
    assert prompt[end] == session.codec.id_of("<|im_end|>") and session.loss_mask[end] == 0
    assert prompt == session.template_ids(messages[:3], add_generation_prompt=True)


def test_unsampled_assistant_message_is_template_text_outside_the_loss(models):
    session, _ = session_for(models, "GOOD")
    messages = tool_loop(2)
    session.start(messages[:1])
    prompt = session.extend(None, messages[1], messages[2:3])
    assert prompt == session.template_ids(messages[:3], add_generation_prompt=True)
    assert sum(session.loss_mask) == 0 and session.turns[-1].sampled is False


def test_the_clock_is_frozen_for_the_session(models):
    session, model = session_for(models, "DATED_SYSTEM_PROMPT", clock=datetime(2030, 5, 1))
    drive(session, model, tool_loop(2))
    assert not session.breaks and "2030-05-01" in session.codec.decode(session.buffer)


def test_misuse_gives_clear_errors(models, tmp_path):
    session, _ = session_for(models, "GOOD")
    with pytest.raises(RuntimeError, match="start"):
        session.extend([1], {"role": "assistant", "content": "x"}, [{"role": "user", "content": "y"}])
    session.start([{"role": "user", "content": "Hi"}])
    with pytest.raises(ValueError, match="token ids"):
        session.extend([-1], {"role": "assistant", "content": "x"}, [{"role": "user", "content": "y"}])
    with pytest.raises(ValueError, match="finish"):
        session.extend([1], {"role": "assistant", "content": "x"}, [])
    with pytest.raises(ValueError, match="on_break"):
        session.spawn(on_break="ignore")  # type: ignore[arg-type]
    template_only = tmp_path / "org--template-only"
    template_only.mkdir()
    (template_only / "chat_template.jinja").write_text(templates.GOOD, encoding="utf-8")
    with pytest.raises(BadInputError, match="real tokenizer"):
        TitoSession.from_model(str(template_only), allow_hub=False)
