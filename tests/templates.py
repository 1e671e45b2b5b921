"""Small chat templates written for the tests: one correct template and one per failure cause.

All share one ChatML-like skeleton; each defect replaces one piece of it. Newlines are written as
Jinja string escapes so whitespace control never eats them.
"""

from __future__ import annotations

NL = "{{ '\\n' }}"

ARGS = "{{ c.function.arguments if c.function.arguments is string else c.function.arguments | tojson }}"
CALLS = "{%- for c in m.tool_calls or [] -%}<tool_call>{{ c.function.name }} " + ARGS + "</tool_call>{%- endfor -%}"
REASONING = (
    "{%- if m.reasoning_content is defined and m.reasoning_content is not none -%}"
    "<think>{{ m.reasoning_content }}</think>{%- endif -%}"
)
CONTENT = "{{- m.content if m.content is string else '' -}}"
END = "<|im_end|>" + NL
TOOL = "<|im_start|>tool" + NL + "{{ m.content }}<|im_end|>" + NL
GEN = "{%- if add_generation_prompt -%}<|im_start|>assistant" + NL + "{%- endif -%}"
PREAMBLE = ""


def message_loop(
    over: str = "messages",
    *,
    reasoning: str = REASONING,
    content: str = CONTENT,
    calls: str = CALLS,
    end: str = END,
    tool: str = TOOL,
) -> str:
    """The skeleton's loop over ``over`` (a Jinja expression): assistant, tool and other messages."""
    return (
        "{%- for m in "
        + over
        + " -%}"
        + "{%- if m.role == 'assistant' -%}<|im_start|>assistant"
        + NL
        + reasoning
        + content
        + calls
        + end
        + "{%- elif m.role == 'tool' -%}"
        + tool
        + "{%- else -%}<|im_start|>{{ m.role }}"
        + NL
        + "{{ m.content }}<|im_end|>"
        + NL
        + "{%- endif -%}{%- endfor -%}"
    )


def build(
    *,
    reasoning: str = REASONING,
    content: str = CONTENT,
    calls: str = CALLS,
    end: str = END,
    tool: str = TOOL,
    gen: str = GEN,
    preamble: str = PREAMBLE,
) -> str:
    return preamble + message_loop(reasoning=reasoning, content=content, calls=calls, end=end, tool=tool) + gen


GOOD = build()

EMPTY_THINK_ONLY_WHEN_LAST = build(
    reasoning="{%- if m.reasoning_content -%}<think>{{ m.reasoning_content }}</think>"
    "{%- elif loop.last -%}<think>" + NL + NL + "</think>" + NL + NL + "{%- endif -%}"
)

LAST_USER = (
    "{%- set ns = namespace(last_user=-1) -%}{%- for x in messages -%}"
    "{%- if x.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}{%- endfor -%}"
)
REASONING_AFTER_LAST_USER_ONLY = build(
    preamble=LAST_USER,
    reasoning="{%- if m.reasoning_content and loop.index0 > ns.last_user -%}"
    "<think>{{ m.reasoning_content }}</think>{%- endif -%}",
)

GEN_PROMPT_OPENS_THINK = build(
    gen="{%- if add_generation_prompt -%}<|im_start|>assistant" + NL + "<think>{%- endif -%}"
)

STOP_TOKEN_SWAPPED_IN_HISTORY = build(end="{{ '<|eot|>' if loop.last else '<|im_end|>' }}" + NL)

NEWLINE_AFTER_END_ONLY_WHEN_LAST = build(
    end="<|im_end|>{{ '\\n' if loop.last and not add_generation_prompt else '' }}",
    tool="<|im_start|>tool"
    + NL
    + "{{ m.content }}<|im_end|>{{ '\\n' if loop.last and not add_generation_prompt else '' }}",
)

CONTENT_TRIMMED_IN_HISTORY = build(
    content="{%- set text = m.content if m.content is string else '' -%}{{- text if loop.last else text | trim -}}"
)

