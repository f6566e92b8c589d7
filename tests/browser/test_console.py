"""The operator console in a real browser: the demo loop on both platforms through the sandbox,
the live feed across a dropped connection, a 409 while a real turn runs, a queue longer than
one page, and the token.

Every wait is one of Playwright's auto-waiting ``expect`` assertions or an event; no sleeps.
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
from pathlib import Path

import aiohttp
from playwright.async_api import Locator, Page, Request, Route, WebSocket, expect
from pytest_aiohttp import AiohttpServer

from tests.e2e.gateway_proc import eventually
from tests.e2e.ws_client import SlowModel, connect, is_turn_end, slow_agents
from webhook_bot_gateway.store import SQLiteStore

from .conftest import EXAMPLE_CONFIG, REPO, ConsoleGateway, StartGateway

# The README's screenshots are taken by the demo test; they replace the committed ones only
# when asked (GATEWAY_UPDATE_SCREENSHOTS=1), so a test run leaves the checkout as it was.
SHOTS = REPO / "docs" if os.environ.get("GATEWAY_UPDATE_SCREENSHOTS") == "1" else None
WA_USER = "4915112345678"  # the simulator's default WhatsApp chat
TG_USER = "42"  # and Telegram's
HELP = "Hello! I can help with bills"  # triage's reply
QUEUED = "A person from our team will answer"  # human's handoff reply
RUN_ACTIVE = "A turn is running for this session; try again in a moment."
NO_ANSWER = "The gateway did not answer: is it running?"
PIXEL_PNG = base64.b64decode(  # a valid 1x1 PNG
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


# The page, as a person uses it


async def sign_in(page: Page, gateway: ConsoleGateway, operator: str | None = "Ann") -> None:
    await page.goto(gateway.url + "/")
    await page.get_by_test_id("token-input").fill(gateway.token)
    await page.get_by_test_id("sign-in").click()
    await expect(page.get_by_test_id("live-status")).to_have_attribute("data-state", "live")
    if operator:
        await page.get_by_test_id("operator-name").fill(operator)


async def say(page: Page, text: str) -> None:
    """Type as the simulated end user."""
    await page.get_by_test_id("sim-text").fill(text)
    await page.get_by_test_id("sim-send").click()


def bot_said(page: Page, text: str) -> Locator:
    """What the simulated user got from the gateway, containing ``text``."""
    return page.locator('[data-testid="sim-bubble"][data-from="bot"]', has_text=text)


async def press(page: Page, said: str, button: str) -> None:
    """Press a button of a message the simulated user got."""
    await bot_said(page, said).get_by_test_id("sim-button").filter(has_text=button).click()


def listed(page: Page, session: str) -> Locator:
    """The session's entry in the sessions list (the queue or the rest)."""
    return page.get_by_test_id("sessions").locator(f'[data-session-id="{session}"]')


def conversation(page: Page) -> Locator:
    return page.get_by_test_id("conversation")


def shown(page: Page, role: str, text: str) -> Locator:
    """Messages of the operator's view with this role, containing ``text``."""
    return conversation(page).locator(f'[data-testid="message"][data-role="{role}"]', has_text=text)


async def reply(page: Page, text: str) -> None:
    await conversation(page).get_by_test_id("reply-text").fill(text)
    await conversation(page).get_by_test_id("reply-send").click()


async def hand_to(page: Page, agent: str) -> None:
    await conversation(page).get_by_test_id("handoff-agent").select_option(agent)
    await conversation(page).get_by_test_id("handoff-send").click()


async def account(gateway: ConsoleGateway, channel: str) -> str:
    config = await gateway.call("GET", "/api/console/config")
    assert isinstance(config, dict)
    name: str = config["sandbox"][channel][0]
    return name


# (a) and (b): the demo loop


def shot(tmp_path: Path, name: str) -> Path:
    """Where a screenshot goes: docs/ when updating them, else the test's own folder."""
    return (SHOTS or tmp_path) / name


