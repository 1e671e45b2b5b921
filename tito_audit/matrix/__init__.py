"""The matrix: model ids in; the published compatibility matrix (reports/) out.

Each (template, tokenizer) pair is audited once (:mod:`.tasks`) on a local pool or Ray (:mod:`.backends`), stored
(:mod:`.store`) and published (:mod:`.publish`, :mod:`.row`).
"""
