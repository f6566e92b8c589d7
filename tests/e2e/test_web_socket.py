"""``/ws`` against the real ``gateway serve``: replies, replay after a drop or a crash, dedup of
re-sent messages, cancel, several sockets, bad frames and bad session ids."""

from __future__ import annotations

import json
import uuid

import aiohttp
from pytest_aiohttp import AiohttpServer

from .conftest import MakeGateway
from .gateway_proc import ADMIN_TOKEN, Gateway, eventually
from .test_roundtrip import BILLING, HELP
from .ws_client import SlowModel, WebClient, connect, is_turn_end, seqs, slow_agents


def messages(frames: list[dict]) -> list[tuple[str, str]]:  # type: ignore[type-arg]
    return [(f["data"]["role"], f["data"]["text"]) for f in frames if f["type"] == "message"]


def history(gateway: Gateway, session_id: str) -> list[tuple[str, str, str | None]]:
    rows = gateway.query(
        "SELECT role, text, agent FROM messages WHERE session_id = ? ORDER BY id", session_id
    )
    return [(str(r[0]), str(r[1]), r[2]) for r in rows]


def turns_finished(gateway: Gateway, session_id: str) -> int:
    query = "SELECT count(*) FROM session_events WHERE session_id = ? AND kind = 'turn_finished'"
    count: int = gateway.query(query, session_id)[0][0]
    return count


async def test_ws_message_is_acked_then_answered_through_the_log(
    make_gateway: MakeGateway, http: aiohttp.ClientSession
) -> None:
    gateway = await make_gateway()
    async with connect(http, gateway.url) as client:
        sid = client.session_id
        assert sid.startswith("web-")
        assert uuid.UUID(sid[4:]).version == 4
        ack = await client.say("hello", "c1")
        assert ack["data"] == {"client_id": "c1", "duplicate": False}
        frames = await client.until(is_turn_end, "turn end")
    kinds = [f["type"] for f in frames]
    assert kinds == ["message", "turn_started", "message", "turn_finished"]
    assert messages(frames) == [("user", "hello"), ("assistant", HELP)]
    assert seqs(frames) == [1, 2, 3, 4]
    assert frames[0]["data"]["message_id"] == "c1"
    # Nothing went to a platform: a web reply is its event.
    assert gateway.query("SELECT count(*) FROM outbox") == [(0,)]
    assert history(gateway, sid) == [("user", "hello", None), ("assistant", HELP, "triage")]


async def _answered(client: WebClient, text: str, client_id: str) -> list[dict]:  # type: ignore[type-arg]
    await client.say(text, client_id)
    return await client.until(is_turn_end, "turn end")


async def test_ws_reconnect_replays_exactly_what_was_missed_then_goes_live(
    make_gateway: MakeGateway, http: aiohttp.ClientSession
) -> None:
    gateway = await make_gateway()
    async with connect(http, gateway.url) as first:
        sid = first.session_id
        await _answered(first, "hello", "c1")
        seen = seqs(first.logged())[-1]
        await first.say("my bill please", "c2")  # the answer comes while no socket is there
    await eventually(
        lambda: turns_finished(gateway, sid) == 2, "the second turn, with nobody connected"
    )
    async with connect(http, gateway.url, f"session_id={sid}&after={seen}") as again:
        assert again.frames[0] == {"type": "connection", "data": {"session_id": sid}}
        replayed = await again.until(is_turn_end, "replayed turn end")
        live = await _answered(again, "menu", "c3")
    assert seqs(replayed + live) == list(range(seen + 1, seen + 1 + len(replayed + live)))
    assert messages(replayed) == [("user", "my bill please"), ("assistant", BILLING)]
    assert messages(live)[0] == ("user", "menu")


