"""The parse step (SPEC "The parse step"): what the serving engine's parser makes of a sampled completion.

A real loop does not append the message it meant: the engine's parser turns the sampled text into an assistant
message (content, reasoning_content, tool_calls), and the next prompt is rendered from that. This stage sits
between the conversations and the audit: a :class:`~tito_audit.parse.parser.CompletionParser` turns text into a
message (:mod:`.sglang` for SGLang's parsers by name, :mod:`.transformers_template` for transformers'
``parse_response``), :mod:`.choice` picks the parser a ``--parser`` value names (the model's documented SGLang
pair by registry fact), :mod:`.fields` names what a parse changed, and :mod:`.written` makes the other layouts
models actually write (compact JSON, another key order, padded content).

``template`` is the perfect inverse (the message the template rendered comes back unchanged): it is not a parser
object; the audit skips the parse under it.
"""
