"""The TITO gateway: an OpenAI-compatible chat-completions endpoint that keeps the tokens.

An agent speaks OpenAI chat completions to it; behind it, every session is a :class:`~tito_audit.session.TitoSession`
whose buffer only grows: the gateway appends the bridge, asks a token-in engine (vLLM, SGLang, or the built-in fake one)
to continue the buffer, parses the sampled ids with the engine's parser and answers with content, reasoning and tool
calls. A trainer then reads each session's buffer and loss mask and the engine's log-probabilities (``GET
/sessions/{id}``). :mod:`.protocol` holds the OpenAI shapes, :mod:`.answer_logprobs` and :mod:`.engine_logprobs` the
log-probabilities asked and answered, :mod:`.sampling_engines`, :mod:`.fake` and :mod:`.llamacpp` the engines
(:mod:`.engine_stream` their streaming modes), :mod:`.sessions` the bounded table of sessions (it commits every turn),
:mod:`.sqlite_journal` its journal in SQLite (``--store``), :mod:`.turn_steps` one request's step, :mod:`.matchers` and
:mod:`.branches` what a rewritten history does (``--match``, ``--on-rewrite``), :mod:`.tool_results` and
:mod:`.prompt_bounds` what a request must be before a session is touched (tool results that answer calls, a prompt
within the context), :mod:`.turn_stream` a turn relayed as the engine samples it (:mod:`.completion_stream` the answer's
pieces read from the sampled ids), :mod:`.encoding` a large record sent in pieces, :mod:`.dialects` OpenAI's Responses
and Anthropic's Messages APIs on the same sessions, :mod:`.gateway` the gateway without its web layer, :mod:`.app` the
Starlette routes and :mod:`.server` uvicorn. The web stack is the ``gateway`` install extra, llama.cpp the ``llamacpp``
one; nothing here is imported unless ``tito-audit serve`` runs or a caller imports it.
"""
