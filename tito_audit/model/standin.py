"""Stand-in tokenizer for template-only models: the chat template is known, the vocabulary is not.

The stand-in is a byte-level tokenizer without merges (one token per byte) that knows the model's
special tokens, taken from its configs (``tokenizer_config.json``, ``special_tokens_map.json``) or,
when it has none, from the marker-like literals of the template itself (``<|im_end|>``, ``<｜User｜>``,
``[INST]``). With it the audit runs unchanged at text level: text stability and message-level
append are real findings, token-level results are not claimed (the report says ``text-level only``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tito_audit.model.threads import first_import

VOCABULARY_FILES = ("tokenizer.json", "vocab.json", "tokenizer.model", "tekken.json", "vocab.txt")
SPECIAL_LITERAL = re.compile(
    r"<\|[^|\s<>]{1,48}\|>|<｜[^｜\s]{1,48}｜>|\[/?[A-Z][A-Z_]{1,30}\]|<SPECIAL_\d{1,6}>|<\|[a-z_]{1,30}>|<[a-z_]{1,30}\|>"
)
"""Marker-like literals written as control tokens by most families: <|x|>, <｜x｜>, [X]/[/X], the numbered
<SPECIAL_n> of Nemotron-H vocabularies, and the half-open <|x> / <x|> pairs of Gemma 4 (<|turn>, <turn|>)."""
PLACEHOLDERS = {"bos_token": "<|stand-in-bos|>", "eos_token": "<|stand-in-eos|>"}
"""Used when a template reads bos_token/eos_token and neither the configs nor the registry name them."""
TAG_LITERAL = re.compile(r"</?[a-z][a-z_:]{1,30}>")
"""Lowercase tags (<think>, <tool_call>): often added tokens, never turn terminators."""


def has_vocabulary(files: Iterable[str]) -> bool:
    names = {Path(name).name for name in files}
    return bool(names & set(VOCABULARY_FILES)) or any(name.endswith(".tiktoken") for name in names)


def _token_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_templates(folder: Path) -> dict[str, str]:
    """Chat templates of a folder: ``chat_template.jinja``, ``chat_template.json`` or the tokenizer config."""
    templates: dict[str, str] = {}
    config_template = _read_json(folder / "tokenizer_config.json").get("chat_template")
    if isinstance(config_template, str):
        templates["default"] = config_template
    elif isinstance(config_template, list):
        for entry in config_template:
            if isinstance(entry, dict) and isinstance(entry.get("template"), str):
                templates[str(entry.get("name", "default"))] = entry["template"]
    json_template = _read_json(folder / "chat_template.json").get("chat_template")
    if isinstance(json_template, str):
        templates["default"] = json_template
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        templates["default"] = jinja.read_text(encoding="utf-8")
    for extra in sorted((folder / "additional_chat_templates").glob("*.jinja")):
        templates[extra.stem] = extra.read_text(encoding="utf-8")
    return templates


def _config_named_tokens(config: Mapping[str, Any]) -> set[str]:
    """Every special token a config names: its ``*_token`` keys (bos/eos/pad/unk among them; Gemma 4 names
    ``eot_token: <turn|>``, ``stc_token: <|tool_call>``) and its ``extra_special_tokens`` /
    ``additional_special_tokens`` lists. They are control tokens of the vocabulary, whatever they look like."""
    found: set[str] = set()
    for key, value in config.items():
        if key.endswith("_token"):
            text = _token_text(value)
            if text and not text.isspace():
                found.add(text)
        elif key in ("extra_special_tokens", "additional_special_tokens"):
            values = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
            found.update(t for t in map(_token_text, values) if t and not t.isspace())
    return found


def special_tokens_of(folder: Path, templates: Mapping[str, str], defaults: Mapping[str, str]) -> dict[str, Any]:
    """The named special tokens (bos/eos/...), the control tokens, the added tokens, and config ids."""
    config = _read_json(folder / "tokenizer_config.json")
    special_map = _read_json(folder / "special_tokens_map.json")
    named: dict[str, str] = {}
    for key in ("bos_token", "eos_token", "pad_token", "unk_token"):
        text = _token_text(config.get(key)) or _token_text(special_map.get(key)) or defaults.get(key)
        if text:
            named[key] = text
    controls: set[str] = set(named.values()) | _config_named_tokens(config) | _config_named_tokens(special_map)
    added: set[str] = set()
    ids: dict[int, str] = {}
    for token_id, entry in (config.get("added_tokens_decoder") or {}).items():
        text = _token_text(entry)
        if text is None:
            continue
        ids[int(token_id)] = text
        (controls if isinstance(entry, dict) and entry.get("special", True) else added).add(text)
    placeholders = []
    for key in ("bos_token", "eos_token"):
        if key not in named and any(key in source for source in templates.values()):
            named[key] = PLACEHOLDERS[key]
            placeholders.append(f"{key}={PLACEHOLDERS[key]}")
            controls.add(named[key])
    for source in templates.values():
        controls.update(SPECIAL_LITERAL.findall(source))
        added.update(TAG_LITERAL.findall(source))
    return {
        "named": named,
        "controls": sorted(controls),
        "added": sorted(added - controls),
        "ids": ids,
        "placeholders": placeholders,
    }


def build_standin_tokenizer(
    folder: Path, defaults: Mapping[str, str] | None = None, known: Iterable[str] = ()
) -> tuple[Any, dict[int, str], list[str]]:
    """A byte-level tokenizer knowing the folder's special tokens (and ``known`` ones: the model's stop tokens
    from the registry), the config's id -> token text map, and the placeholders used for special tokens nobody
    names."""
    with first_import():
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers
        from transformers import PreTrainedTokenizerFast

    templates = read_templates(folder)
    facts = special_tokens_of(folder, templates, defaults or {})
    facts["controls"] = sorted(set(facts["controls"]) | set(known))
    facts["added"] = [text for text in facts["added"] if text not in facts["controls"]]
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(facts["controls"])
    backend.add_tokens(facts["added"])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, **facts["named"])
    if templates:
        tokenizer.chat_template = templates if len(templates) > 1 else next(iter(templates.values()))
    return tokenizer, facts["ids"], facts["placeholders"]
