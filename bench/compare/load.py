"""The load generator's process: ``python -m bench.compare.load``.

Builds the stream (``bench.compare.stream``) as raw requests and sends it with
``bench._loadgen`` (closed loop, or open loop with ``--rate``), pinned to its core; prints one
JSON object: ``bench._loadgen``'s figures plus the duplicates among the requests answered.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from bench import _loadgen
from bench.compare import stream
from bench.e2e import pin

CLIENT_CPU = 1


async def run(args: argparse.Namespace) -> dict[str, Any]:
    numbers = stream.originals(args.count, args.seed)
    built = stream.requests(args.platform, numbers, args.first)
    result: dict[str, Any] = await _loadgen.run(vars(args), built)
    # Requests leave in stream order; those answered are (within one per connection, in a
    # closed loop) the first ok_total of them.
    answered = int(str(result["ok_total"]))
    result["duplicates_sent"] = stream.duplicates(numbers[:answered])
    return result


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.compare.load", description=__doc__)
    parser.add_argument("platform", choices=["telegram", "whatsapp"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--first", type=int, default=0, help="numbers start here (fresh ids)")
    parser.add_argument("--count", type=int, required=True, help="requests to build")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--rate", type=float, default=0.0, help="open loop at this rate")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=3.0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    pin(CLIENT_CPU)
    print(json.dumps(asyncio.run(run(args))), flush=True)


if __name__ == "__main__":
    main()
