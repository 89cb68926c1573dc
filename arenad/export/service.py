"""The one door of every export: ``export(home, FORMAT, campaigns, arms, OUT)``.

It takes the log's head, streams the chosen cells (``arenad.export.source``) through the
format's writer into a temporary directory, and puts it in place with its manifest
(``arenad.export.output``). A format is a writer class in ``FORMATS``: a name that
scripts rely on, and one module.

A writer has ``add(cell)`` for each cell in ledger order and ``finish()`` giving its
counts and files; it reads nothing but the cells it is given, so an export is the same
bytes for the same log.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from arenad.errors import UserError
from arenad.export.output import ExportDir
from arenad.export.source import ExportCell, Head, cells_of, log_head
from arenad.home import Home, open_store
from arenad.ledger.service import _no_cycle_collection
from arenad.store.base import EventStore

__all__ = ["FORMATS", "export", "export_store", "writer_class"]


class Writer(Protocol):
    # Either plain or coroutine methods (a writer over an async library: Inspect's).
    def add(self, cell: ExportCell) -> Any: ...

    def finish(self) -> Any: ...


WriterClass = Callable[[ExportDir, Head], Writer]


def _formats() -> dict[str, str]:
    # name -> module: a format's readers' libraries load only when it is used.
    return {
        "swebench": "arenad.export.swebench:SwebenchWriter",
        "inspect": "arenad.export.inspect_log:InspectWriter",
        "atif": "",
        "hf-sft": "arenad.export.hf_sft:SftWriter",
        "hf-rl": "arenad.export.hf_rl:RlWriter",
        "otel": "arenad.export.otel:OtelWriter",
    }


FORMATS = tuple(_formats())


def writer_class(fmt: str) -> WriterClass:
    """The writer of ``fmt``; UserError for a name that is not a format, or one this
    arenad cannot write yet."""
    target = _formats().get(fmt)
    if target is None:
        raise UserError(f"unknown export format {fmt!r}: one of {', '.join(FORMATS)}")
    if not target:
        raise UserError(f"export format {fmt} is not implemented yet (docs/export.md)")
    module, _, name = target.partition(":")
    import importlib

    cls: WriterClass = getattr(importlib.import_module(module), name)
    return cls


async def export_store(
    store: EventStore,
    fmt: str,
    out: Path,
    campaigns: Sequence[str] = (),
    arms: Sequence[str] = (),
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Export ``store`` as ``fmt`` into the directory ``out``; the manifest written."""
    cls = writer_class(fmt)
    head = await log_head(store)
    target = ExportDir(out)
    try:
        writer = cls(target, head)
        cells = 0
        with _no_cycle_collection():
            async for cell in cells_of(store, head, campaigns, arms, progress):
                added = writer.add(cell)
                if inspect.isawaitable(added):
                    await added
                cells += 1
        result = writer.finish()
        if inspect.isawaitable(result):
            result = await result
        manifest: dict[str, Any] = {
            "format": fmt,
            "head": {"seq": head.seq, "hash": head.hash},
            "campaigns": sorted(set(campaigns)),
            "arms": sorted(set(arms)),
            "cells": cells,
            **result,
            "omitted": target.omitted,
        }
        await asyncio.to_thread(target.commit, manifest)
    except BaseException:
        target.discard()
        raise
    return manifest


async def export(
    home: Home,
    fmt: str,
    out: Path,
    campaigns: Sequence[str] = (),
    arms: Sequence[str] = (),
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    writer_class(fmt)  # a bad name is refused before the store is opened
    async with open_store(home) as store:
        return await export_store(store, fmt, out, campaigns, arms, progress)