async def test_whatsapp_demo_loop_through_the_human_queue(
    page: Page, gateway: ConsoleGateway, tmp_path: Path
) -> None:
    session = f"whatsapp-{await account(gateway, 'whatsapp')}-{WA_USER}"
    await sign_in(page, gateway)
    await expect(page.get_by_test_id("sim-channel")).to_have_value("whatsapp")
    await expect(page.get_by_test_id("sim-chat")).to_have_value(WA_USER)

    await say(page, "Hello, a question about invoice INV-1001")
    await expect(bot_said(page, "Invoice INV-1001: 49.00 EUR, paid")).to_be_visible()
    await say(page, "menu")
    await expect(bot_said(page, HELP)).to_be_visible()
    await say(page, "I would like to talk to a person")
    await expect(bot_said(page, QUEUED)).to_be_visible()

    waiting = page.get_by_test_id("queue-item").first
    await expect(waiting).to_have_attribute("data-session-id", session)
    await expect(waiting.get_by_test_id("waiting")).to_contain_text("waiting")
    await waiting.click()
    view = conversation(page)
    await expect(view.get_by_test_id("conv-agent")).to_have_text("human")
    await expect(view.get_by_test_id("marker-agent-changed").last).to_contain_text(
        "triage → human (handoff)"
    )
    billing = shown(page, "assistant", "Invoice INV-1001")
    await expect(billing.get_by_test_id("message-author")).to_have_text("agent billing")
    await expect(billing.get_by_test_id("delivery-status")).to_have_text("sent")
    await page.screenshot(path=shot(tmp_path, "console-queue.png"))

    await reply(page, "Hello, this is Ann from support. INV-1001 is paid; anything else?")
    await expect(bot_said(page, "this is Ann from support")).to_be_visible()
    answer = shown(page, "operator", "this is Ann from support")
    await expect(answer.get_by_test_id("message-author")).to_have_text("operator: Ann")
    await expect(answer.get_by_test_id("delivery-status")).to_have_text("sent")
    # The user reads it: WhatsApp reports it, and the console shows it beside the reply.
    await bot_said(page, "this is Ann from support").hover()  # its status links show on hover
    await bot_said(page, "this is Ann from support").get_by_test_id("sim-status-read").click()
    await expect(answer.get_by_test_id("delivery-status")).to_have_text("read")

    await hand_to(page, "triage")
    await expect(view.get_by_test_id("conv-agent")).to_have_text("triage")
    await expect(view.get_by_test_id("marker-agent-changed").last).to_contain_text(
        "human → triage (by an operator)"
    )
    await expect(page.get_by_test_id("queue-item")).to_have_count(0)

    await say(page, "Thanks! And what about invoice INV-1002?")
    await expect(bot_said(page, "Invoice INV-1002: 120.50 EUR, open")).to_be_visible()
    await expect(shown(page, "assistant", "Invoice INV-1002")).to_be_visible()
    await expect(view.get_by_test_id("action-error")).to_be_hidden()
    await page.screenshot(path=shot(tmp_path, "console-conversation.png"))


async def test_telegram_demo_loop_with_button_presses(page: Page, gateway: ConsoleGateway) -> None:
    session = f"telegram-{await account(gateway, 'telegram')}-{TG_USER}"
    await sign_in(page, gateway, operator="Ben")
    await page.get_by_test_id("sim-channel").select_option("telegram")
    await expect(page.get_by_test_id("sim-chat")).to_have_value(TG_USER)

    await say(page, "hello")
    await expect(bot_said(page, HELP)).to_be_visible()
    await press(page, HELP, "Talk to a person")
    await expect(bot_said(page, QUEUED)).to_be_visible()

    waiting = page.get_by_test_id("queue-item").first
    await expect(waiting).to_have_attribute("data-session-id", session)
    await waiting.click()
    await expect(conversation(page).get_by_test_id("conv-agent")).to_have_text("human")
    await reply(page, "Hi, Ben here. How can I help?")
    await expect(bot_said(page, "Ben here")).to_be_visible()
    answer = shown(page, "operator", "Ben here")
    await expect(answer.get_by_test_id("message-author")).to_have_text("operator: Ben")
    await expect(answer.get_by_test_id("delivery-status")).to_have_text("sent")

    await hand_to(page, "triage")
    await expect(conversation(page).get_by_test_id("conv-agent")).to_have_text("triage")
    await say(page, "I have a payment question")
    await expect(bot_said(page, "Billing here")).to_be_visible()
    await press(page, "Billing here", "menu")
    await expect(bot_said(page, HELP)).to_have_count(2)
    await expect(conversation(page).get_by_test_id("conv-agent")).to_have_text("triage")
    await expect(shown(page, "assistant", HELP)).to_have_count(2)


