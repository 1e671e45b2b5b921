"""Names for the third-party values the project holds without a type of its own (each is ``Any`` to mypy, named
once here so that a signature says which boundary it stands at).

- :data:`HFTokenizer`: a tokenizer as transformers loads it (a ``PreTrainedTokenizerBase`` subclass, fast or slow,
  or mistral-common's), or the byte-level stand-in with the same methods; transformers' own annotations are partial
  and its classes slow to import.
- :data:`TemplateValue`: a value a chat template computes while it renders (Jinja's runtime: text, numbers, lists,
  mappings, ``Markup``, ``Undefined``, namespaces, macros, whatever the template's data holds); the render guard
  measures it whatever it is.
"""

from __future__ import annotations

from typing import Any, TypeAlias

HFTokenizer: TypeAlias = Any
TemplateValue: TypeAlias = Any
