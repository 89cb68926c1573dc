"""Benchmark: what the model gateway adds to a model call, against direct calls in the same run.

    .venv/bin/python -m bench.gateway [--streams 200] [--rounds 5] [--serial 200] [--quick]

The upstream is the scripted model (``arenad.scripted_model``) in its own process, answering
every call with the same streamed text; the gateway is the real one (``arenad.gateway``, its
own process, started as the daemon starts it) with one attempt's grant. The client is this
process: plain asyncio HTTP/1.1, one connection per call, ``stream: true``, each call read to
its end.

direct
    the client calls the scripted model.
gateway
    the client calls the gateway, which authenticates, checks the caps, forwards, relays
    the stream and journals the call before the last bytes go out.

Printed:

- ``latency p50``: one call at a time, direct and gateway calls interleaved (so both see the
  same machine), request written to last byte read; ``added`` is gateway - direct;
- ``throughput``: ``--streams`` calls at once, calls per second over the batch's wall time,
  the median of ``--rounds`` batches each way (alternating); ``ratio`` is gateway / direct;
- ``CPU per call``: user + system CPU of the gateway, the upstream and this client per
  call, and the throughput ratio they allow when the cores are the bottleneck (on a loaded,
  shared machine the measured ratio swings with the load; these do much less).

Afterwards, outside the timing, the gateway's journal is checked: one line per gateway call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from arenad.gateway import grants, paths, process

SCRIPT_TEXT = ("The quick brown fox jumps over the lazy dog. " * 5).strip()
SCRIPT = f"""
chunk_chars = 16
[[models]]
id = "m"
cost = {{ input = 3.0, output = 15.0 }}
[[conversations]]
[[conversations.steps]]
text = "{SCRIPT_TEXT}"
"""

WARM = 3
_MODEL_BOOT = (
    "import sys, pathlib;"
    "from arenad.scripted_model.server import serve;"
    "serve(pathlib.Path(sys.argv[1]), '127.0.0.1', 0,"
    " lambda port: (print(port, flush=True)))"
)


async def call(port: int, path: str, token: str, body: bytes) -> float:
    """One streamed call read to its end; seconds from the request to the last byte."""
    t0 = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    writer.write(head.encode() + body)
    await writer.drain()
    data = await reader.read()
    writer.close()
    elapsed = time.perf_counter() - t0
    if not data.startswith(b"HTTP/1.1 200") or b"[DONE]" not in data:
        raise RuntimeError(f"bad answer: {data[:200]!r}")
    return elapsed


async def serial(
    targets: dict[str, tuple[int, str]], token: str, body: bytes, n: int
) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {name: [] for name in targets}
    for _ in range(n):
        for name, (port, path) in targets.items():
            out[name].append(await call(port, path, token, body))
    return out


async def batch(port: int, path: str, token: str, body: bytes, streams: int) -> float:
    """Calls per second of ``streams`` calls at once."""
    t0 = time.perf_counter()
    await asyncio.gather(*(call(port, path, token, body) for _ in range(streams)))
    return streams / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gateway")
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--serial", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="20 streams, 2 rounds, 20 serial")
    args = parser.parse_args(argv)
    if args.quick:
        args.streams, args.rounds, args.serial = 20, 2, 20
    with tempfile.TemporaryDirectory(prefix="arenad-bench-gw-") as tmp:
        root = Path(tmp)
        script = root / "script.toml"
        script.write_text(SCRIPT)
        model = subprocess.Popen(
            [sys.executable, "-c", _MODEL_BOOT, str(script)],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        home = root / "home"
        try:
            assert model.stdout is not None
            model_port = int(model.stdout.readline())
            gateway = process.ensure(home, env=dict(os.environ))
            token = grants.issue(
                home,
                grants.Grant(
                    campaign_id="bench",
                    cell_id="c",
                    attempt=1,
                    upstreams={
                        "default": grants.Upstream(base_url=f"http://127.0.0.1:{model_port}/v1")
                    },
                    prices={"m": grants.Price(input=3.0, output=15.0)},
                ),
            )
            body = json.dumps(
                {
                    "model": "m",
                    "stream": True,
                    "stream_options": {"include_usage": True},
                    "messages": [{"role": "user", "content": "go"}],
                }
            ).encode()
            targets = {
                "direct": (model_port, "/v1/chat/completions"),
                "gateway": (gateway.port, "/v1/chat/completions"),
            }
            cpu_before = _cpu_s(gateway.pid), _cpu_s(model.pid), time.process_time()
            report(asyncio.run(measure(targets, token, body, args)), args)
            calls = WARM + args.serial + args.streams * args.rounds
            # CPU per call (user + system): what a relayed call costs beyond a direct one, on
            # a machine whose cores are shared steadier than the wall-time ratio. The model
            # and this client serve both kinds of call (2 * calls); the gateway its own.
            gw_ms = (_cpu_s(gateway.pid) - cpu_before[0]) * 1000 / calls
            model_ms = (_cpu_s(model.pid) - cpu_before[1]) * 1000 / (2 * calls)
            client_ms = (time.process_time() - cpu_before[2]) * 1000 / (2 * calls)
            print(
                f"CPU per call: gateway {gw_ms:.3f} ms, upstream {model_ms:.3f} ms,"
                f" client {client_ms:.3f} ms; CPU-bound ratio ceiling"
                f" {(model_ms + client_ms) / (model_ms + client_ms + gw_ms):.3f}"
            )
            journal = paths.attempt_journal(home, "bench", "c", 1)
            lines = journal.read_bytes().count(b"\n")
            print(f"journal: {lines} lines for {calls} gateway calls")
            if lines != calls:
                print("MISMATCH: the journal does not hold one line per call", file=sys.stderr)
                return 1
        finally:
            process.stop(home)
            model.terminate()
            model.wait()
    return 0


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(
    targets: dict[str, tuple[int, str]], token: str, body: bytes, args: argparse.Namespace
) -> dict[str, dict[str, float]]:
    # Warm both paths (connections, imports, the upstream's first answer).
    await serial(targets, token, body, WARM)
    latencies = await serial(targets, token, body, args.serial)
    rates: dict[str, list[float]] = {name: [] for name in targets}
    for _ in range(args.rounds):
        for name, (port, path) in targets.items():
            rates[name].append(await batch(port, path, token, body, args.streams))
    return {
        name: {
            "p50_ms": statistics.median(latencies[name]) * 1000,
            "p95_ms": statistics.quantiles(latencies[name], n=20)[18] * 1000,
            "calls_per_s": statistics.median(rates[name]),
        }
        for name in targets
    }


def report(figures: dict[str, dict[str, float]], args: argparse.Namespace) -> None:
    direct, gw = figures["direct"], figures["gateway"]
    print(f"latency, one call at a time ({args.serial} calls each, interleaved):")
    for name, f in figures.items():
        print(f"  {name:<8} p50 {f['p50_ms']:8.3f} ms   p95 {f['p95_ms']:8.3f} ms")
    print(f"  added    p50 {gw['p50_ms'] - direct['p50_ms']:8.3f} ms")
    print(f"throughput, {args.streams} streams at once (median of {args.rounds} rounds):")
    for name, f in figures.items():
        print(f"  {name:<8} {f['calls_per_s']:10.1f} calls/s")
    print(f"  ratio    {gw['calls_per_s'] / direct['calls_per_s']:10.3f} (gateway / direct)")


if __name__ == "__main__":
    sys.exit(main())