async def test_rewind_and_delete_from_the_conversation(page: Page, gateway: ConsoleGateway) -> None:
    session = f"telegram-{await account(gateway, 'telegram')}-{TG_USER}"
    await sign_in(page, gateway)
    await page.get_by_test_id("sim-channel").select_option("telegram")
    await say(page, "hello")
    await expect(bot_said(page, HELP)).to_be_visible()
    await page.get_by_test_id("sim-open-session").click()
    first = shown(page, "user", "hello")
    await expect(shown(page, "assistant", HELP)).to_be_visible()

    await first.hover()  # its rewind button shows on hover
    await first.get_by_test_id("rewind").click()
    await expect(conversation(page).get_by_test_id("marker-head-moved")).to_be_visible()
    await expect(shown(page, "assistant", HELP)).to_have_count(0)  # not on the branch any more
    await expect(first.get_by_test_id("rewind")).to_have_count(0)  # it is the head now

    await conversation(page).get_by_test_id("delete-session").click()
    await conversation(page).get_by_test_id("keep-session").click()
    await expect(conversation(page).get_by_test_id("delete-confirm")).to_be_hidden()
    await conversation(page).get_by_test_id("delete-session").click()
    await conversation(page).get_by_test_id("confirm-delete").click()
    await expect(conversation(page).get_by_test_id("session-gone")).to_be_visible()
    await expect(listed(page, session)).to_have_count(0)


# (c) the live feed across a dropped connection


async def test_a_dropped_live_feed_catches_up_without_duplicates(
    page: Page, gateway: ConsoleGateway
) -> None:
    chat = "4915110000001"
    session = f"whatsapp-{await account(gateway, 'whatsapp')}-{chat}"
    simulate = {"channel": "whatsapp", "chat_id": chat}
    await gateway.call("POST", "/sandbox/api/simulate", {**simulate, "text": "hello"})
    await sign_in(page, gateway)
    await listed(page, session).click()
    await expect(shown(page, "assistant", HELP)).to_have_count(1)

    released = asyncio.Event()

    async def hold(route: Route) -> None:  # the reconnect waits for its ticket until released
        await released.wait()
        await route.continue_()

    await page.route("**/api/console/ticket", hold)
    await page.evaluate("window.__console.live.dropForTest()")
    await expect(page.get_by_test_id("live-status")).to_have_attribute("data-state", "reconnecting")

    question = "Meanwhile: where is invoice INV-1003?"
    await gateway.call("POST", "/sandbox/api/simulate", {**simulate, "text": question})

    async def answered() -> bool:
        page_ = await gateway.call("GET", f"/api/sessions/{session}/messages")
        assert isinstance(page_, dict)
        return any("INV-1003: 9.99 EUR" in (m["text"] or "") for m in page_["messages"])

    await eventually(answered, "billing's answer in the history")
    await expect(shown(page, "user", question)).to_have_count(0)  # nothing came while dropped

    released.set()
    await expect(page.get_by_test_id("live-status")).to_have_attribute("data-state", "live")
    await expect(shown(page, "assistant", "INV-1003: 9.99 EUR")).to_have_count(1)
    await expect(shown(page, "user", question)).to_have_count(1)
    await expect(shown(page, "user", "hello")).to_have_count(1)
    await expect(shown(page, "assistant", HELP)).to_have_count(1)
    branch = await gateway.call("GET", f"/api/sessions/{session}/messages")
    assert isinstance(branch, dict)
    ids = (
        await conversation(page)
        .locator('[data-testid="message"]')
        .evaluate_all("items => items.map(item => Number(item.dataset.messageId))")
    )
    assert ids == [m["id"] for m in branch["messages"]]


