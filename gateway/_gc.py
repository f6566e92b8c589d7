"""The garbage collector, tuned for a server whose live objects are mostly long-lived.

A full collection scans every tracked object. Under load, with the backlog's rows, lanes and
replies in memory, CPython's default thresholds ran one every second or so, each pausing the
event loop for 50-150 ms: every ack in flight waited that long (bench/acks.py, docs/benchmarks.md).
Everything built at start (modules, config, agents, adapters) is frozen out of the collector's
sight, and the young generation is collected less often, so full collections become rare.
"""

from __future__ import annotations

import gc

from aiohttp import web

YOUNG = 2_000  # net container allocations between young collections (CPython: 700)
MIDDLE = 10  # young collections per middle one (as CPython)
OLD = 1_000  # middle collections per full one (CPython: 10; a full one also waits for 25% growth)


async def freeze_startup_objects(app: web.Application) -> None:
    """on_startup, after every cleanup context: collect once, freeze what is left, retune."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG, MIDDLE, OLD)