ARGUMENTS_RESERIALIZED_IN_HISTORY = build(
    calls="{%- for c in m.tool_calls or [] -%}<tool_call>{{ c.function.name }} "
    "{{ (c.function.arguments if c.function.arguments is string else c.function.arguments | tojson) if is_last "
    "else c.function.arguments | tojson(sort_keys=True) }}</tool_call>{%- endfor -%}",
    reasoning="{%- set is_last = loop.last -%}" + REASONING,
)

TOOL_HEADER_COUNTS_MESSAGES = build(tool="<|im_start|>tool #{{ loop.index0 }}" + NL + "{{ m.content }}<|im_end|>" + NL)

DATED_SYSTEM_PROMPT = build(
    preamble="<|im_start|>system" + NL + "Today is {{ strftime_now('%Y-%m-%d') }}<|im_end|>" + NL
)

NO_TOOL_ROLE = build(tool="{{ raise_exception('this template has no tool role') }}")

TOOL_RESULT_MERGES_WITH_END = build(
    end="{{ ' END' }}",
    tool="ING results: {{ m.content }}" + NL,
)
"""The assistant turn ends with the plain-text stop token " END"; a tool result starts with "ING", and
" ENDING" is one token of the tiny vocabulary: the text prefix holds but tokens merge at the join."""


MULTILINE_EMPTY_THINK = """{%- for m in messages %}
{%- if m.role == 'assistant' %}
{{- '<|im_start|>assistant\\n' }}
{%- if m.reasoning_content %}
{{- '<think>' + m.reasoning_content + '</think>' }}
{%- elif loop.last %}
{{- '<think>\\n\\n</think>\\n\\n' }}
{%- endif %}
{{- m.content if m.content is string else '' }}
{%- for c in m.tool_calls or [] %}
{%- set args = c.function.arguments if c.function.arguments is string else c.function.arguments | tojson %}
{{- '<tool_call>' + c.function.name + ' ' + args + '</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\\n' }}
{%- elif m.role == 'tool' %}
{{- '<|im_start|>tool\\n' + m.content + '<|im_end|>\\n' }}
{%- else %}
{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\\n' }}
{%- endif %}"""
"""EMPTY_THINK_ONLY_WHEN_LAST on several lines: the empty block is written on line 7, gated on line 6."""

MULTILINE_DATED = MULTILINE_EMPTY_THINK.replace(
    "{%- for m in messages %}", "{{- 'Today: ' + strftime_now('%d %b %Y') + '\\n' }}\n{%- for m in messages %}", 1
).replace("{%- elif loop.last %}", "{%- elif false %}")
"""A correct template except for the date on line 1."""


# -- realizable turns and attribution (docs/contract.md "Realizable turns", "Attribution") -----------------------------

THINK_BLOCK = "<think>" + NL + "{{ m.reasoning_content or '' }}" + NL + "</think>" + NL + NL
CLOSED_THINK_PROMPT = (
    "{%- if add_generation_prompt -%}<|im_start|>assistant"
    + NL
    + "<think>"
    + NL
    + NL
    + "</think>"
    + NL
    + NL
    + "{%- endif -%}"
)

PROMPT_CLOSES_THINK = build(reasoning=THINK_BLOCK, gen=CLOSED_THINK_PROMPT)
"""Thinking off: the prompt writes an empty, closed think block, and history renders every assistant turn with
its (possibly empty) think block. Correct: a model cannot reason in a turn, so reasoning-bearing turns are not
realizable, and the rest is stable."""

PROMPT_CLOSES_THINK_HISTORY_DROPS_EMPTY = build(
    reasoning="{%- if loop.last or m.reasoning_content -%}" + THINK_BLOCK + "{%- endif -%}", gen=CLOSED_THINK_PROMPT
)
"""As above, but history drops the empty block of earlier turns (Qwen3's non-thinking mode): broken."""

