"""SWE-bench predictions: one JSONL file per campaign × arm × rep, as the harness and
sb-cli read them (``instance_id``, ``model_name_or_path``, ``model_patch``; SWE-bench
``docs/guides/evaluation.md``).

A predictions file holds one prediction per instance, so each rep of an arm is its own
file: ``predictions/<campaign>/<arm>/rep-<rep>.jsonl``, instances in ledger order.
A prediction is the cell's latest ended attempt (the one the ledger's last line of the
cell stands for) and its patch as the log keeps it (``PatchCaptured``), so the export is
the same after the run dirs are deleted. ``model_name_or_path`` is
``arenad/<campaign>/<arm>``: the system that made the patch, which the harness uses to
name its run.

What the format cannot carry is omitted, and says why (``omitted.jsonl``), never
replaced by a made-up patch:

- an attempt that never reached verification (no patch was taken: unknown, not empty);
- a patch the log kept only the head of (cut at capture's bound) or that is not UTF-8.

An attempt verified with no patch is the empty patch ``""``: what the agent left.
Each prediction also carries ``arenad_lineage`` (the harness reads only its own keys).
"""

from __future__ import annotations

from typing import IO, Any

from arenad.export.output import ExportDir
from arenad.export.source import ExportCell, Head
from arenad.js import js_stringify_bytes

__all__ = ["SwebenchWriter"]


class SwebenchWriter:
    name = "swebench"

    def __init__(self, out: ExportDir, head: Head) -> None:
        self.out = out
        self.files: dict[str, IO[bytes]] = {}
        self.records = 0

    def add(self, cell: ExportCell) -> None:
        heads = [la for la in cell.lines if la.line["role"] != "worker"]
        if not heads:
            return
        last = heads[-1]
        spec = cell.spec
        verified = cell.verified.get(last.attempt)
        patch = cell.patches.get(last.attempt)
        text: str
        if verified is None:
            self.out.omit(last.lineage, "the attempt never reached verification: no patch")
            return
        if patch is None:
            if verified.patch_path is not None:
                self.out.omit(last.lineage, "the patch was not captured in the log")
                return
            text = ""  # verified, and the agent left no change
        elif patch.patch.cut != "none":
            self.out.omit(
                last.lineage,
                f"the log keeps only the first {patch.patch.kept_bytes} of the patch's"
                f" {patch.patch.size} bytes",
            )
            return
        elif patch.patch.encoding != "utf-8":
            self.out.omit(last.lineage, "the patch is not UTF-8 text")
            return
        else:
            text = patch.patch.text
        key = f"predictions/{spec.campaign}/{spec.arm.name}/rep-{spec.rep}.jsonl"
        out = self.files.get(key)
        if out is None:
            out = self.files[key] = self.out.open(key)
        doc: dict[str, Any] = {
            "instance_id": spec.instance.instance_id,
            "model_name_or_path": f"arenad/{spec.campaign}/{spec.arm.name}",
            "model_patch": text,
            "arenad_lineage": last.lineage.as_dict(),
        }
        out.write(js_stringify_bytes(doc) + b"\n")
        self.records += 1

    def finish(self) -> dict[str, Any]:
        for f in self.files.values():
            f.close()
        return {"records": self.records, "files": sorted(self.files)}
