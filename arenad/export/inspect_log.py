"""Inspect eval logs: one ``.eval`` file per campaign × arm, written by Inspect's own
recorder (``inspect_ai.log``'s ``EvalRecorder``) and read by ``read_eval_log`` and
``inspect view`` (optional extra ``arenad[inspect]``, pinned).

- A sample is a cell: ``id`` its instance, ``epoch`` its rep + 1 (Inspect counts epochs
  from 1), the latest attempt the ledger has a line for. ``input`` is the instance's
  problem statement; ``messages`` the ledger line's transcript (a supervisor's brain is
  not captured: its sample has none, and names its workers' rollouts in ``metadata``).
- ``scores["verdict"]`` is the ledger's reward and its source; a line with no reward has
  no score (never a made-up 0), and a failed attempt or a gap is the sample's ``error``.
- ``model_usage`` is the line's tokens and cost (an unknown figure is left out).

Determinism: every id and time comes from the log (eval and run ids are derived from
the log's head and the campaign × arm; ``created`` is when its first cell's line was
captured; sample times are the run's); Inspect stamps each
zip member with the time it wrote it, so the finished files are rewritten with the zip
format's fixed epoch, 1980-01-01, and the members in the order Inspect wrote them.
Memory: samples are flushed to the file every ``FLUSH_SAMPLES``; the open groups' files
are written side by side as the cells come in ledger order. Inspect's recorder keeps
every sample's summary until it writes ``summaries.json`` at the end, so memory grows
with a log's samples (measured: 166 MiB at 2 000 cells, 361 MiB at 20 000), unlike the
other exports.
"""

from __future__ import annotations

import hashlib
import json
import uuid
import zipfile
from pathlib import Path
from typing import Any

from arenad.chat import decoded_messages
from arenad.export.hf_common import error_of
from arenad.export.output import ExportDir
from arenad.export.source import ExportCell, Head
from arenad.js import iso_ms

__all__ = ["InspectWriter"]

FLUSH_SAMPLES = 64
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


def _uuid(*parts: str) -> str:
    return str(uuid.UUID(bytes=hashlib.sha256("\0".join(parts).encode()).digest()[:16], version=5))


def _messages(line: dict[str, Any]) -> list[Any]:
    from inspect_ai.model import (
        ChatMessageAssistant,
        ChatMessageSystem,
        ChatMessageTool,
        ChatMessageUser,
        ContentReasoning,
        ContentText,
    )
    from inspect_ai.tool import ToolCall

    out: list[Any] = []
    for i, m in enumerate(decoded_messages(line["messages"])):
        mid = _uuid(line["rollout_id"], str(i))
        content = m.get("content") or ""
        role = m.get("role")
        if role == "system":
            out.append(ChatMessageSystem(id=mid, content=content))
        elif role == "user":
            out.append(ChatMessageUser(id=mid, content=content))
        elif role == "tool":
            out.append(ChatMessageTool(id=mid, content=content, tool_call_id=m.get("tool_call_id")))
        else:
            calls = []
            for c in m.get("tool_calls") or ():
                try:
                    arguments = json.loads(c["function"]["arguments"])
                except ValueError:
                    arguments = None
                if not isinstance(arguments, dict):
                    arguments = {"arguments": c["function"]["arguments"]}
                calls.append(
                    ToolCall(id=c["id"], function=c["function"]["name"], arguments=arguments)
                )
            reasoning = m.get("reasoning_content")
            body: Any = content
            if reasoning:
                body = [ContentReasoning(reasoning=reasoning), ContentText(text=content)]
            out.append(ChatMessageAssistant(id=mid, content=body, tool_calls=calls or None))
    return out


class _Group:
    def __init__(self, eval_spec: Any, location: str) -> None:
        self.eval = eval_spec
        self.location = location
        self.samples = 0
        self.errors = 0
        self.scored = 0
        self.reward_sum = 0.0
        self.buffered = 0
        self.first_ms: int | None = None
        self.last_ms: int | None = None


