"""A template corpus as a model source: ``index.json`` plus ``templates/<name>.jinja``, one entry per distinct
template (deduplicated by sha256), with the hub ids that ship it.

Every entry becomes a folder the matrix audits like any other (:func:`stage`): a folder of symlinks holding the
entry's template as ``chat_template.jinja``, and, when the vocabulary of a model that ships this very template is
in a mirror, that vocabulary's files. The match is a fact, never a guess: the entry's repo or one of its aliases
must name the mirror folder exactly (``Qwen/QwQ-32B`` -> ``<mirror>/Qwen--QwQ-32B``), and that folder's tokenizer
must render Jinja templates (a mistral-common vocabulary takes no template override, so its entry stays at text
level). Without a match the entry is audited at text level with the stand-in tokenizer
(:mod:`tito_audit.model.standin`).

The staged folder is named after the model id it stands for (``<entry>/<org>--<name>``), so that loading reads the
family registry's facts for that id (special-token defaults, stop tokens) as it does for a mirror folder.

An entry whose file is missing or whose sha256 is not the index's is not audited: :func:`read_corpus` says so in
one line and the run goes on; the entry still gets its row (:func:`unreadable_status`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tito_audit import inputs
from tito_audit.errors import BadInputError
from tito_audit.model.registry import family_of
from tito_audit.model.resolve import folder_name, follow_symlink_stub
from tito_audit.model.standin import has_vocabulary
from tito_audit.parse.engines import recorded_engines

INDEX = "index.json"
SAFE_NAME = re.compile(r"[\w.@+-]{1,200}")
"""An entry's name is the stem of its file and of its page: no separators, no control characters."""
TEMPLATES = "templates"
MISSING = "not audited: template file missing"
SHA_MISMATCH = "not audited: template sha256 mismatch"
TEMPLATE_FILES = frozenset({"chat_template.jinja", "chat_template.json"})
"""A vocabulary folder's own templates: never staged (the entry's template is the one audited)."""
NO_JINJA = frozenset({"tekken.json"})
"""Vocabularies rendered by another engine than Jinja (mistral-common): no template override."""


@dataclass(frozen=True)
class CorpusEntry:
    """One template of the corpus and where it stands."""

    name: str
    origin: str
    repo: str | None
    downloads: int
    aliases: tuple[str, ...]
    sha256: str
    template: Path
    tokenizer_folder: Path | None = None
    """The mirror folder holding the vocabulary of a model that ships this template (token level), if any."""
    tokenizer_id: str = ""
    problem: str = ""
    """Why the entry cannot be audited (its file is missing or not the index's bytes); empty when it can."""
    status: str = ""

    @property
    def model_id(self) -> str:
        """The id the entry is audited under: the vocabulary's model, else the first id shipping the template that
        the family registry knows (its facts — special tokens, stop tokens, the engines' parsers — are about that
        model, which ships this very template), else its repo, else its first alias."""
        known = next((i for i in self.model_ids if family_of(i) is not None or recorded_engines(i)), None)
        return self.tokenizer_id or known or self.repo or next(iter(self.aliases), "") or self.name

    @property
    def model_ids(self) -> list[str]:
        """Every hub id that ships the template (repo first, no repeats)."""
        return list(dict.fromkeys(i for i in (self.repo, *self.aliases) if i))


@dataclass
class Corpus:
    folder: Path
    entries: list[CorpusEntry] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """One line per entry that cannot be audited."""
    index_sha256: str = ""


def _file_sha256(path: Path) -> str:
    """The file's sha256; a file past the template bound (or an endless device) raises :class:`ValueError`."""
    with open(path, "rb") as handle:
        data = handle.read(inputs.MAX_TEMPLATE_BYTES + 1)
    if len(data) > inputs.MAX_TEMPLATE_BYTES:
        raise ValueError(f"larger than {inputs.MAX_TEMPLATE_BYTES // inputs.MIB} MiB, or endless")
    return hashlib.sha256(data).hexdigest()


def _vocabulary(ids: list[str], mirrors: list[Path]) -> tuple[Path | None, str]:
    """The first mirror folder named exactly after one of ``ids`` whose files hold a Jinja-rendered vocabulary."""
    for model_id in ids:
        if "/" not in model_id:
            continue
        for mirror in mirrors:
            candidate = mirror / folder_name(model_id)
            if not candidate.is_dir():
                continue
            names = {item.name for item in candidate.iterdir()}
            if has_vocabulary(names) and not names & NO_JINJA:
                return candidate, model_id
    return None, ""


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} is not a non-empty string")
    return value


