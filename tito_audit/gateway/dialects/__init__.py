"""The APIs the gateway speaks besides non-streamed chat completions, each a module that maps its requests and
answers onto the same sessions and buffers: :mod:`.chat` (chat completions streamed as the engine samples),
:mod:`.responses` (OpenAI's Responses API) and :mod:`.messages` (Anthropic's Messages API)."""
