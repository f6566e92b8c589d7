"""The open-files limit: lifted at start, and checked against the sockets turns may hold.

Every turn waiting on a model holds a socket of that model's pool, so the turns in flight need
about as many open files as ``dispatcher.max_concurrent_turns`` (or the models' pools, if those
are smaller), besides the gateway's own: listening and client sockets, the store, log files.
"""

from __future__ import annotations

import logging
import resource

from .config import Settings

log = logging.getLogger("gateway")

OWN_FILES = 256  # the gateway's files besides the model sockets, with room to spare


def raise_open_files_limit() -> tuple[int, int]:
    """Lift the soft open-files limit to the hard one: every turn waiting on a model holds a
    socket, and a soft limit of 1,024 is reached at about a thousand. Returns (before, after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 65_536)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:  # a container may forbid it: keep going, say so
            log.warning("open-files limit stays %d: %s", soft, exc)
            return soft, soft
        return soft, target
    return soft, soft


def model_sockets(settings: Settings) -> int:
    """How many model requests may be in flight at once: the turns, or the models' pools."""
    pools = sum(model.concurrency for model in settings.agents.models.values())
    return min(settings.dispatcher.max_concurrent_turns, pools)


def too_few_open_files(settings: Settings, limit: int) -> str | None:
    """A warning when ``limit`` cannot hold the model sockets the config allows; else None."""
    sockets = model_sockets(settings)
    if limit == resource.RLIM_INFINITY or sockets == 0 or limit >= sockets + OWN_FILES:
        return None
    return (
        f"the open-files limit ({limit}) is below the {sockets} model requests that"
        f" dispatcher.max_concurrent_turns and agents.models.*.max_concurrency allow in flight,"
        f" plus {OWN_FILES} for the rest: past it, model requests fail with 'Too many open"
        " files'; raise the hard limit (ulimit -Hn, systemd's LimitNOFILE) or lower"
        " dispatcher.max_concurrent_turns"
    )
