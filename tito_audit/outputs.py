"""Writing output files so that a re-run whose results did not change leaves every file untouched.

A file is replaced only when its bytes differ, and then atomically (a temporary file renamed over it), so an
interrupted run never leaves half a report behind.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_if_changed(path: Path, content: str | bytes) -> Path:
    """Write ``content`` (text as UTF-8) to ``path`` unless the file already holds exactly it; returns ``path``."""
    data = content.encode("utf-8") if isinstance(content, str) else content
    try:
        if path.read_bytes() == data:
            return path
    except OSError:
        pass
    write_atomically(path, data)
    return path


def write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
