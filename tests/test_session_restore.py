"""``restore()`` continues a state only in a session that makes the same: a snapshot (or a stored session) of another
tokenizer, template, tools or policies is refused in one line saying which, never read as this session's."""

from __future__ import annotations

import pytest

from tests import templates
from tests.conftest import SHARED_TOKENIZERS, requires_shared
from tests.helpers import load
from tito_audit import TitoSession
from tito_audit.errors import BadInputError
from tito_audit.session.machinery import build_machinery
from tito_audit.session.snapshot import change, fold, restore

HELLO = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOLS = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object", "properties": {}}}}]


@pytest.fixture(scope="module")
def machineries(tiny_model_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("templates")
    (folder / "good.jinja").write_text(templates.GOOD, encoding="utf-8")
    (folder / "trimmed.jinja").write_text(templates.CONTENT_TRIMMED_IN_HISTORY, encoding="utf-8")
    return {name: build_machinery(load(tiny_model_dir, folder / f"{name}.jinja")) for name in ("good", "trimmed")}


def started(machinery, **options) -> TitoSession:
    session = TitoSession(machinery, **options)
    session.start(HELLO)
    return session


@pytest.mark.parametrize(
    ("other", "said"),
    [
        ({"machinery": "trimmed"}, "another chat template"),
        ({"tools": TOOLS}, "other tools"),
        ({"on_break": "warn"}, "another on_break policy (it was taken with on_break='raise'"),
        ({"bridge": "template"}, "another bridge"),
    ],
)
def test_a_snapshot_of_another_session_kind_is_refused_naming_what(machineries, other, said):
    snapshot = started(machineries["good"]).snapshot()
    options = {key: value for key, value in other.items() if key != "machinery"}
    elsewhere = TitoSession(machineries[other.get("machinery", "good")], **options)
    with pytest.raises(BadInputError, match="restore") as refused:
        elsewhere.restore(snapshot)
    assert said in str(refused.value) and "\n" not in str(refused.value)
    assert elsewhere.buffer == [], "nothing of the refused state is kept"


def test_the_same_kind_of_session_restores_and_a_stored_state_too(machineries):
    session = started(machineries["good"], tools=TOOLS)
    again = TitoSession(machineries["good"], tools=TOOLS)
    again.restore(session.snapshot())
    assert again.buffer == session.buffer
    stored = fold({}, change(None, session))
    assert restore(TitoSession(machineries["good"], tools=TOOLS), stored).buffer == session.buffer
    with pytest.raises(BadInputError, match="other tools"):
        restore(TitoSession(machineries["good"]), stored)
    older = {key: value for key, value in stored.items() if key != "_origin"}  # a store written before origins
    assert restore(TitoSession(machineries["good"]), older).buffer == session.buffer


@requires_shared
def test_another_models_snapshot_is_refused_naming_both():
    from tito_audit.session.machinery import ModelSourceSettings, machinery_for

    source = ModelSourceSettings.of([SHARED_TOKENIZERS], None, None, False, False, None, None)
    qwen = started(machinery_for("Qwen/Qwen2.5-7B-Instruct", source, None, ()))
    llama = TitoSession(machinery_for("meta-llama/Llama-3.2-3B-Instruct", source, None, ()))
    with pytest.raises(BadInputError, match="another tokenizer") as refused:
        llama.restore(qwen.snapshot())
    assert "Qwen/Qwen2.5-7B-Instruct" in str(refused.value) and "Llama-3.2-3B-Instruct" in str(refused.value)
