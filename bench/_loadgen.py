"""A lean HTTP/1.1 load generator: pre-built requests over keep-alive sockets, no HTTP library.

Closed loop (``connections`` workers, each sends its next request when the last one answered)
measures the most a server accepts; open loop (requests scheduled at a fixed rate, latency
counted from the scheduled time, so a slow server cannot hide its queue) measures latency at a
given load. Prints one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field


class Conn(asyncio.Protocol):
    """One keep-alive connection with at most one request in flight."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future[int] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        total = end + 4 + _content_length(bytes(self.buffer[:end]).lower())
        if len(self.buffer) < total:
            return
        status = int(self.buffer[9:12])
        del self.buffer[:total]
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(status)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError("connection closed"))

    async def send(self, request: bytes) -> int:
        assert self.transport is not None
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return await self.waiter


def _content_length(head: bytes) -> int:
    at = head.find(b"content-length:")
    if at < 0:
        return 0
    end = head.find(b"\r\n", at)
    return int(head[at + 15 : end if end >= 0 else len(head)])


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)
    sent_at: list[float] = field(default_factory=list)  # each counted request's (due) time
    statuses: dict[int, int] = field(default_factory=dict)
    ok_total: int = 0  # 200s including the warm-up: the gateway must hold one row for each

    def add(self, status: int, latency: float, counted: bool, at: float = 0.0) -> None:
        self.ok_total += status == 200
        if counted:
            self.latencies.append(latency)
            self.sent_at.append(at)
            self.statuses[status] = self.statuses.get(status, 0) + 1


async def connect(port: int, count: int) -> list[Conn]:
    loop = asyncio.get_running_loop()
    conns = []
    for _ in range(count):
        _, conn = await loop.create_connection(Conn, "127.0.0.1", port)
        conns.append(conn)
    return conns


async def closed_loop(
    conns: Sequence[Conn], requests: Sequence[bytes], warmup: float, seconds: float
) -> tuple[Tally, float]:
    """Every connection sends back to back; returns the tally and the measured span."""
    tally = Tally()
    start = time.perf_counter()
    measure_from, stop = start + warmup, start + warmup + seconds
    counter = iter(range(len(requests)))

    async def worker(conn: Conn) -> None:
        for i in counter:
            sent = time.perf_counter()
            if sent >= stop:
                return
            status = await conn.send(requests[i])
            done = time.perf_counter()
            tally.add(status, done - sent, sent >= measure_from, sent)

    await asyncio.gather(*(worker(c) for c in conns))
    return tally, min(time.perf_counter(), stop) - measure_from


async def open_loop(
    conns: Sequence[Conn], requests: Sequence[bytes], rate: float, warmup: float, seconds: float
) -> tuple[Tally, float]:
    """Requests at ``rate`` per second; latency from each request's scheduled time."""
    tally = Tally()
    idle: asyncio.Queue[Conn] = asyncio.Queue()
    for conn in conns:
        idle.put_nowait(conn)
    start = time.perf_counter()
    total = int(rate * (warmup + seconds))
    tasks: set[asyncio.Task[None]] = set()

    async def one(i: int, due: float) -> None:
        conn = await idle.get()
        try:
            status = await conn.send(requests[i])
        finally:
            idle.put_nowait(conn)
        tally.add(status, time.perf_counter() - due, due >= start + warmup, due)

    for i in range(min(total, len(requests))):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(one(i, due))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    await asyncio.gather(*tasks)
    return tally, seconds


def p99_by_second(tally: Tally) -> list[float]:
    """The p99 latency (ms) of the requests sent in each second of the measured span."""
    if not tally.sent_at:
        return []
    first = min(tally.sent_at)
    seconds: dict[int, list[float]] = {}
    for at, latency in zip(tally.sent_at, tally.latencies, strict=True):
        seconds.setdefault(int(at - first), []).append(latency)
    return [round(percentile(seconds[s], 0.99) * 1000, 1) for s in sorted(seconds)]


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def run(args: dict[str, object], requests: Sequence[bytes]) -> dict[str, object]:
    conns = await connect(int(str(args["port"])), int(str(args["connections"])))
    warmup, seconds = float(str(args["warmup"])), float(str(args["seconds"]))
    rate = float(str(args.get("rate") or 0))
    if rate > 0:
        tally, span = await open_loop(conns, requests, rate, warmup, seconds)
    else:
        tally, span = await closed_loop(conns, requests, warmup, seconds)
    for conn in conns:
        assert conn.transport is not None
        conn.transport.close()
    ok = tally.statuses.get(200, 0)
    return {
        "rate": ok / span if span > 0 else 0.0,
        "requests": len(tally.latencies),
        "statuses": {str(k): v for k, v in tally.statuses.items()},
        "p50_ms": percentile(tally.latencies, 0.50) * 1000,
        "p99_ms": percentile(tally.latencies, 0.99) * 1000,
        "p99_ms_by_second": p99_by_second(tally),
        "ok_total": tally.ok_total,
        "exhausted": len(tally.latencies) >= len(requests),
    }


def main(args: dict[str, object], requests: Sequence[bytes], cpu: int | None) -> None:
    """Pin to ``cpu``, run the load, print the result as JSON."""
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})
    print(json.dumps(asyncio.run(run(args, requests))), flush=True)