PROMPT_OPENS_THINK_HISTORY_STRIPS = build(
    reasoning="",
    gen="{%- if add_generation_prompt -%}<|im_start|>assistant" + NL + "<think>" + NL + "{%- endif -%}",
)
"""QwQ-like: the prompt opens a think block that history never renders, in any form of the turn: broken."""

TOOL_CLOSED_DIFFERENTLY_WHEN_LAST = build(
    tool="<|im_start|>tool" + NL + "{{ m.content }}{{ '<|im_end|>' if loop.last else '\\n<|im_end|>' }}" + NL
)
"""Hermes-3-like: a tool result is closed with ``<|im_end|>`` when last and ``\\n<|im_end|>`` once anything
follows, so the tool message already in the buffer is rewritten (not a generation-prompt mismatch)."""

TOOL_RESULTS_JOINED_IN_ONE_BLOCK = build(
    tool="{%- if loop.first or loop.previtem.role != 'tool' -%}<|im_start|>user{%- endif -%}"
    + NL
    + "<tool_response>"
    + NL
    + "{{ m.content }}"
    + NL
    + "</tool_response>"
    + "{%- if loop.last -%}<|im_end|>"
    + NL
    + "{%- elif loop.nextitem.role != 'tool' -%}"
    + NL
    + "<|im_end|>"
    + NL
    + "{%- endif -%}"
)
"""Hermes-3-like grouping: consecutive tool results share one block; the block is closed with ``<|im_end|>``
right after the last result when the tool message is last, with a newline first when another message follows,
and not at all when the next result joins the block. The tool message in the buffer is rewritten at its
closing, whatever is appended after it."""

THINKING_SWITCH = build(
    reasoning=THINK_BLOCK,
    gen="{%- if add_generation_prompt -%}<|im_start|>assistant"
    + NL
    + "<think>"
    + NL
    + "{%- if enable_thinking is false -%}"
    + NL
    + "</think>"
    + NL
    + NL
    + "{%- endif -%}{%- endif -%}",
)
"""Qwen3.5-like with a switch: ``enable_thinking=false`` closes the block in the prompt, otherwise the prompt
opens it and the model writes its reasoning; history always renders the block. Ready in every variant."""

PROMPT_CLOSES_THINK_HISTORY_NEVER_SHOWS = build(reasoning="", gen=CLOSED_THINK_PROMPT)
"""The prompt writes an empty closed think block that no rendered turn ever shows, in any form: a generation-
prompt mismatch, and the buffer's empty block is dropped (two labels on one failure)."""


# -- fixes (tito_audit.repair.fixes): one template per fix, and ones a fix must leave alone ----------------------------

QWQ_LIKE = build(
    reasoning="",
    content="{%- set text = (m.content if m.content is string else '').split('</think>')[-1] -%}{{- text -}}",
    gen="{%- if add_generation_prompt -%}<|im_start|>assistant" + NL + "<think>" + NL + "{%- endif -%}",
)
"""QwQ-like: the prompt opens ``<think>``, history strips ``</think>`` from the content and reads no reasoning
field (``reasoning-kept`` renders the reasoning in the block the prompt opened)."""

LAST_FINAL = (
    "{%- set ns = namespace(boundary=-1) -%}"
    "{%- for i in range(messages|length - 1, -1, -1) -%}"
    "{%- if messages[i].role == 'assistant' and not messages[i].tool_calls and ns.boundary == -1 -%}"
    "{%- set ns.boundary = i -%}{%- endif -%}{%- endfor -%}"
)
HISTORY_SPLIT_AT_LAST_ANSWER = (
    LAST_FINAL
    + message_loop(
        reasoning="{%- if loop.index0 > ns.boundary and m.reasoning_content -%}<think>{{ m.reasoning_content }}"
        "</think>{%- endif -%}"
    )
    + GEN
)
"""Kimi-K2-Thinking-like: a backward scan finds the last final answer; reasoning renders only after it, so each
new final answer prunes the reasoning of the tool-call turns before it."""

