"""``--on-rewrite branch`` and ``--match``: a harness that rewrites its history (a truncated tool output, a compacted
context, a rewind, renamed call ids) gets an answer, and the session keeps every branch as an append-only buffer of
its own; the branch it forked from is left exactly as it was."""

from __future__ import annotations

import json

import pytest

from tests.conftest import SHARED_TOKENIZERS, requires_shared

pytest.importorskip("starlette", reason="the gateway extra is not installed (pip install -e '.[gateway]')")
httpx = pytest.importorskip("httpx")

pytestmark = [
    requires_shared,
    pytest.mark.shared,
    pytest.mark.filterwarnings("ignore::tito_audit.session.TitoBreakWarning"),  # the response reports it
]

MODEL = "Qwen/Qwen2.5-7B-Instruct"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    }
]


@pytest.fixture(scope="module")
def machinery():
    from tito_audit.session.machinery import ModelSourceSettings, machinery_for

    source = ModelSourceSettings.of([SHARED_TOKENIZERS], None, None, False, False, None, None)
    return machinery_for(MODEL, source, None, ())


def served(machinery, **settings):
    from tito_audit.gateway.gateway import Gateway, GatewayConfig
    from tito_audit.gateway.server import running

    settings.setdefault("on_rewrite", "branch")
    return running(Gateway(GatewayConfig(MODEL, parser="template", seed=4, **settings), machinery=machinery))


def post(url: str, messages: list[dict], session: str) -> httpx.Response:
    body = {"messages": messages, "tools": TOOLS, "tool_choice": "required"}
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers={"X-Session-Id": session}, timeout=60)


def agent(url: str, session: str, turns: int) -> list[dict]:
    """An agent that reads files: the history it sent last."""
    messages: list[dict] = [{"role": "system", "content": "You read files."}, {"role": "user", "content": "Read a.txt"}]
    for turn in range(turns):
        answer = post(url, messages, session)
        assert answer.status_code == 200, answer.text
        message = {k: v for k, v in answer.json()["choices"][0]["message"].items() if v is not None}
        messages.append(message)
        messages += [
            {"role": "tool", "tool_call_id": call["id"], "content": f"line {turn}\n" * 40}
            for call in message["tool_calls"]
        ]
    return messages


def check_branch(branch: dict, parent: dict | None) -> None:
    """A branch is a buffer of its own: its loss mask covers exactly the completions sampled on it (those it carries
    from the branch it forked from are context), and it starts with the tokens it says it shares with that branch."""
    spans = [t["completion"] for t in branch["turns"] if t["in_loss"]]
    carried = [t["completion"] for t in branch["turns"] if t["sampled"] and not t["in_loss"]]
    assert all(end <= branch["shared_tokens"] for _, end in carried)  # only what it shares is someone else's
    assert sum(branch["loss_mask"]) == sum(end - start for start, end in spans)
    assert all(branch["loss_mask"][i] == 1 for start, end in spans for i in range(start, end))
    if parent is not None:
        shared = branch["shared_tokens"]
        assert branch["buffer"][:shared] == parent["buffer"][:shared]
        assert (
            shared == len(branch["buffer"])
            or shared == len(parent["buffer"])
            or (branch["buffer"][shared] != parent["buffer"][shared])
        )


def test_a_truncated_tool_output_opens_a_branch_and_leaves_the_first_as_it_was(machinery):
    with served(machinery) as url:
        messages = agent(url, "trunc", 3)
        before = httpx.get(f"{url}/sessions/trunc").json()
        assert len(before["branches"]) == 1
        rewritten = json.loads(json.dumps(messages))
        tool_index = next(i for i, m in enumerate(rewritten) if m["role"] == "tool" and i > 3)
        rewritten[tool_index]["content"] = "line 1\n[... 39 lines cut]"  # the harness truncates an older output
        answer = post(url, rewritten, "trunc")
        assert answer.status_code == 200, answer.text
        record = httpx.get(f"{url}/sessions/trunc").json()
        first, second = record["branches"]
        assert (first["branch"], first["parent"], second["branch"], second["parent"]) == (0, None, 1, 0)
        assert first["buffer"] == before["branches"][0]["buffer"]  # the first branch is untouched
        assert first["loss_mask"] == before["branches"][0]["loss_mask"]
        check_branch(first, None)
        check_branch(second, first)
        assert second["shared_messages"] == tool_index  # everything before the truncated output
        # the answers sampled before the rewrite keep their sampled ids in the new branch, in the loss
        kept = [t for t in second["turns"] if t["completion"][1] <= second["shared_tokens"]]
        assert len(kept) == 2 and all(t["sampled"] for t in kept)
        assert record["branch"] == 1 and record["buffer"] == second["buffer"]
        # the new branch goes on as any session does
        follow = [*rewritten, answer.json()["choices"][0]["message"]]
        follow += [{"role": "tool", "tool_call_id": c["id"], "content": "ok"} for c in follow[-1]["tool_calls"]]
        assert post(url, follow, "trunc").status_code == 200
        after = httpx.get(f"{url}/sessions/trunc").json()
        assert len(after["branches"]) == 2 and after["branches"][0]["buffer"] == first["buffer"]