# (d) a 409 while a real turn runs


async def test_a_running_turn_refuses_the_operator_in_words(
    page: Page, start_gateway: StartGateway, aiohttp_server: AiohttpServer, tmp_path: Path
) -> None:
    model = SlowModel()
    server = await aiohttp_server(model.app(), host="127.0.0.1")
    example = EXAMPLE_CONFIG.read_text(encoding="utf-8")
    config = tmp_path / "slow.toml"
    agents = slow_agents(str(server.make_url("")).rstrip("/"))
    config.write_text(example[: example.index("\n[agents]")] + agents, encoding="utf-8")
    try:
        gateway = await start_gateway(config, "slow")
        await sign_in(page, gateway)
        await say(page, "Is anyone there?")
        await asyncio.wait_for(model.started.wait(), 20)
        await page.get_by_test_id("sim-open-session").click()
        view = conversation(page)
        await expect(view.get_by_test_id("conv-status")).to_have_attribute("data-status", "running")
        pending = shown(page, "user", "Is anyone there?")  # recorded, its turn not yet done
        await expect(pending).to_contain_text("waiting for the turn")

        await reply(page, "I am here")
        await expect(view.get_by_test_id("action-error")).to_have_text(RUN_ACTIVE)
        await view.get_by_test_id("action-error").evaluate("el => el.textContent = ''")
        await view.get_by_test_id("handoff-send").click()
        await expect(view.get_by_test_id("action-error")).to_have_text(RUN_ACTIVE)
        assert model.calls == 1

        await view.get_by_test_id("cancel-turn").click()
        await expect(view.get_by_test_id("marker-turn-cancelled")).to_contain_text("cancelled")
        await expect(view.get_by_test_id("conv-status")).to_have_attribute("data-status", "idle")
        await view.get_by_test_id("cancel-turn").click()
        await expect(view.get_by_test_id("action-error")).to_contain_text("No turn is running")
        await reply(page, "I am here now")
        await expect(bot_said(page, "I am here now")).to_be_visible()
    finally:
        model.release.set()


async def test_a_queue_longer_than_one_page_says_how_many_more_wait(
    page: Page, start_gateway: StartGateway, tmp_path: Path
) -> None:
    """The console shows the API's largest page (500) of the queue; the rest are counted
    beside the heading from the queue's ``total``, not left out in silence."""
    waiting = 503
    folder = tmp_path / "long-queue"
    (folder / "data").mkdir(parents=True)
    async with SQLiteStore(folder / "data" / "gateway.db") as store:
        for chat in range(waiting):
            await store.create_session("telegram", "support", str(1_000 + chat), "human")
    gateway = await start_gateway(name="long-queue")
    await sign_in(page, gateway)
    queue = page.get_by_test_id("queue-list").get_by_test_id("queue-item")
    await expect(queue).to_have_count(500)
    count = page.get_by_test_id("queue-count")
    await expect(count).to_have_text(f"500 (+{waiting - 500} waiting less long)")
    await expect(listed(page, "telegram-support-1000")).to_be_visible()  # the longest waiting


# (e) the token