def _entry(raw: Any, folder: Path, mirrors: list[Path]) -> CorpusEntry:
    if not isinstance(raw, dict):
        raise ValueError("not an object")
    name = _text(raw.get("name"), "name")
    if not SAFE_NAME.fullmatch(name) or name.startswith("."):
        raise ValueError(f"name {name!r} is not a file stem (letters, digits, . _ - @ +)")
    repo = raw.get("repo")
    aliases = raw.get("aliases") or []
    if repo is not None and not isinstance(repo, str):
        raise ValueError("repo is not a string")
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise ValueError("aliases is not a list of strings")
    downloads = raw.get("downloads") or 0
    if not isinstance(downloads, int) or downloads < 0:
        raise ValueError("downloads is not a count")
    entry = CorpusEntry(
        name=name,
        origin=str(raw.get("origin") or ""),
        repo=repo or None,
        downloads=downloads,
        aliases=tuple(aliases),
        sha256=_text(raw.get("sha256"), "sha256").lower(),
        template=folder / TEMPLATES / f"{name}.jinja",
    )
    tokenizer_folder, tokenizer_id = _vocabulary(entry.model_ids, mirrors)
    return CorpusEntry(**{**entry.__dict__, "tokenizer_folder": tokenizer_folder, "tokenizer_id": tokenizer_id})


def _checked(entry: CorpusEntry) -> CorpusEntry:
    """The entry, with its problem and status when its file is missing or is not the index's bytes."""
    relative = f"{TEMPLATES}/{entry.name}.jinja"
    try:
        digest = _file_sha256(entry.template)
    except FileNotFoundError:
        return _with_problem(entry, MISSING, f"corpus entry {entry.name}: {relative} is missing; not audited")
    except (OSError, ValueError) as exc:
        reason = (exc.strerror if isinstance(exc, OSError) else str(exc)) or type(exc).__name__
        return _with_problem(entry, MISSING, f"corpus entry {entry.name}: {relative} cannot be read ({reason})")
    if digest != entry.sha256:
        return _with_problem(
            entry,
            SHA_MISMATCH,
            f"corpus entry {entry.name}: {relative} has sha256 {digest[:12]}…, the index says {entry.sha256[:12]}…; "
            "not audited",
        )
    return entry


def _with_problem(entry: CorpusEntry, status: str, line: str) -> CorpusEntry:
    return CorpusEntry(**{**entry.__dict__, "problem": line, "status": status})


def read_corpus(folder: Path, mirrors: list[Path]) -> Corpus:
    """The corpus in ``folder`` (``--corpus``): every entry checked against its file; a bad index is refused in
    one line (:class:`~tito_audit.errors.BadInputError`), a bad entry is a problem line and the rest goes on."""
    index = folder / INDEX
    try:
        with open(index, "rb") as handle:
            data = handle.read(inputs.MAX_LIST_BYTES + 1)
    except FileNotFoundError as exc:
        raise BadInputError(f"--corpus {folder}: no {INDEX} in {folder}") from exc
    except OSError as exc:
        raise BadInputError(f"--corpus {folder}: cannot read {index} ({exc.strerror or type(exc).__name__})") from exc
    if len(data) > inputs.MAX_LIST_BYTES:
        raise BadInputError(f"--corpus {folder}: {index} is larger than {inputs.MAX_LIST_BYTES // inputs.MIB} MiB")
    try:
        raw_entries = json.loads(data)
    except RecursionError as exc:
        raise BadInputError(f"--corpus {folder}: {index} is JSON nested too deeply to read") from exc
    except ValueError as exc:
        raise BadInputError(f"--corpus {folder}: {index} is not JSON ({exc})") from exc
    if not isinstance(raw_entries, list):
        raise BadInputError(f"--corpus {folder}: {index} is not a list of entries")
    corpus = Corpus(folder=folder, index_sha256=hashlib.sha256(data).hexdigest())
    seen: set[str] = set()
    for position, raw in enumerate(raw_entries):
        try:
            entry = _entry(raw, folder, mirrors)
        except ValueError as exc:
            corpus.problems.append(f"corpus {index} entry {position}: {exc}; skipped")
            continue
        if entry.name in seen:
            corpus.problems.append(f"corpus {index} entry {position}: name {entry.name} repeated; skipped")
            continue
        seen.add(entry.name)
        entry = _checked(entry)
        if entry.problem:
            corpus.problems.append(entry.problem)
        corpus.entries.append(entry)
    return corpus


def _link(link: Path, target: Path) -> None:
    """``link`` -> ``target`` (absolute), replacing a link that points elsewhere."""
    target = target.resolve()
    if link.is_symlink() and Path(os.readlink(link)) == target:
        return
    if link.is_symlink() or link.exists():
        link.unlink()
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)


def stage(entry: CorpusEntry, root: Path) -> Path:
    """The folder the matrix audits for ``entry`` (created or brought up to date under ``root``)."""
    folder = root / entry.name / folder_name(entry.model_id)
    wanted = {"chat_template.jinja": entry.template}
    if entry.tokenizer_folder is not None:
        for item in sorted(entry.tokenizer_folder.iterdir()):
            if item.is_file() and item.name not in TEMPLATE_FILES and not item.name.upper().startswith("PROVENANCE"):
                wanted[item.name] = follow_symlink_stub(item)  # a git symlink stub names its target from its folder
    folder.mkdir(parents=True, exist_ok=True)
    for item in folder.iterdir():
        if item.name not in wanted and (item.is_symlink() or item.is_file()):
            item.unlink()
    for name, target in wanted.items():
        _link(folder / name, target)
    return folder


def stage_root(cache_dir: Path, corpus: Corpus) -> Path:
    """Where the corpus's folders are staged: in the cache, under the index's digest."""
    return cache_dir / "corpus" / corpus.index_sha256[:16]