def test_a_compacted_context_is_a_new_root_and_a_rewind_is_a_branch(machinery):
    with served(machinery) as url:
        messages = agent(url, "compact", 3)
        compacted = [
            {"role": "system", "content": "Summary: a.txt was read twice."},
            {"role": "user", "content": "Go on"},
        ]
        assert post(url, compacted, "compact").status_code == 200
        rewind = messages[:4]  # the history up to the first tool result (a prompt inside branch 0): answered again
        assert post(url, rewind, "compact").status_code == 200
        record = httpx.get(f"{url}/sessions/compact").json()
        parents = [b["parent"] for b in record["branches"]]
        assert parents == [None, None, 0]
        assert record["branches"][1]["shared_tokens"] == 0
        for branch in record["branches"]:
            check_branch(branch, record["branches"][branch["parent"]] if branch["parent"] is not None else None)
        assert len(record["branches"][2]["turns"]) == 2  # the first answer kept, the second sampled anew


def test_an_assistant_turn_the_gateway_never_sampled_is_appended_outside_the_loss(machinery):
    with served(machinery) as url:
        messages = agent(url, "forged", 2)
        forged = json.loads(json.dumps(messages))
        forged[2] = {"role": "assistant", "content": "I will read it now.", "tool_calls": forged[2]["tool_calls"]}
        assert post(url, forged, "forged").status_code == 200
        branch = httpx.get(f"{url}/sessions/forged").json()["branches"][1]
        check_branch(branch, None)
        assert [t["sampled"] for t in branch["turns"]] == [False, False, True]


@pytest.mark.parametrize(
    ("match", "renamed_ids", "new_arguments"),
    [("strict", 400, 400), ("tool-call-format", 200, 400), ("role-content", 200, 200)],
)
def test_the_matcher_says_what_counts_as_the_same_message(machinery, match, renamed_ids, new_arguments):
    with served(machinery, on_rewrite="refuse", match=match) as url:
        messages = agent(url, f"m-{match}", 1)
        answer = post(url, messages, f"m-{match}")  # the next turn, to compare against later
        assert answer.status_code == 200
        renamed = json.loads(json.dumps(messages))
        for message in renamed:
            for call in message.get("tool_calls") or []:
                call["id"] = "toolu_" + call["id"][-8:]
            if message["role"] == "tool":
                message["tool_call_id"] = "toolu_" + message["tool_call_id"][-8:]
        assert post(url, renamed, f"m-{match}").status_code == renamed_ids
        changed = json.loads(json.dumps(messages))
        changed[2]["tool_calls"][0]["function"]["arguments"] = json.dumps({"path": "b.txt"})
        assert post(url, changed, f"m-{match}").status_code == new_arguments
        spaced = json.loads(json.dumps(messages))
        for call in spaced[2]["tool_calls"]:  # the same arguments written with other spacing: the same everywhere
            call["function"]["arguments"] = json.dumps(json.loads(call["function"]["arguments"]), indent=2)
        assert post(url, spaced, f"m-{match}").status_code == 200


def test_unknown_rewrite_settings_are_refused_in_one_line(machinery):
    from tito_audit.errors import BadInputError
    from tito_audit.gateway.gateway import Gateway, GatewayConfig

    with pytest.raises(BadInputError, match=r"^--on-rewrite must be one of refuse, branch, not 'fork'$"):
        Gateway(GatewayConfig(MODEL, parser="template", on_rewrite="fork"), machinery=machinery)
    with pytest.raises(BadInputError, match=r"^--match must be one of strict, tool-call-format, role-content"):
        Gateway(GatewayConfig(MODEL, parser="template", match="loose"), machinery=machinery)
