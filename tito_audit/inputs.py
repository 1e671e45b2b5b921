"""Files the user names, read with a bound: a device that never ends (``/dev/zero``), a file far larger than any
input of its kind, text that is not UTF-8 and JSON nested deeper than Python's recursion limit are each one
:class:`~tito_audit.errors.BadInputError` naming the option and the file, never a ``MemoryError`` or a
``RecursionError`` without a name."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, BinaryIO

from tito_audit.errors import BadInputError

MIB = 1 << 20
MAX_TEMPLATE_BYTES = 4 * MIB
"""``--template``: the largest chat templates are tens of kilobytes."""
MAX_LIST_BYTES = 16 * MIB
"""``--tools``, ``--models-file``: lists of tool schemas or model ids."""
MAX_REPORT_BYTES = 256 * MIB
"""``--baseline``: a JSON report (its examples are bounded per group)."""
MAX_DATA_BYTES = 4096 * MIB
"""``--conversations``: record files (a large real data set is a few hundred megabytes)."""


def describe_os_error(exc: OSError) -> str:
    return exc.strerror or str(exc)


def read_bytes(path: Path, label: str, limit: int) -> bytes:
    """At most ``limit`` bytes of ``path``; a longer file (or an endless device) is refused, naming ``label``."""
    try:
        with open(path, "rb") as handle:
            data = _read_at_most(handle, limit + 1)
    except IsADirectoryError as exc:
        raise BadInputError(f"{label} {path}: a folder, not a file") from exc
    except FileNotFoundError as exc:
        raise BadInputError(f"{label} {path}: no such file") from exc
    except OSError as exc:
        raise BadInputError(f"{label} {path}: {describe_os_error(exc)}") from exc
    except MemoryError as exc:
        raise BadInputError(f"{label} {path}: too large to read into memory") from exc
    if len(data) > limit:
        raise BadInputError(
            f"{label} {path}: larger than {limit // MIB} MiB (or endless), not a {label.lstrip('-')} file"
        )
    return data


def _read_at_most(handle: BinaryIO, count: int) -> bytes:
    """Up to ``count`` bytes of ``handle``, in memory as large as what is read (``read(count)`` would ask for
    ``count`` bytes at once: gigabytes of address space for a small file under a large bound)."""
    size = os.fstat(handle.fileno()).st_size
    if size:  # a regular file: what it holds, and a byte more to tell it grew
        return handle.read(min(size + 1, count))
    chunks, left = [], count
    while left > 0 and (chunk := handle.read(min(left, 1 << 20))):  # a device or a pipe: a megabyte at a time
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_text(path: Path, label: str, limit: int) -> str:
    """The UTF-8 text of ``path`` (bounded as :func:`read_bytes`)."""
    data = read_bytes(path, label, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInputError(f"{label} {path}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from exc


def parse_json(text: str, path: Path | str, label: str, what: str = "JSON") -> Any:
    """``json.loads(text)``; invalid or too deeply nested JSON is one line naming ``label`` and ``path``."""
    try:
        return json.loads(text)
    except RecursionError as exc:
        raise BadInputError(f"{label} {path}: {what} nested too deeply to read (RecursionError)") from exc
    except ValueError as exc:
        raise BadInputError(f"{label} {path}: not valid {what} ({exc})") from exc
