"""The parse step (docs/contract.md "The parse step"): what the serving engine's parser makes of a sampled completion.

A real loop does not append the message it meant: the engine's parser turns the sampled text into an assistant
message (content, reasoning_content, tool_calls), and the next prompt is rendered from that. This stage sits
between the conversations and the audit: a :class:`~tito_audit.parse.parser.CompletionParser` turns text into a
message (:mod:`.sglang` for SGLang's parsers by name, :mod:`.transformers_template` for transformers'
``parse_response``), :mod:`.engines` lists the serving engines whose parsers can run (each engine hands its parser
its own text and parses with its own code, so there is one parser verdict per engine), :mod:`.choice` picks the
parsers a ``--parser`` value names (``auto``: each engine's documented pair by registry fact, where installed),
:mod:`.handover` gives the text each engine hands its parser, :mod:`.fields` names what a parse changed, and
:mod:`.written` makes the other layouts models actually write (compact JSON, another key order, padded content).

``template`` is the perfect inverse (the message the template rendered comes back unchanged): it is not a parser
object; the audit skips the parse under it.
"""
