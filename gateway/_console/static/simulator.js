// The sandbox simulator: be the end user of a WhatsApp or Telegram chat. What you type goes
// through /sandbox/api/simulate (a signed delivery on the real webhook route); what the gateway
// sent that chat comes from /sandbox/api/sent, long-polled.

import { api, describeError, query } from "./api.js";
import { byTestId, debounce, h, showError } from "./dom.js";

const DEFAULT_CHAT = { whatsapp: "4915112345678", telegram: "42" };
const SHOWN = { telegram: "sendMessage", whatsapp: "messages" }; // calls that are chat bubbles
const WAIT = 20;

export class Simulator {
  /** onOpenSession(sessionId): show the simulated chat's session in the operator view. */
  constructor(root, { onOpenSession }) {
    this.root = root;
    this.onOpenSession = onOpenSession;
    this.accounts = { telegram: [], whatsapp: [] };
    this.poll = null; // {controller, key}
    this.after = 0;
    this.el = (id) => byTestId(id, root);
    this.restartSoon = debounce(() => this.restart(), 400);
    this.el("sim-channel").addEventListener("change", () => this.channelChanged());
    this.el("sim-account").addEventListener("change", () => this.restart());
    this.el("sim-chat").addEventListener("input", () => this.restartSoon());
    this.el("sim-form").addEventListener("submit", (e) => {
      e.preventDefault();
      this.sendText();
    });
    this.el("sim-image").addEventListener("click", () => this.sendImage());
    this.el("sim-open-session").addEventListener("click", () => {
      this.onOpenSession(this.sessionId());
    });
  }

  /** Show the panel for the sandbox described by /api/console/config, or hide it. */
  configure(sandbox) {
    const enabled = Boolean(sandbox?.enabled);
    this.root.hidden = !enabled;
    document.body.classList.toggle("with-simulator", enabled);
    if (!enabled) return this.stop();
    this.accounts = { telegram: sandbox.telegram || [], whatsapp: sandbox.whatsapp || [] };
    const channels = ["whatsapp", "telegram"].filter((c) => this.accounts[c].length);
    this.el("sim-channel").replaceChildren(...channels.map((c) => h("option", { value: c }, c)));
    this.channelChanged();
  }

  channelChanged() {
    const channel = this.el("sim-channel").value;
    const accounts = this.accounts[channel] || [];
    this.el("sim-account").replaceChildren(...accounts.map((a) => h("option", { value: a }, a)));
    this.el("sim-chat").value = DEFAULT_CHAT[channel] || "1";
    this.restart();
  }

  chat() {
    return {
      channel: this.el("sim-channel").value,
      account: this.el("sim-account").value,
      chat_id: this.el("sim-chat").value.trim(),
    };
  }

  sessionId() {
    const { channel, account, chat_id } = this.chat();
    return `${channel}-${account}-${chat_id}`;
  }

  stop() {
    this.poll?.controller.abort();
    this.poll = null;
  }

  /** A new chat: clear the bubbles and read everything sent to it, then wait for more. */
  restart() {
    this.stop();
    this.after = 0;
    this.el("sim-log").replaceChildren();
    showError(this.el("sim-error"), null);
    const { channel, chat_id } = this.chat();
    if (!channel || !/^[1-9][0-9]{0,14}$/.test(chat_id)) return;
    const controller = new AbortController();
    this.poll = { controller };
    this.loop(controller.signal);
  }

  async loop(signal) {
    const { channel, account, chat_id } = this.chat();
    let wait = 0; // the first read answers at once, and the first after a failed one
    let failure = null; // the words this loop showed for its last failed read
    while (!signal.aborted) {
      try {
        const path = `/sandbox/api/sent${query({ channel, chat_id, after: this.after, wait })}`;
        const { sent } = await api(path, { signal });
        if (signal.aborted) return;
        this.clearError(failure); // the gateway answers again
        failure = null;
        for (const call of sent) this.received(call, account);
        wait = WAIT;
      } catch (err) {
        if (signal.aborted || err.name === "AbortError") return;
        failure = describeError(err);
        showError(this.el("sim-error"), failure);
        if (err.status === 401) return;
        wait = 0;
        await new Promise((resolve) => setTimeout(resolve, 2000));
      }
    }
  }

  /** Clear the error shown, if it still is `text` (a send's error since then stays). */
  clearError(text) {
    const el = this.el("sim-error");
    if (text && el.textContent === text) showError(el, null);
  }

  received(call, account) {
    this.after = Math.max(this.after, call.id);
    if (call.account !== account || call.method !== SHOWN[call.channel]) return;
    const buttons = (call.buttons || []).map((b) => {
      const dataset = { testid: "sim-button", buttonId: b.id };
      return h("button", { class: "chip", dataset, onclick: () => this.press(b) }, b.title);
    });
    this.bubble("bot", call.text || `(${call.method})`, buttons, this.statusControls(call));
  }

  statusControls(call) {
    if (call.channel !== "whatsapp" || !call.platform_id) return null;
    const mark = (state) => {
      const report = () => this.send({ status: { message_id: call.platform_id, state } }, null);
      const dataset = { testid: `sim-status-${state}` };
      return h("button", { class: "link", dataset, onclick: report }, state);
    };
    const links = [mark("delivered"), " · ", mark("read"), " · ", mark("failed")];
    const title = "report a WhatsApp delivery status";
    return h("div", { class: "sim-status", title }, "mark as ", ...links);
  }

  bubble(side, text, buttons = [], extra = null) {
    const log = this.el("sim-log");
    const item = h(
      "li",
      { class: `bubble ${side}`, dataset: { testid: "sim-bubble", from: side } },
      h("div", { class: "text" }, text),
      buttons.length ? h("div", { class: "buttons" }, ...buttons) : null,
      extra,
    );
    log.append(item);
    log.scrollTop = log.scrollHeight;
    return item;
  }

  sendText() {
    const box = this.el("sim-text");
    const text = box.value.trim();
    if (!text) return;
    this.send({ text }, text).then((ok) => ok && (box.value = ""));
  }

  sendImage() {
    const box = this.el("sim-text");
    const caption = box.value.trim();
    this.send({ image: { caption } }, caption ? `[image] ${caption}` : "[image]").then(
      (ok) => ok && (box.value = ""),
    );
  }

  press(button) {
    this.send({ button: button.id }, `▶ ${button.title}`);
  }

  /** Simulate one delivery; `echo` is what the user's side of the chat shows (null: nothing). */
  async send(what, echo) {
    const { channel, account, chat_id } = this.chat();
    showError(this.el("sim-error"), null);
    const mine = echo ? this.bubble("user", echo) : null; // shown at once, before any answer
    try {
      const body = { channel, account, chat_id, ...what };
      const answer = await api("/sandbox/api/simulate", { method: "POST", body });
      if (answer.webhook_status !== 200) {
        throw new Error(`the webhook answered ${answer.webhook_status}`);
      }
      return true;
    } catch (err) {
      mine?.classList.add("failed");
      showError(this.el("sim-error"), describeError(err));
      return false;
    }
  }
}
