"""``make run``'s first start in a fresh folder: the admin token is made and printed only by a
start that got the server bound and every part of it started, and the sign-in banner names
where the token comes from (docs/security.md#defaults, docs/configuration.md)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import aiohttp

from .gateway_proc import REPO, Gateway, free_port

STRONG = "x7Vq-3nLw_9TzpA2kR5mY8sD1fG4hJ6b"


def demo(directory: Path, port: int, **env: str) -> Gateway:
    """``gateway serve --config config.example.toml`` in ``directory``, as ``make run``."""
    text = (REPO / "config.example.toml").read_text(encoding="utf-8")
    db = directory / "data" / "gateway.db"
    return Gateway(directory, text, port, db, {"GATEWAY_PORT": str(port), **env})


async def failed_start(gateway: Gateway) -> tuple[str, str]:
    """Run ``serve`` to its end; its stdout and stderr (it must exit 1)."""
    process = await asyncio.create_subprocess_exec(
        *gateway.command,
        "serve",
        "--config",
        str(gateway.config_path),
        cwd=gateway.directory,
        env=gateway.environment(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 1, err.decode()
    return out.decode(), err.decode()


def token_of(gateway: Gateway) -> str:
    return (gateway.directory / "data" / "admin-token").read_text(encoding="utf-8").strip()


async def test_a_start_on_a_taken_port_makes_no_token_and_the_next_start_prints_it(
    tmp_path: Path,
) -> None:
    """It printed the new token and then failed; the next start, finding the file, did not
    print it again: the newcomer never saw it."""
    port = free_port()
    gateway = demo(tmp_path, port)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen()
        out, err = await failed_start(gateway)
    assert out == ""  # no banner
    assert err.splitlines() == [
        f"error: {gateway.config_path}: server.port: cannot listen on"
        f" 127.0.0.1:{port}: Address already in use"
    ]
    assert not (tmp_path / "data").exists()  # no token file, no store
    try:
        await gateway.start()
        token = token_of(gateway)
        assert f"mode 0600; printed this once): {token}" in gateway.log()
        assert gateway.log().count(token) == 1
        assert f"Sandbox on: open {gateway.url}/ and sign in with the admin token in" in (
            gateway.log()
        )
    finally:
        await gateway.ensure_stopped()


async def test_a_start_whose_store_fails_prints_neither_token_nor_banner(tmp_path: Path) -> None:
    nobody = f"postgresql://nobody@127.0.0.1:{free_port()}/gateway"
    gateway = demo(tmp_path, free_port(), GATEWAY_STORE_URL=nobody)
    out, err = await failed_start(gateway)
    assert out == ""  # the banner said "Sandbox on: open ..." before the store failed
    assert "Admin token" not in err
    assert err.splitlines()[-1].startswith("error: store.url: the PostgreSQL database did not")
    assert not (tmp_path / "data" / "admin-token").exists()


async def test_the_banner_names_the_variable_the_token_came_from(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    """`GATEWAY_ADMIN_TOKEN=... make run` beside an older data/admin-token: the banner sent
    people to the file, whose token the server refused."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "admin-token").write_text("an-older-token-from-the-file\n")
    gateway = demo(tmp_path, free_port(), GATEWAY_ADMIN_TOKEN=STRONG)
    try:
        await gateway.start()
        assert (
            f"Sandbox on: open {gateway.url}/ and sign in with the admin token in"
            " $GATEWAY_ADMIN_TOKEN (admin.token) to play both sides."
        ) in gateway.log()
        assert STRONG not in gateway.log()
        for token, status in ((STRONG, 200), ("an-older-token-from-the-file", 401)):
            headers = {"Authorization": f"Bearer {token}"}
            async with http.get(f"{gateway.url}/api/sessions", headers=headers) as r:
                assert r.status == status
    finally:
        await gateway.ensure_stopped()
