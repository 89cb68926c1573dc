"""An export's output directory: written beside its destination, renamed into place.

A format writes its files under a temporary directory next to ``OUT``; when every
record is written the directory gets its manifest (``export.json``) and replaces ``OUT``,
so a reader never sees half an export, and a failed export leaves ``OUT`` as it was.
``OUT`` may be missing, an empty directory or an earlier export (it has a manifest):
anything else is refused, since replacing it would delete what the user keeps there.

Records a format cannot carry are not dropped silently: each is a line of
``omitted.jsonl`` (cell, attempt, why, lineage), counted in the manifest.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import IO, Any

from arenad.errors import UserError
from arenad.export.source import Lineage
from arenad.js import js_stringify_bytes

__all__ = ["MANIFEST", "OMITTED", "ExportDir"]

MANIFEST = "export.json"
OMITTED = "omitted.jsonl"
_BUFFER = 1 << 20


def _check_destination(out: Path) -> None:
    if not out.exists() and not out.is_symlink():
        return
    if not out.is_dir() or out.is_symlink():
        raise UserError(f"{out}: exists and is not a directory")
    if any(out.iterdir()) and not (out / MANIFEST).is_file():
        raise UserError(f"{out}: a directory that is not empty and not an arenad export")


class ExportDir:
    def __init__(self, out: Path) -> None:
        _check_destination(out)
        self.out = out
        out.parent.mkdir(parents=True, exist_ok=True)
        self.root = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
        self._omitted: IO[bytes] | None = None
        self.omitted = 0

    def open(self, relative: str) -> IO[bytes]:
        """A new file of the export (its directories made), buffered for big lines."""
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        return open(path, "wb", buffering=_BUFFER)

    def path(self, relative: str) -> Path:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def omit(self, lineage: Lineage, reason: str) -> None:
        """A record the format cannot carry, and why."""
        if self._omitted is None:
            self._omitted = self.open(OMITTED)
        doc = {"cell": lineage.cell, "attempt": lineage.attempt, "reason": reason}
        self._omitted.write(js_stringify_bytes({**doc, "lineage": lineage.as_dict()}) + b"\n")
        self.omitted += 1

    def commit(self, manifest: dict[str, Any]) -> None:
        if self._omitted is not None:
            self._omitted.close()
        (self.root / MANIFEST).write_bytes(js_stringify_bytes(manifest) + b"\n")
        for dirpath, _dirs, files in os.walk(self.root):
            for name in files:
                os.chmod(os.path.join(dirpath, name), 0o644)
        os.chmod(self.root, 0o755)
        old: Path | None = None
        if self.out.exists():
            old = Path(
                tempfile.mkdtemp(prefix=f".{self.out.name}.", suffix=".old", dir=self.out.parent)
            )
            os.replace(self.out, old / "x")
        os.replace(self.root, self.out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def discard(self) -> None:
        if self._omitted is not None:
            with contextlib.suppress(OSError):
                self._omitted.close()
        shutil.rmtree(self.root, ignore_errors=True)
