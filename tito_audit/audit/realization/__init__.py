"""Realization: a conversation in; its assistant turns in forms a model could have written after their prompts out.

:mod:`.acceptance` renders a conversation or retries it in the nearest shape the template accepts,
:mod:`.reasoning_block` learns what the variant's generation prompt leaves open about reasoning (by rendering a
marker), :mod:`.realize` puts each assistant turn in a realizable form and finds where the model's text begins, and
:mod:`.stops` finds the stop tokens that end a turn, with where each came from. The checks read what leaves here.
"""