async def test_ws_an_after_past_the_logs_end_replays_the_log_from_its_start(
    make_gateway: MakeGateway, http: aiohttp.ClientSession
) -> None:
    """A client's ``after`` from before an operator deleted the session: the log began again,
    so the client gets it from seq 1 (it got nothing, deaf to the new log until it passed its
    old seq)."""
    gateway = await make_gateway()
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    async with connect(http, gateway.url) as first:
        sid = first.session_id
        await _answered(first, "hello", "c1")
        await _answered(first, "my bill please", "c2")
        seen = seqs(first.logged())[-1]
    async with http.delete(f"{gateway.url}/api/sessions/{sid}", headers=headers) as deleted:
        assert deleted.status == 204
    async with connect(http, gateway.url, f"session_id={sid}&after={seen}") as again:
        live = await _answered(again, "menu", "c3")  # stores the session anew
    assert seqs(live) == list(range(1, len(live) + 1))
    async with connect(http, gateway.url, f"session_id={sid}&after={seen}") as later:
        replayed = await later.until(is_turn_end, "the new log's turn end")
    assert seqs(replayed) == seqs(live)
    assert messages(replayed)[0] == ("user", "menu")


async def test_ws_replay_and_live_events_survive_sigkill_and_restart(
    make_gateway: MakeGateway, http: aiohttp.ClientSession
) -> None:
    gateway = await make_gateway()
    async with connect(http, gateway.url) as client:
        sid = client.session_id
        await _answered(client, "hello", "c1")
        seen = seqs(client.logged())[-1]
        await client.say("bill", "c2")  # acked, so durable; its turn may be running now
        await gateway.kill()
    await gateway.start()
    async with connect(http, gateway.url, f"session_id={sid}&after={seen}") as again:
        missed = await again.until(lambda f: f["type"] == "turn_finished", "the answer to c2")
        live = await _answered(again, "menu", "c3")
    # Whatever the kill cut (maybe a turn_started and its turn_cancelled), the log goes on from
    # seen + 1 without a gap or a repeat, and c2 is answered exactly once.
    assert seqs(missed + live) == list(range(seen + 1, seen + 1 + len(missed + live)))
    assert messages(missed) == [("user", "bill"), ("assistant", BILLING)]
    assert messages(live)[0] == ("user", "menu")
    async with connect(http, gateway.url, f"session_id={sid}&after=0") as full:
        frames = await full.until(lambda f: f.get("seq") == seqs(live)[-1], "the whole log")
    assert seqs(frames) == list(range(1, seqs(live)[-1] + 1))


async def test_ws_message_resent_after_a_reconnect_gets_one_turn(
    make_gateway: MakeGateway, http: aiohttp.ClientSession
) -> None:
    gateway = await make_gateway()
    async with connect(http, gateway.url) as first:
        sid = first.session_id
        await first.say("hello", "same-id")
    async with connect(http, gateway.url, f"session_id={sid}") as again:
        ack = await again.say("hello", "same-id")  # the client never saw a reply: sends again
        assert ack["data"] == {"client_id": "same-id", "duplicate": True}
        await again.has(is_turn_end, "turn end")
        await _answered(again, "bill", "next-id")  # a later message is still answered
    assert [t for r, t, _ in history(gateway, sid) if r == "user"] == ["hello", "bill"]
    assert turns_finished(gateway, sid) == 2


async def test_ws_cancel_turn_during_a_slow_turn_leaves_no_trace_of_it(
    make_gateway: MakeGateway, http: aiohttp.ClientSession, aiohttp_server: AiohttpServer
) -> None:
    model = SlowModel()
    server = await aiohttp_server(model.app(), host="127.0.0.1")
    gateway = await make_gateway(agents=slow_agents(str(server.make_url("")).rstrip("/")))
    try:
        async with connect(http, gateway.url) as client:
            sid = client.session_id
            await client.say("please think", "c1")
            await model.started.wait()
            await client.send({"type": "cancel_turn"})
            frames = await client.until(is_turn_end, "turn end")
            assert frames[-1]["type"] == "turn_cancelled"
            assert frames[-1]["data"]["reason"] == "cancelled"
            assert messages(frames) == [("user", "please think")]
            await client.send({"type": "cancel_turn"})
            error = await client.next()
            assert error["data"]["code"] == "no_turn_running"
    finally:
        model.release.set()
    # Only the user's message is kept (marked cancelled): no answer, no agent change, no outbox.
    assert history(gateway, sid) == [("user", "please think", None)]
    [(data,)] = gateway.query("SELECT data FROM messages WHERE session_id = ?", sid)
    assert json.loads(data)["cancelled"] is True
    assert gateway.query("SELECT active_agent, status FROM sessions WHERE session_id = ?", sid) == [
        ("slow", "idle")
    ]
    assert gateway.query("SELECT state FROM inbox WHERE session_id = ?", sid) == [("done",)]
    assert gateway.query("SELECT count(*) FROM outbox") == [(0,)]
    assert model.calls == 1  # not re-run