class InspectWriter:
    name = "inspect"

    def __init__(self, out: ExportDir, head: Head) -> None:
        from inspect_ai.log._recorders.eval import EvalRecorder

        self.out = out
        self.head = head
        self.recorder = EvalRecorder(str(out.root))
        self.groups: dict[tuple[str, str], _Group] = {}
        self.records = 0

    async def _group(self, cell: ExportCell, created: str) -> _Group:
        """The log of the cell's campaign × arm, begun at its first cell (``created``:
        when that cell's line was captured, a time of the log)."""
        from inspect_ai.log import EvalConfig, EvalDataset, EvalPlan, EvalSpec

        spec = cell.spec
        key = (spec.campaign, spec.arm.name)
        group = self.groups.get(key)
        if group is not None:
            return group
        ids = (str(self.head.seq), str(self.head.hash), spec.campaign, spec.arm.name)
        model = getattr(spec.arm, "model", None) or getattr(spec.arm, "driver_model", None)
        eval_spec = EvalSpec(
            eval_id=_uuid("eval", *ids),
            run_id=_uuid("run", str(self.head.seq), str(self.head.hash)),
            created=created,
            task=f"{spec.campaign}/{spec.arm.name}",
            task_id=_uuid("task", spec.campaign, spec.arm.name),
            dataset=EvalDataset(name=spec.suite),
            model=model or "none/none",
            config=EvalConfig(),
            packages={},
            metadata={
                "arenad": {
                    "campaign": spec.campaign,
                    "arm": spec.arm.name,
                    "head_seq": self.head.seq,
                    "head_hash": self.head.hash,
                }
            },
        )
        relative = f"logs/{spec.campaign}/{spec.arm.name}.eval"
        location = str(self.out.path(relative))
        await self.recorder.log_init(eval_spec, location, clean=True)
        await self.recorder.log_start(eval_spec, EvalPlan())
        group = self.groups[key] = _Group(eval_spec, location)
        return group

    async def add(self, cell: ExportCell) -> None:
        from inspect_ai.log import EvalError, EvalSample
        from inspect_ai.model import ModelUsage
        from inspect_ai.scorer import Score

        heads = [la for la in cell.lines if la.line["role"] != "worker"]
        if not heads:
            return
        last = heads[-1]
        line = last.line
        group = await self._group(cell, line["provenance"]["captured_at"])
        outcome = line["outcome"]
        cost = line["cost"]
        reward = outcome["reward"]
        scores = None
        if isinstance(reward, int | float) and not isinstance(reward, bool):
            scores = {
                "verdict": Score(
                    value=float(reward),
                    explanation=outcome["reward_source"],
                    metadata={"resolved": outcome["metrics"].get("resolved")},
                )
            }
            group.scored += 1
            group.reward_sum += float(reward)
        error = error_of(last)
        usage: dict[str, ModelUsage] = {}
        if cost["tokens_in"] is not None or cost["tokens_out"] is not None:
            tin = int(cost["tokens_in"] or 0)
            tout = int(cost["tokens_out"] or 0)
            usage[str(line["policy"]["model"] or "unknown")] = ModelUsage(
                input_tokens=tin,
                output_tokens=tout,
                total_tokens=tin + tout,
                total_cost=float(cost["usd"]) if cost["usd"] is not None else None,
            )
        start, end = cell.run_times.get(last.attempt, (None, None))
        workers = [
            la.line["rollout_id"]
            for la in cell.lines
            if la.line["role"] == "worker" and la.attempt == last.attempt
        ]
        sample = EvalSample(
            id=cell.spec.instance.instance_id,
            epoch=cell.spec.rep + 1,
            input=cell.spec.instance.problem_statement,
            target="",
            messages=_messages(line),
            scores=scores,
            metadata={
                "arenad_lineage": last.lineage.as_dict(),
                "role": line["role"],
                "is_truncated": outcome["is_truncated"],
                "workers": workers,
            },
            model_usage=usage,
            started_at=iso_ms(start) if start is not None else None,
            completed_at=iso_ms(end) if end is not None else None,
            total_time=(end - start) / 1000 if start is not None and end is not None else None,
            uuid=_uuid("sample", line["rollout_id"]),
            error=EvalError(message=error, traceback="", traceback_ansi="")
            if error is not None
            else None,
        )
        await self.recorder.log_sample(group.eval, sample)
        group.samples += 1
        group.errors += error is not None
        for t in (start, end):
            if t is not None:
                group.first_ms = t if group.first_ms is None else min(group.first_ms, t)
                group.last_ms = t if group.last_ms is None else max(group.last_ms, t)
        group.buffered += 1
        self.records += 1
        if group.buffered >= FLUSH_SAMPLES:
            await self.recorder.flush(group.eval)
            group.buffered = 0

    async def finish(self) -> dict[str, Any]:
        from inspect_ai.log import EvalMetric, EvalResults, EvalScore, EvalStats

        files = []
        for key in sorted(self.groups):
            group = self.groups[key]
            metrics = {}
            if group.scored:
                metrics["mean"] = EvalMetric(name="mean", value=group.reward_sum / group.scored)
            results = EvalResults(
                total_samples=group.samples,
                completed_samples=group.samples - group.errors,
                scores=[EvalScore(name="verdict", scorer="arenad", metrics=metrics)]
                if group.scored
                else [],
            )
            stats = EvalStats(
                started_at=iso_ms(group.first_ms) if group.first_ms is not None else "",
                completed_at=iso_ms(group.last_ms) if group.last_ms is not None else "",
            )
            await self.recorder.log_finish(group.eval, "success", stats, results, None)
            _fixed_zip_times(Path(group.location))
            files.append(str(Path(group.location).relative_to(self.out.root)))
        return {"records": self.records, "files": files}


def _fixed_zip_times(path: Path) -> None:
    """The zip rewritten with every member stamped 1980-01-01 (same order, same bytes)."""
    tmp = path.with_suffix(".tmp")
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w") as dst:
        for info in src.infolist():
            fixed = zipfile.ZipInfo(info.filename, date_time=_ZIP_EPOCH)
            fixed.compress_type = info.compress_type
            fixed.external_attr = info.external_attr
            dst.writestr(fixed, src.read(info.filename))
    tmp.replace(path)