async def test_a_wrong_token_is_refused_and_no_url_carries_the_token(
    page: Page, gateway: ConsoleGateway
) -> None:
    urls: list[str] = []
    bearers: list[str | None] = []

    def request(req: Request) -> None:
        urls.append(req.url)
        if "/api/" in req.url:
            bearers.append(req.headers.get("authorization"))

    def websocket(ws: WebSocket) -> None:
        urls.append(ws.url)

    page.on("request", request)
    page.on("websocket", websocket)

    await page.goto(gateway.url + "/")
    await page.get_by_test_id("token-input").fill("wrong-token")
    await page.get_by_test_id("sign-in").click()
    await expect(page.get_by_test_id("signin-error")).to_have_text("wrong token")
    await expect(page.get_by_test_id("signin")).to_be_visible()
    assert await page.evaluate("sessionStorage.length") == 0

    await sign_in(page, gateway)
    await page.get_by_test_id("sim-text").fill("a photo of my receipt")
    await page.get_by_test_id("sim-image").click()  # an image, fetched by the console as a blob
    await page.get_by_test_id("sim-open-session").click()
    await page.wait_for_function(
        "() => [...document.querySelectorAll('[data-testid=attachment] img')]"
        ".some(img => img.complete && img.naturalWidth > 0)"
    )
    await reply(page, "Thanks for the photo")
    await expect(bot_said(page, "Thanks for the photo")).to_be_visible()
    await page.reload()  # the tab keeps its sign-in, still without a URL
    await expect(page.get_by_test_id("live-status")).to_have_attribute("data-state", "live")
    await page.get_by_test_id("sign-out").click()
    await expect(page.get_by_test_id("signin")).to_be_visible()
    assert await page.evaluate("sessionStorage.length") == 0

    assert any(url.endswith("/console/live") for url in urls), urls
    assert any("/attachments/" in url for url in urls), urls
    leaked = [url for url in urls if gateway.token in url]
    assert not leaked, leaked
    # Every API call (the admin API's and the sandbox's) sent the token in its header instead.
    assert set(bearers) == {"Bearer wrong-token", f"Bearer {gateway.token}"}, set(bearers)


# (f) found by an operator's walk: a reconnect, a search in capitals, a repeated key press


async def test_the_queue_catches_up_after_a_reconnect_and_a_search_in_any_case_keeps_it(
    page: Page, gateway: ConsoleGateway
) -> None:
    """A handoff made while the live feed was down: the queue showed it only at the next,
    unrelated change. A search in capitals emptied the queue (the API's q ignores case)."""
    simulate = {"channel": "whatsapp", "chat_id": "4915110000002"}
    session = f"whatsapp-{await account(gateway, 'whatsapp')}-4915110000002"
    other = f"telegram-{await account(gateway, 'telegram')}-{TG_USER}"
    hello = {"channel": "telegram", "chat_id": TG_USER, "text": "hi"}
    await gateway.call("POST", "/sandbox/api/simulate", hello)
    await sign_in(page, gateway)
    await expect(listed(page, other)).to_have_count(1)
    released = asyncio.Event()

    async def hold(route: Route) -> None:
        await released.wait()
        await route.continue_()

    await page.route("**/api/console/ticket", hold)
    await page.evaluate("window.__console.live.dropForTest()")
    await expect(page.get_by_test_id("live-status")).to_have_attribute("data-state", "reconnecting")
    await gateway.call("POST", "/sandbox/api/simulate", {**simulate, "text": "a person please"})

    async def queued() -> bool:
        answer = await gateway.call("GET", "/api/queue")
        assert isinstance(answer, dict)
        return [s["session_id"] for s in answer["queue"]] == [session]

    await eventually(queued, "the handoff in the API's queue")
    released.set()
    await expect(page.get_by_test_id("live-status")).to_have_attribute("data-state", "live")
    queue = page.get_by_test_id("queue-list").get_by_test_id("queue-item")
    await expect(queue).to_have_count(1)

    await page.get_by_test_id("filter-q").fill("WHATSAPP")
    await expect(listed(page, other)).to_have_count(0)  # the search's refresh came
    await expect(queue).to_have_count(1)
    await expect(queue.first).to_have_attribute("data-session-id", session)


async def test_a_repeated_ctrl_enter_sends_the_operators_reply_once(
    page: Page, gateway: ConsoleGateway
) -> None:
    chat = "4915110000003"
    session = f"whatsapp-{await account(gateway, 'whatsapp')}-{chat}"
    simulate = {"channel": "whatsapp", "chat_id": chat, "text": "a person please"}
    await gateway.call("POST", "/sandbox/api/simulate", simulate)
    await sign_in(page, gateway)
    await listed(page, session).click()
    posted = asyncio.Event()
    released = asyncio.Event()
    posts: list[str] = []

    async def hold(route: Route) -> None:  # the first reply is on its way while keys repeat
        posts.append(route.request.url)
        posted.set()
        await released.wait()
        await route.continue_()

    await page.route("**/reply", hold)
    box = conversation(page).get_by_test_id("reply-text")
    await box.fill("Only once, please")
    await box.press("Control+Enter")
    await asyncio.wait_for(posted.wait(), 10)
    for _ in range(2):
        await box.press("Control+Enter")
    released.set()
    await expect(shown(page, "operator", "Only once, please")).to_have_count(1)
    assert len(posts) == 1  # (the store refused concurrent ones with 409, so count the POSTs)
    history = await gateway.call("GET", f"/api/sessions/{session}/messages")
    assert isinstance(history, dict)
    operator = [m["text"] for m in history["messages"] if m["role"] == "operator"]
    assert operator == ["Only once, please"]