async def test_deleting_a_session_stops_its_running_turn_at_once(
    make_gateway: MakeGateway, http: aiohttp.ClientSession, aiohttp_server: AiohttpServer
) -> None:
    """``DELETE /api/sessions/{id}`` while its model is answering: the turn ends "deleted"
    without waiting for the model (turn_timeout 60 s), so no "typing…" goes on to the erased
    user; nothing is written back."""
    model = SlowModel()
    server = await aiohttp_server(model.app(), host="127.0.0.1")
    gateway = await make_gateway(agents=slow_agents(str(server.make_url("")).rstrip("/")))
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    try:
        async with connect(http, gateway.url) as client:
            sid = client.session_id
            await client.say("forget me", "c1")
            await model.started.wait()
            async with http.delete(f"{gateway.url}/api/sessions/{sid}", headers=headers) as gone:
                assert gone.status == 204

        async def ended_deleted() -> bool:
            async with http.get(f"{gateway.url}/metrics") as response:
                text = await response.text()
            return 'gateway_turns_total{outcome="deleted"} 1.0' in text

        await eventually(ended_deleted, "the turn to end as deleted", seconds=20)
    finally:
        model.release.set()
    assert gateway.query("SELECT count(*) FROM sessions") == [(0,)]
    assert gateway.query("SELECT count(*) FROM messages") == [(0,)]


async def test_ws_two_sockets_on_one_session_see_the_same_events(
    make_gateway: MakeGateway, http: aiohttp.ClientSession
) -> None:
    gateway = await make_gateway()
    async with connect(http, gateway.url) as one:
        sid = one.session_id
        async with connect(http, gateway.url, f"session_id={sid}") as two:
            await one.say("hello", "c1")
            got_one = await one.until(is_turn_end, "turn end on the first socket")
            got_two = await two.until(is_turn_end, "turn end on the second socket")
    assert [f for f in got_one if "seq" in f] == got_two
    assert messages(got_two) == [("user", "hello"), ("assistant", HELP)]


BAD_FRAMES = [
    ("not json", "invalid_json"),
    ("[1, 2]", "invalid_frame"),
    ('{"type": "shout", "data": {}}', "unknown_type"),
    ('{"data": {}}', "unknown_type"),
    ('{"type": "message"}', "invalid_frame"),
    ('{"type": "message", "data": {"text": "x"}}', "invalid_frame"),
    ('{"type": "message", "data": {"text": "x", "client_id": ""}}', "invalid_frame"),
    ('{"type": "message", "data": {"text": "x", "client_id": "a b"}}', "invalid_frame"),
    ('{"type": "message", "data": {"text": 5, "client_id": "c"}}', "invalid_frame"),
    ('{"type": "message", "data": {"text": "x", "client_id": "c", "extra": 1}}', "invalid_frame"),
    ('{"type": "message", "data": {"text": "   ", "client_id": "c"}}', "empty_message"),
    (
        '{"type": "message", "data": {"text": "' + "x" * 301 + '", "client_id": "c"}}',
        "text_too_long",
    ),
    (
        '{"type": "message", "data": {"text": "x", "client_id": "c", "attachments": ["nope"]}}',
        "unknown_attachment",
    ),
    (
        '{"type": "message", "data": {"text": "x", "client_id": "c", "attachments": ["'
        + "0" * 32
        + '"]}}',
        "unknown_attachment",
    ),
    (
        '{"type": "message", "data": {"text": "' + "y" * 1500 + '", "client_id": "c"}}',
        "frame_too_large",
    ),
    ('{"type": "cancel_turn"}', "no_turn_running"),
    ('{"type": "cancel_turn", "data": null}', "no_turn_running"),  # taken: no data, like none
    ('{"type": "cancel_turn", "data": {"x": NaN}}', "invalid_json"),  # Python reads NaN
    ('{"type": "cancel_turn", "data": {"x": Infinity}}', "invalid_json"),
    (
        '{"type": "message", "data": {"text": "x", "client_id": "c", "n": -Infinity}}',
        "invalid_json",
    ),
    ("[" * 400 + "]" * 400, "json_too_deep"),
    ('{"type": "cancel_turn", "data": {"a": ' + "[" * 40 + "]" * 40 + "}}", "json_too_deep"),
    ('{"type": "message", "data": {"text": "\\ud800", "client_id": "c"}}', "invalid_frame"),
    ('{"type": "message", "data": {"text": "a\\u0000b", "client_id": "c"}}', "invalid_frame"),
]


