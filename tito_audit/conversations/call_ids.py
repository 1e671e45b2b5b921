"""Tool-call ids in the form a family's model writes (docs/contract.md, Conversations: "Realizable text").

Where a template writes the call id into the model's own turn, the id is text the model sampled, and an engine's
parser reads it back: Kimi K2 names the function only through its id (``functions.get_weather:0``, a counter over
the conversation's calls), Mistral's models write nine alphanumerics after ``[CALL_ID]``, most others never write
the id and take the OpenAI form (``call_`` and 24 alphanumerics) from the engine. Which form a model writes is read
from its template or its engine's parser (:func:`tito_audit.audit.generation.call_ids`), never from a table of
model names.

>>> import random
>>> KIMI.make(random.Random(0), "get_weather", 3)
'functions.get_weather:3'
>>> len(NINE.make(random.Random(0), "move", 0)), OPENAI.make(random.Random(0), "move", 0)[:5]
(9, 'call_')
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from dataclasses import dataclass

ALPHANUMERICS = string.ascii_letters + string.digits


@dataclass(frozen=True)
class CallIdForm:
    """One way of writing call ids: ``make(rng, function name, index of the call in the conversation)``."""

    name: str
    maker: Callable[[random.Random, str, int], str]

    def make(self, rng: random.Random, function: str, index: int) -> str:
        return self.maker(rng, function, index)


def _drawn(rng: random.Random, count: int) -> str:
    return "".join(rng.choice(ALPHANUMERICS) for _ in range(count))


OPENAI = CallIdForm("call_ and 24 alphanumerics", lambda rng, function, index: "call_" + _drawn(rng, 24))
NINE = CallIdForm("nine alphanumerics", lambda rng, function, index: _drawn(rng, 9))
KIMI = CallIdForm("functions.NAME:INDEX", lambda rng, function, index: f"functions.{function}:{index}")
FORMS: dict[str, CallIdForm] = {form.name: form for form in (OPENAI, NINE, KIMI)}