async def test_the_simulators_no_answer_error_goes_once_the_gateway_answers_again(
    page: Page, gateway: ConsoleGateway
) -> None:
    """The simulator's read of what the bot sent failed while the gateway was away; its
    "did not answer" stayed on screen after the reads succeeded again."""
    sent = re.compile(r"/sandbox/api/sent\?")

    async def unreachable(route: Route) -> None:
        await route.abort("connectionrefused")

    await page.route(sent, unreachable)
    await sign_in(page, gateway)
    error = page.get_by_test_id("sim-error")
    await expect(error).to_have_text(NO_ANSWER)
    await page.unroute(sent, unreachable)
    await expect(error).to_be_hidden()
    await say(page, "hello")
    await expect(bot_said(page, HELP)).to_be_visible()


# (g) a web chat user's uploads


async def upload(
    http: aiohttp.ClientSession,
    gateway: ConsoleGateway,
    sid: str,
    name: str,
    data: bytes,
    kind: str,
) -> str:
    """Upload as the web chat client does (no admin token); the new attachment's id."""
    form = aiohttp.FormData()
    form.add_field("file", data, filename=name, content_type=kind)
    async with http.post(f"{gateway.url}/web/sessions/{sid}/attachments", data=form) as response:
        assert response.status == 201, await response.text()
        attachment_id: str = (await response.json())["attachment"]["id"]
        return attachment_id


async def test_a_web_users_uploads_show_by_name_and_an_image_inline(
    page: Page, gateway: ConsoleGateway
) -> None:
    """Uploads showed as "attachment <id>" with no name and no picture: the console names
    files from the log's ``attachment`` events, which only platform downloads wrote."""
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http,
        connect(http, gateway.url) as socket,
    ):
        sid = socket.session_id
        invoice = await upload(http, gateway, sid, "invoice.pdf", b"%PDF-1.4\n", "application/pdf")
        receipt = await upload(http, gateway, sid, "receipt.png", PIXEL_PNG, "image/png")
        await socket.say("my receipt and the invoice", "c1", (invoice, receipt))
        await socket.has(is_turn_end, "the turn's end")
    await sign_in(page, gateway)
    await listed(page, sid).click()
    files = shown(page, "user", "my receipt and the invoice").get_by_test_id("attachment")
    await expect(files).to_have_count(2)
    await expect(files.first).to_have_attribute("data-attachment-id", invoice)
    await expect(files.first).to_have_text("⬇ invoice.pdf (9 bytes)")
    picture = files.last.locator("img")
    await expect(picture).to_have_attribute("alt", "receipt.png")
    await expect(picture).to_have_js_property("naturalWidth", 1)  # fetched with the token, shown


async def test_a_call_made_after_sign_out_sends_nothing(
    page: Page, gateway: ConsoleGateway
) -> None:
    """A refresh still pending when the operator signs out must not reach the API with an
    empty bearer: the tab holds no token, so nothing is sent."""
    sent: list[str | None] = []
    page.on("request", lambda req: sent.append(req.headers.get("authorization")))
    await sign_in(page, gateway)
    await page.get_by_test_id("sign-out").click()
    await expect(page.get_by_test_id("signin")).to_be_visible()
    sent.clear()
    code = await page.evaluate(
        "import('/console/static/api.js').then(m => m.api('/api/queue'))"
        ".then(() => 'sent', err => err.code)"
    )
    assert code == "signed_out"
    assert sent == []