async def test_ws_every_malformed_frame_gets_its_error_and_the_socket_stays_open(
    make_gateway: MakeGateway, http: aiohttp.ClientSession
) -> None:
    gateway = await make_gateway(sections={"web": {"max_frame_bytes": 1024, "max_text_chars": 300}})
    async with connect(http, gateway.url) as client:
        sid = client.session_id
        for text, code in BAD_FRAMES:
            await client.send(text)
            frame = await client.next()
            assert frame["type"] == "error", (text, frame)
            assert frame["data"]["code"] == code, (text, frame)
        await client.ws.send_bytes(b"\x00\x01")
        assert (await client.next())["data"]["code"] == "binary_frame"
        await client.say("hello", "after-the-errors")  # still open, still answered
        await client.until(is_turn_end, "turn end")
    assert gateway.query("SELECT count(*) FROM inbox WHERE session_id = ?", sid) == [(1,)]


async def test_ws_bad_session_ids_are_refused_on_an_open_socket_before_anything_is_created(
    make_gateway: MakeGateway, http: aiohttp.ClientSession
) -> None:
    gateway = await make_gateway()
    cases = [
        ("session_id=", "session_not_connected"),
        ("session_id=web-not-a-uuid", "invalid_session_id"),
        ("session_id=telegram-support-1", "invalid_session_id"),
        ("session_id=web-" + "../" * 3, "invalid_session_id"),
        (f"session_id=web-{uuid.uuid4()}", "unknown_session"),
        ("after=-1", "invalid_after"),
        ("after=%EF%BC%91", "invalid_after"),  # a fullwidth digit: int() would take it
    ]
    for query, code in cases:
        async with http.ws_connect(f"{gateway.url}/ws?{query}") as ws:
            frame = await ws.receive_json(timeout=20)
            assert frame == {
                "type": "error",
                "data": {"code": code, "message": frame["data"]["message"]},
            }
            # The socket stays open, attached to nothing: a message gets the refusal again.
            await ws.send_json({"type": "message", "data": {"text": "hi", "client_id": "c1"}})
            assert await ws.receive_json(timeout=20) == frame
            await ws.send_bytes(b"binary")
            assert await ws.receive_json(timeout=20) == frame
            assert not ws.closed
    assert gateway.query("SELECT count(*) FROM sessions") == [(0,)]
    assert gateway.query("SELECT count(*) FROM inbox") == [(0,)]


async def test_ws_session_id_is_never_logged_in_full(
    make_gateway: MakeGateway, http: aiohttp.ClientSession
) -> None:
    gateway = await make_gateway()
    async with connect(http, gateway.url) as client:
        sid = client.session_id
        await client.say("I want a refund", "c1")  # a handoff: the runner logs the session
        await client.until(is_turn_end, "turn end")
    await gateway.stop()
    log = gateway.log(tail=10_000)
    assert sid[:12] in log
    assert sid not in log
    assert sid.removeprefix("web-") not in log  # nor its uuid, in a message's dedup key
