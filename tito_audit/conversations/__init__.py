"""Conversations: a seed, scenario names or data files in; validated conversations to audit out.

The message data model (:mod:`.conversation`), the seeded generator and its stress texts, scenario packs, real
trajectories (:mod:`.datasources`), the shapes a template may refuse, and windows of long conversations.
"""
