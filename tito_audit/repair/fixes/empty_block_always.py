"""``empty-block-always``: history writes the reasoning block for every assistant turn it writes reasoning for, with
the reasoning the turn has or empty, also when the turn carries no reasoning field.

Under a generation prompt that opens a reasoning block every turn the model wrote has a block, possibly empty (it
closed the block at once). Engines give an empty reasoning back as no field at all (SGLang's reasoning parser answers
``null``), so a harness sends the turn back without it, and a template that tests the field before it writes the
block drops the block the model wrote. Where :mod:`.empty_block_kept` asks whether the field is a string, this fix
makes those tests true (the block's reasoning prints empty when the field is absent):

    {%- if reasoning_content and loop.index0 > ns.last_user_index %}  ->  {%- if true and loop.index0 > ... %}

It holds only where every turn the template renders reasoning for is a turn whose prompt opened the block; the
search audits every variant and offers it only then.
"""

from __future__ import annotations

from tito_audit.repair.fixes import empty_block_kept
from tito_audit.repair.fixes.interface import Fix
from tito_audit.repair.fixes.source import Edit, TemplateSource

NAME = "empty-block-always"
CAUSES = empty_block_kept.CAUSES
CHANGES = "history writes the reasoning block for every assistant turn, empty when the turn carries no reasoning"
AT_INFERENCE = "a turn that closed its reasoning block at once keeps the empty block, however the harness sends it back"
SCOPE = "renders with an assistant turn whose reasoning is empty, absent or None"
touches = empty_block_kept.touches_absent_too


def edits(source: TemplateSource) -> list[Edit]:
    return empty_block_kept.edits(source, always=True)


FIX = Fix(
    NAME,
    CAUSES,
    CHANGES,
    AT_INFERENCE,
    SCOPE,
    find_edits=lambda source, context: edits(source),
    touches=touches,
)