HISTORY_SLICED_AT_LAST_ANSWER = (
    LAST_FINAL
    + message_loop("messages[:ns.boundary + 1]", reasoning="")
    + message_loop("messages[ns.boundary + 1:]")
    + GEN
)
"""Kimi-K2-Thinking's own structure: history up to the last final answer in one loop (no reasoning), the rest in
another (with reasoning)."""

PRESERVE_THINKING_SWITCH = build(
    preamble=LAST_USER,
    reasoning="{%- if m.reasoning_content and (preserve_thinking is true or loop.index0 > ns.last_user) -%}"
    "<think>{{ m.reasoning_content }}</think>{%- endif -%}",
)
"""Qwen3.6-like: reasoning after the last user message only, unless ``preserve_thinking=true`` keeps it all (a
setting suffices: no patch)."""

PARALLEL_CALLS_JOINED = build(
    calls="{%- for c in m.tool_calls or [] -%}<tool_call>{{ c.function.name }} "
    + ARGS
    + "</tool_call>{{ '' if loop.last else ',' }}{%- endfor -%}"
)
"""Correct: ``loop.last`` inside the tool-call loop separates parallel calls; no fix may touch it."""


# -- a prompt that opens the reasoning block: a model may close it at once (empty reasoning) --------------------

OPEN_THINK_PROMPT = "{%- if add_generation_prompt -%}<|im_start|>assistant" + NL + "<think>" + NL + "{%- endif -%}"
OPEN_BLOCK = "<think>" + NL + "{{ m.reasoning_content }}" + NL + "</think>" + NL

PROMPT_OPENS_THINK_HISTORY_DROPS_EMPTY = build(
    reasoning="{%- if m.reasoning_content -%}" + OPEN_BLOCK + "{%- endif -%}", gen=OPEN_THINK_PROMPT
)
"""MiniMax-M2-like: the prompt opens ``<think>\\n``; history renders the block only when the reasoning is not
empty, so a turn whose model closed the block at once loses it: broken (``empty-think-dropped``)."""

PROMPT_OPENS_THINK_HISTORY_CONCATENATES = build(
    reasoning="{%- if m.reasoning_content -%}{{ '<think>\\n' + m.reasoning_content + '\\n</think>\\n' }}{%- endif -%}",
    gen=OPEN_THINK_PROMPT,
)
"""As above, the block written by adding the field to text: a fix that writes the block for a turn without reasoning
must write it empty however the field is sent (absent or None would raise in the addition)."""

PROMPT_OPENS_THINK_HISTORY_KEEPS_EMPTY = build(
    reasoning="{%- if m.reasoning_content is string -%}" + OPEN_BLOCK + "{%- endif -%}", gen=OPEN_THINK_PROMPT
)
"""The prompt opens ``<think>\\n`` and history renders the block whenever the turn carries a reasoning field, empty
or not, but none for a turn without one: ready when a harness sends the empty reasoning back as ``""``, broken when it
sends it back absent or None (``empty-think-dropped``)."""

PROMPT_OPENS_THINK_HISTORY_ALWAYS_BLOCK = build(
    reasoning="<think>" + NL + "{{ m.reasoning_content or '' }}" + NL + "</think>" + NL, gen=OPEN_THINK_PROMPT
)
"""Qwen3.6-like: the prompt opens ``<think>\\n`` and history writes a block for every assistant turn, with the
reasoning it has or empty: ready however a harness sends empty reasoning back."""

PROMPT_OPENS_THINK_HISTORY_DROPS_NEWLINE = build(
    reasoning="{%- if m.reasoning_content -%}" + OPEN_BLOCK + "{%- else -%}<think></think>{%- endif -%}",
    gen=OPEN_THINK_PROMPT,
)
"""Nemotron-3-like: the prompt opens ``<think>\\n``; history writes an empty block as ``<think></think>``, without
the newline the prompt wrote: broken (``empty-think-dropped``)."""


