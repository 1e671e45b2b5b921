"""``--parser text``: the completion's text is the assistant's content, for models that write neither tool calls
nor reasoning (Gemma 2 and 3, base models): no engine parser exists for them, and a real engine needs one."""

from __future__ import annotations

from tito_audit.parse.parser import ParseInput

TEXT_PARSER = "text"


class TextParser:
    """The completion decoded (its stop token trimmed) as ``content``."""

    name = TEXT_PARSER

    def parse(self, given: ParseInput) -> dict:
        return {"role": "assistant", "content": given.text}
