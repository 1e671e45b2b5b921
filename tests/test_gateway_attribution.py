"""Who broke the buffer: each harness action told from the history a session held and the one a request sent back
(as ``--match strict`` keys messages), each cause label's maker, and one definition per action."""

from __future__ import annotations

from tito_audit.gateway import attribution as A
from tito_audit.gateway.protocol import comparable

SYSTEM = {"role": "system", "content": "You read files."}
USER = {"role": "user", "content": "Read a.txt"}
CALL = {
    "role": "assistant",
    "content": "",
    "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "read", "arguments": {"path": "a"}}}],
}
RESULT = {"role": "tool", "tool_call_id": "call_1", "content": "text of a"}
ANSWER = {"role": "assistant", "content": "It says hello."}
HELD = [SYSTEM, USER, CALL, RESULT, ANSWER]


def edit(sent: list[dict]) -> tuple[str, str]:
    action, where = A.harness_edit(
        [comparable(m) for m in HELD], [comparable(m) for m in sent], lambda i: f"input[{i}]"
    )
    return action.name, where


def test_each_harness_action_is_told_at_the_message_it_was_done_to():
    renamed = {**CALL, "tool_calls": [{**CALL["tool_calls"][0], "id": "toolu_9"}]}
    as_text = {"role": "assistant", "content": "Calling tools: read(path='a')"}
    assert edit([SYSTEM, USER, as_text, RESULT]) == ("rewrote an assistant turn as text", "input[2]")
    assert edit([SYSTEM, USER, renamed, {**RESULT, "tool_call_id": "toolu_9"}]) == ("renamed call ids", "input[2]")
    assert edit([SYSTEM, USER, CALL, {**RESULT, "content": "text"}, ANSWER, USER]) == ("edited a message", "input[3]")
    assert edit([SYSTEM, USER, CALL, RESULT, {"role": "user", "content": "Summarize."}]) == (
        "dropped a turn",
        "input[4]",
    )
    assert edit([{**SYSTEM, "content": "Other."}, USER]) == ("changed tools or system prompt", "input[0]")
    summary = {"role": "user", "content": "Summary: a says hello."}
    assert edit([SYSTEM, USER, summary]) == ("summarized", "input[2]")
    canned = {"role": "assistant", "content": "Got it."}
    assert edit([*HELD, canned, USER]) == ("injected an unsampled turn", "input[5]")
    assert edit([SYSTEM, USER, {**CALL, "content": "Let me read it."}, RESULT]) == ("edited a message", "input[2]")


def test_a_restart_from_the_summary_a_side_request_was_given_is_summarized():
    """Codex's compaction before every turn: the loop held one call after the task; the request after the summary
    request sends the task and a user message that wraps the summary the side request was given, as long as the
    history held. Without the side answer it is a dropped turn; with it, and again for the next compaction (a user
    summary where a user summary was), summarized."""
    held = [comparable(m) for m in (SYSTEM, USER, CALL)]
    answer = "The user asked what is in a.txt; it says hello. What is left: answer the user."
    restart = {"role": "user", "content": f"Another model began this task and wrote this summary:\n{answer}"}
    sent = [comparable(m) for m in (SYSTEM, USER, restart)]
    name = "input[{}]".format
    assert A.harness_edit(held, sent, name)[0] == A.DROPPED_TURN
    assert A.harness_edit(held, sent, name, ["Title: a.txt", answer]) == (A.SUMMARIZED, "input[2]")
    again = [*sent, comparable(CALL)]
    later = "The user asked what is in a.txt; I read it twice. What is left: answer the user."
    next_restart = comparable({"role": "user", "content": f"Another model began this task:\n{later}"})
    assert A.harness_edit(again, [*sent[:2], next_restart], name)[0] == A.EDITED
    assert A.harness_edit(again, [*sent[:2], next_restart], name, [answer, later])[0] == A.SUMMARIZED
    assert A.harness_edit(held, sent, name, ["hello"])[0] == A.DROPPED_TURN  # too short to tell a summary by


def test_a_break_is_made_by_the_maker_its_cause_label_names():
    assert A.made_by_break(["parse-lossy"]) == {"maker": "parser", "cause": "parse-lossy"}
    assert A.made_by_break(["bpe-seam"])["maker"] == "bpe"
    assert A.made_by_break(["empty-think-dropped"])["maker"] == "template"
    assert A.loss_cause(A.HARNESS, A.RESENT.name) == "harness: resent a request"


def test_one_definition_per_action():
    names = [action.name for action in A.ACTIONS]
    assert len(names) == len(set(names)) and set(A.MAKERS) == {"harness", "template", "parser", "bpe"}
    assert all(action.means and action.name for action in A.ACTIONS)
    assert set(A.ABSORBED) <= set(A.ACTIONS)