# -- data a template refuses for its format, and stop tokens that open the next message ---------------------------

NINE_CHARACTER_IDS = build(
    calls="{%- for c in m.tool_calls or [] -%}"
    "{%- if c.id is not string or c.id | length != 9 -%}"
    "{{ raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}{%- endif -%}"
    "<tool_call>{{ c.function.name }} " + ARGS + "</tool_call>{%- endfor -%}"
)
"""Mistral-like: tool-call ids must be nine alphanumeric characters, or the template raises."""

NO_END_OF_TURN = (
    "{%- for m in messages -%}<|im_start|>{{ m.role }}"
    + NL
    + "{%- if m.role == 'assistant' -%}"
    + CONTENT
    + CALLS
    + "{%- else -%}{{ m.content }}{%- endif -%}{%- endfor -%}"
    + "{%- if add_generation_prompt -%}<|im_start|>assistant"
    + NL
    + "{%- endif -%}"
)
"""GLM-like: no message is closed; the next message's header ends the turn, so an engine stops on ``<|im_start|>``
(given as a stop token), which is also the first token of the next message."""

CALL_SECTION = (
    "{%- for m in messages -%}<|im_start|>{{ m.role }}"
    + NL
    + "{%- if m.role == 'assistant' -%}"
    + CONTENT
    + "{%- if m.tool_calls -%}<|endoftext|>"
    + "{%- for c in m.tool_calls -%}{{ c.function.name }} "
    + ARGS
    + "<|eot|>{%- endfor -%}<|endoftext|>{%- endif -%}<|im_end|>"
    + "{%- else -%}{{ m.content }}<|im_end|>{%- endif -%}"
    + NL
    + "{%- endfor -%}"
    + GEN
)
"""Kimi-K2-like: each call ends with ``<|eot|>`` and the call section with ``<|endoftext|>``, then ``<|im_end|>`` ends
the turn: only ``<|im_end|>`` ends every assistant message."""

ANSWER_AND_CALL_ENDS = (
    "{%- for m in messages -%}<|im_start|>{{ m.role }}"
    + NL
    + "{%- if m.role == 'assistant' -%}"
    + CONTENT
    + "{%- for c in m.tool_calls or [] -%}{{ c.function.name }} "
    + ARGS
    + "{%- endfor -%}{{ '<|eot|>' if m.tool_calls else '<|im_end|>' }}"
    + "{%- else -%}{{ m.content }}<|im_end|>{%- endif -%}"
    + NL
    + "{%- endfor -%}"
    + GEN
)
"""gpt-oss-like: an answer ends with ``<|im_end|>``, a tool call with ``<|eot|>``: each form has its own terminator."""

NAMED_BY_ID = build(
    calls="{%- for c in m.tool_calls or [] -%}<tool_call>{{ c.id }} " + ARGS + "</tool_call>{%- endfor -%}"
)
"""Kimi-K2-like: a call is written by its id only (the function's name is not written): the id carries the name, so a
model writes ``functions.NAME:INDEX``."""

KNOWN_ROLES_ONLY = build(
    preamble="{%- for m in messages -%}{%- if m.role not in ['system', 'user', 'assistant', 'tool'] -%}"
    "{{ raise_exception('Unknown role: ' + m.role) }}{%- endif -%}{%- endfor -%}"
)
"""A template that refuses any role but system, user, assistant and tool (no ``developer`` message)."""

