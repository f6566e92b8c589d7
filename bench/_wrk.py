"""Closed-loop load with wrk (C, one thread) where it is installed: it outruns a Python client.

The requests are built in Python (unique wamids, real signatures) and written one per line;
a small Lua script pre-formats them at start and hands them out in order.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

LUA = """
local requests, n, i = {}, 0, 0
function init(args)
  for line in io.lines(args[1]) do
    local space = line:find(" ")
    n = n + 1
    requests[n] = wrk.format("POST", "/webhooks/whatsapp", {
      ["Content-Type"] = "application/json",
      ["X-Hub-Signature-256"] = "sha256=" .. line:sub(1, space - 1),
    }, line:sub(space + 1))
  end
end
function request()
  i = i + 1
  if i > n then i = 1 end
  return requests[i]
end
"""
_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def available() -> bool:
    return shutil.which("wrk") is not None


def write_requests(path: Path, signed: Sequence[tuple[str, bytes]]) -> None:
    """One ``<hex signature> <body>`` line per request (bodies are compact, single-line JSON)."""
    with path.open("wb") as out:
        for signature, body in signed:
            out.write(signature.encode() + b" " + body + b"\n")


def run(
    port: int, lines: Path, connections: int, seconds: float, cpu: int, count: int
) -> dict[str, Any]:
    """Run wrk for ``seconds``; return the same fields as the Python load generator."""
    script = lines.with_suffix(".lua")
    script.write_text(LUA, encoding="utf-8")
    command = ["wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", "--latency", "-s", str(script)]
    command += [f"http://127.0.0.1:{port}/webhooks/whatsapp", "--", str(lines)]
    output = subprocess.run(
        command,
        capture_output=True,
        text=True,
        check=True,
        timeout=seconds + 120,
        preexec_fn=lambda: os.sched_setaffinity(0, {cpu}),
    ).stdout
    return _parse(output, count)


def _parse(output: str, count: int) -> dict[str, Any]:
    total = int(_find(r"(\d+) requests in", output))
    bad = int(_find(r"Non-2xx or 3xx responses: (\d+)", output, "0"))
    errors = _find(r"Socket errors: (.*)", output, "")
    statuses = {"200": total - bad} | ({"non-2xx": bad} if bad else {})
    return {
        "rate": (total - bad) / total * float(_find(r"Requests/sec:\s+([\d.]+)", output)),
        "requests": total,
        "statuses": statuses | ({"socket errors": errors} if errors else {}),
        "p50_ms": _latency("50%", output),
        "p99_ms": _latency("99%", output),
        "ok_total": total - bad,
        "exhausted": total > count,
    }


def _find(pattern: str, text: str, default: str | None = None) -> str:
    match = re.search(pattern, text)
    if match is None:
        if default is None:
            raise ValueError(f"wrk output without {pattern!r}:\n{text}")
        return default
    return match.group(1)


def _latency(label: str, text: str) -> float:
    value, unit = re.findall(rf"^\s*{label}\s+([\d.]+)(us|ms|s)\s*$", text, re.MULTILINE)[0]
    return float(value) * _UNITS[unit]
