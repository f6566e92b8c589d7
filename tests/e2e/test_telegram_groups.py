"""Telegram groups and deep links through the real ``gateway serve``: the bot learns its
username with getMe, answers only what is addressed to it, and hands a /start payload to the
agent."""

from __future__ import annotations

from typing import Any

import aiohttp

from .conftest import MakeGateway, Platforms
from .gateway_proc import BOT, BOT_TOKEN, eventually
from .webhooks import post, telegram_text, telegram_update

USERNAME = "support_bot"
GROUP = -1001987654321
AGENTS = r"""
[agents]
starting_agent = "echo"

[[agents.list]]
name = "echo"
model = "rules"

[[agents.list.rules]]
match = 'start payload: (?P<payload>[\w-]+)'
reply = "welcome from {payload}"

[[agents.list.rules]]
match = '(?P<first>.+)'
reply = "got: {first}"
"""
BOB = {"id": 987654321, "is_bot": False, "first_name": "Bob"}
CHAT = {"id": GROUP, "title": "Support group", "type": "supergroup"}


def group(update_id: int, text: str, **fields: Any) -> dict[str, Any]:
    message = {"message_id": update_id, "date": 1735690500, "chat": CHAT, "from": BOB}
    return {"update_id": update_id, "message": {**message, "text": text, **fields}}


def leading(kind: str, word: str) -> list[dict[str, Any]]:
    return [{"type": kind, "offset": 0, "length": len(word)}]


async def test_e2e_group_answers_only_messages_addressed_to_the_bot(
    make_gateway: MakeGateway, platforms: Platforms, http: aiohttp.ClientSession
) -> None:
    fake = platforms.telegram
    fake.usernames[BOT_TOKEN] = USERNAME  # what getMe tells the gateway at start
    gateway = await make_gateway(AGENTS)
    me = fake.bot_user(BOT_TOKEN)
    ours = {"message_id": 900, "date": 1735690400, "chat": CHAT, "from": me, "text": "Hi"}
    updates = [
        group(1, "anyone seen the match?"),  # chatter
        group(2, "/help@otherbot", entities=leading("bot_command", "/help@otherbot")),
        group(3, "/help@support_bot", entities=leading("bot_command", "/help@support_bot")),
        group(4, "@support_bot my refund?", entities=leading("mention", "@support_bot")),
        group(5, "thanks!", reply_to_message=ours),
        group(1, "anyone seen the match?"),  # a retry of the chatter
    ]
    for update in updates:
        assert await post(http, gateway.url, telegram_update(update)) == 200
    expected = ["got: /help", "got: @support_bot my refund?", "got: thanks!"]
    await eventually(lambda: fake.texts(str(GROUP)) == expected, "the three addressed answers")
    session = f"telegram-{BOT}-{GROUP}"
    messages = await gateway.admin(http, f"/api/sessions/{session}/messages")
    users = [m["text"] for m in messages["messages"] if m["role"] == "user"]
    assert users == ["/help", "@support_bot my refund?", "thanks!"]
    # Every update was claimed once: the ignored ones too, so their retries are dropped.
    claimed = gateway.query("SELECT key FROM processed_messages ORDER BY key")
    assert claimed == [(f"telegram:{BOT}:{n}",) for n in range(1, 6)]
    assert gateway.query("SELECT count(*) FROM deliveries") == [(0,)]


async def test_e2e_a_mention_while_the_username_is_unknown_is_kept_and_answered_once_known(
    make_gateway: MakeGateway, platforms: Platforms, http: aiohttp.ClientSession
) -> None:
    """getMe fails at start: a mention of the bot (or of anyone) cannot be told ours yet, so
    it is quarantined, not dropped; once getMe answers (the background retry) it is replayed:
    the bot's is answered, the other marked replayed, neither twice."""
    fake = platforms.telegram
    fake.usernames[BOT_TOKEN] = USERNAME
    fake.get_me_down = True
    gateway = await make_gateway(AGENTS)
    updates = [
        group(1, "@support_bot my refund?", entities=leading("mention", "@support_bot")),
        group(2, "@alice lunch?", entities=leading("mention", "@alice")),
        group(3, "anyone seen the match?"),  # no mention: not the bot's, known at once
    ]
    for update in updates:
        assert await post(http, gateway.url, telegram_update(update)) == 200

    def kept() -> list[tuple[Any, ...]]:
        return gateway.query("SELECT id, replayed_at IS NOT NULL FROM quarantine ORDER BY id")

    await eventually(lambda: [replayed for _, replayed in kept()] == [False, False], "quarantine")
    fake.get_me_down = False
    await eventually(
        lambda: fake.texts(str(GROUP)) == ["got: @support_bot my refund?"],
        "the answer once getMe answered",
        seconds=40,
    )
    await eventually(lambda: [r for _, r in kept()] == [True, True], "both marked replayed")
    assert fake.texts(str(GROUP)) == ["got: @support_bot my refund?"]
    assert "getMe answered: @support_bot" in gateway.log()


async def test_e2e_deep_link_payload_reaches_the_agent_and_the_metadata(
    make_gateway: MakeGateway, platforms: Platforms, http: aiohttp.ClientSession
) -> None:
    gateway = await make_gateway(AGENTS)
    start = telegram_text(7, 555, "/start ref_campaign42")
    body = start.body.replace(
        b'"text"', b'"entities": [{"type": "bot_command", "offset": 0, "length": 6}], "text"'
    )
    assert await post(http, gateway.url, type(start)(start.path, body, start.headers)) == 200
    fake = platforms.telegram
    await eventually(lambda: fake.texts("555") == ["welcome from ref_campaign42"], "the welcome")
    session = await gateway.admin(http, f"/api/sessions/telegram-{BOT}-555")
    assert session["metadata"]["start_payload"] == "ref_campaign42"
    messages = await gateway.admin(http, f"/api/sessions/telegram-{BOT}-555/messages")
    [user] = [m for m in messages["messages"] if m["role"] == "user"]
    assert user["text"].splitlines() == [
        "/start ref_campaign42",
        "[the user came through a link with start payload: ref_campaign42]",
    ]