SEPARATOR_BEFORE_CALL = (
    "{%- for m in messages -%}"
    "{%- if m.role == 'assistant' -%}<|im_start|>assistant"
    + NL
    + "{{ m.content or '' }}<|eot|>"
    + NL
    + NL
    + "{%- for c in m.tool_calls or [] -%}<|im_start|>call"
    + NL
    + "<tool_call>{{ c.function.name }} "
    + ARGS
    + "<|eot|>"
    + NL
    + NL
    + "{%- endfor -%}"
    "{%- else -%}<|im_start|>{{ m.role }}" + NL + "{{ m.content }}<|eot|>" + NL + NL + "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_start|>assistant" + NL + "{%- endif -%}"
)
"""GigaChat3-like: every part of a turn, the text before a call included, ends with ``<|eot|>``, which so is no stop
token (a model stopped there could never write its call): the engine stops on the end-of-sequence token, which history
writes as ``<|eot|>`` (stop-token-swap)."""

ONLY_TOGETHER = build(
    reasoning="{%- if m.reasoning_content or enable_thinking is true -%}"
    "{%- if enable_thinking is true and preserve_thinking is true -%}<think>{{ m.reasoning_content }}</think>"
    "{%- else -%}<think>"
    + NL
    + "{{ m.reasoning_content or '' }}"
    + NL
    + "</think>"
    + NL
    + "{%- endif -%}{%- endif -%}",
    content="{%- if m.content is string -%}{{ m.content }}{%- else -%}{%- for part in m.content -%}"
    "{%- if add_vision_id -%}Picture {{ loop.index }}: {%- endif -%}{{ part.text }}{%- endfor -%}{%- endif -%}",
    gen="{%- if add_generation_prompt -%}<|im_start|>assistant"
    + NL
    + "{%- if enable_thinking is true -%}<think>"
    + NL
    + "{%- endif -%}{%- endif -%}",
)
"""Two settings read together: thinking on opens the block in the prompt, and only with history reasoning kept as
well does history write the block without the newlines the prompt wrote (broken only in the combination);
``add_vision_id`` only numbers pictures, which tool rollouts never send."""

NO_TYPE_LISTS = build(
    preamble="{%- for tool in tools or [] -%}{%- for name, p in tool.function.parameters.properties | items -%}"
    "{%- if p.type is defined and p.type is not string -%}{{ raise_exception('type lists are not supported') }}"
    "{%- endif -%}{%- endfor -%}{%- endfor -%}"
)
"""Refuses a tool schema with a ``type`` list (Hermes 3 recurses without end on one)."""

FLAT_TOOLS_ONLY = build(preamble="{%- for tool in tools or [] -%}{{ '// ' + tool.name }}" + NL + "{%- endfor -%}")
"""Reads each tool without its ``function`` wrapper (``tool.name``), as Apertus does: raises on OpenAI-shaped tools."""


# -- training masks: templates with {% generation %} blocks (docs/contract.md "The checks", 5) -------------------------

GEN_OPEN, GEN_CLOSE = "{% generation %}", "{% endgeneration %}"


def masked(before: str, inside: str, after: str, gen: str = GEN) -> str:
    """The skeleton whose assistant branch writes ``before``, then ``inside`` in a generation block, then ``after``."""
    assistant = "{%- if m.role == 'assistant' -%}" + before + GEN_OPEN + inside + GEN_CLOSE + after
    return (
        "{%- for m in messages -%}"
        + assistant
        + "{%- elif m.role == 'tool' -%}"
        + TOOL
        + "{%- else -%}<|im_start|>{{ m.role }}"
        + NL
        + "{{ m.content }}<|im_end|>"
        + NL
        + "{%- endif -%}{%- endfor -%}"
        + gen
    )


HEADER = "<|im_start|>assistant" + NL
SAMPLED = REASONING + CONTENT + CALLS

MASK_GOOD = masked(HEADER, SAMPLED + "<|im_end|>", NL)
"""The block holds what the model writes after the prompt's header, through ``<|im_end|>``: every turn trained as
sampled, nothing else."""

MASK_HEADER_INSIDE = masked("", HEADER + SAMPLED + "<|im_end|>", NL)
"""The block opens before the role header (SmolLM3's layout): the header ``<|im_start|>assistant\\n``, written by the
generation prompt, is trained (``injected-trained``); the sampled text and ``<|im_end|>`` are marked."""

