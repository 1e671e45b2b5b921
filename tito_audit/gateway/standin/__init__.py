"""The stand-in engine (``tito-audit serve MODEL --engine standin``): a token-in, token-out engine on 127.0.0.1 that
answers each prompt with the completion the model family would write after it, vLLM-shaped and SGLang-shaped.

Prompt ids enter (as a served model gets them); :mod:`.declared_tools` reads the tools the prompt declares,
:mod:`.turn_plan` and :mod:`.tool_use` decide the turn (reasoning, text before a call, calls of tools that only read,
an answer after a few calls), :mod:`.model` writes it as the audit's realization writes a model's turn and encodes it,
:mod:`.server` answers it over HTTP as vLLM's ``/v1/completions`` and SGLang's ``/generate`` do.
"""