MASK_STOP_OUTSIDE = masked(HEADER, SAMPLED, "<|im_end|>" + NL)
"""The block closes before ``<|im_end|>``: the model is never trained to stop (``stop-token-untrained``)."""

MASK_CALLS_OUTSIDE = masked(HEADER, REASONING + CONTENT, CALLS + "<|im_end|>" + NL)
"""Tool calls written after the block: their tokens and the stop token are untrained (``sampled-untrained``,
``stop-token-untrained``) on tool-call turns; answers without calls lose only the stop token."""

MASK_TAIL_INSIDE = masked(HEADER, SAMPLED + "<|im_end|>" + NL, "")
"""The newline after ``<|im_end|>`` is inside the block: a token the model never sampled is trained
(``injected-trained``, after the stop token)."""

MASK_EMPTY_THINK_INSIDE = masked(
    HEADER,
    "{%- if m.reasoning_content -%}<think>{{ m.reasoning_content }}</think>{%- else -%}<think></think>{%- endif -%}"
    + CONTENT
    + CALLS
    + "<|im_end|>",
    NL,
    gen="{%- if add_generation_prompt -%}<|im_start|>assistant" + NL + "<think></think>{%- endif -%}",
)
"""The prompt writes an empty ``<think></think>`` and history writes it in every turn without reasoning, inside the
block: the template's own empty block is trained (``injected-trained``, in the generation prompt)."""

MASK_GLM_LIKE = (
    "{%- for m in messages -%}<|im_start|>{{ m.role }}"
    + NL
    + "{%- if m.role == 'assistant' -%}"
    + GEN_OPEN
    + CONTENT
    + CALLS
    + GEN_CLOSE
    + "{%- else -%}{{ m.content }}{%- endif -%}{%- endfor -%}"
    + "{%- if add_generation_prompt -%}<|im_start|>assistant"
    + NL
    + "{%- endif -%}"
)
"""GLM-like (NO_END_OF_TURN) with a block: no turn is closed; the engine stops on ``<|im_start|>``, the first token of
the next message, which no block marks (``stop-token-untrained``)."""

ALL_CALL_IDS = (
    "{%- set ids = namespace(all=[]) -%}{%- for m in messages -%}{%- for c in m.tool_calls or [] -%}"
    "{%- set ids.all = ids.all + [c.id] -%}{%- endfor -%}{%- endfor -%}"
)
BREAKS_ON_REUSED_IDS = build(
    preamble=ALL_CALL_IDS,
    tool="<|im_start|>tool{%- if ids.all | select('equalto', m.tool_call_id) | list | length > 1 -%} (id reused)"
    "{%- endif -%}" + NL + "{{ m.content }}<|im_end|>" + NL,
)
"""A known cause for the conditions: a tool result's header says so when any call of the conversation shares its id,
so a result already in the buffer is rewritten once a later turn reuses its call's id (and only then)."""

BREAKS_ON_REORDERED_RESULTS = build(
    calls=CALLS + "{%- set after = messages[loop.index0 + 1] if not loop.last else none -%}"
    "{%- if after is not none and after.role == 'tool' and m.tool_calls and after.tool_call_id != m.tool_calls[0].id"
    " -%} (answered out of order){%- endif -%}"
)
"""A known cause: a call turn says so once its first result is not the first to come back, so the turn already in the
buffer is rewritten when the results come in another order than the calls (and only then)."""

BREAKS_ON_PROSE_BEFORE_CALL = build(
    content=CONTENT
    + "{%- if m.tool_calls and m.content is string and m.content | trim and not loop.last -%}"
    + NL
    + "{%- endif -%}"
)
"""A known cause: history writes a newline between a call turn's text and its calls that the turn, while it was the
last message, did not have, whatever the harness shapes (Qwen2.5 behind vLLM's ``hermes``, in the template)."""
