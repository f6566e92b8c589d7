// One session seen by an operator: its current branch, kept live through the event log (applied
// by seq, so a replayed event changes nothing), and the actions on it.

import { api, describeError, query, sessionPath } from "./api.js";
import { byTestId, debounce, h, showError } from "./dom.js";
import { MessageView } from "./messages.js";
import { buildTimeline, indexEvents } from "./timeline.js";
import { windowState } from "./window.js";

const PAGE = 500;
// Events after which the session and its branch are read again (others only re-render).
const RELOAD_ON = new Set([
  "message",
  "agent_changed",
  "head_moved",
  "turn_started",
  "turn_finished",
  "turn_cancelled",
]);

export class Conversation {
  /** getOperator(): the operator's name; onChanged(): a session was changed or deleted here. */
  constructor(root, { live, getOperator, onChanged }) {
    this.root = root;
    this.live = live;
    this.getOperator = getOperator;
    this.onChanged = onChanged;
    this.view = new MessageView({ onRewind: (m) => this.rewind(m) });
    this.sessionId = null;
    this.generation = 0;
    this.reloadSoon = debounce(() => this.reload(), 80);
    this.clear();
    this.wire();
  }

  clear() {
    this.session = null;
    this.messages = [];
    this.events = new Map(); // seq -> {seq, kind, detail, created_at}
    this.lastSeq = 0;
    this.catchingUp = false;
  }

  wire() {
    const on = (id, fn) => byTestId(id, this.root).addEventListener("click", fn);
    on("reply-send", () => this.reply());
    on("handoff-send", () => this.handoff());
    on("cancel-turn", () => this.cancel());
    on("delete-session", () => this.askDelete(true));
    on("keep-session", () => this.askDelete(false));
    on("confirm-delete", () => this.remove());
    byTestId("reply-text", this.root).addEventListener("keydown", (e) => {
      if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) this.reply();
    });
  }

  setAgents(agents) {
    const bots = agents.filter((a) => a.kind !== "human");
    const people = agents.filter((a) => a.kind === "human");
    byTestId("handoff-agent", this.root).replaceChildren(
      ...[...bots, ...people].map((a) =>
        h("option", { value: a.name, title: a.description }, `${a.name} (${a.kind})`),
      ),
    );
  }

  /** Show a session: read its whole log once, then its branch, then follow the log live. */
  async open(sessionId) {
    const generation = ++this.generation;
    this.sessionId = sessionId;
    this.clear();
    this.view.reset(sessionId);
    this.root.hidden = false;
    this.root.dataset.sessionId = sessionId;
    this.askDelete(false);
    this.note(null);
    byTestId("conv-title", this.root).textContent = sessionId;
    byTestId("timeline", this.root).replaceChildren(h("li", { class: "empty" }, "loading…"));
    try {
      await this.readLog(generation);
      await this.reload(generation);
    } catch (err) {
      if (generation === this.generation) this.fail(err);
      return;
    }
    if (generation !== this.generation) return;
    this.live.watch(sessionId, () => this.lastSeq);
  }

  close() {
    this.generation += 1;
    this.sessionId = null;
    this.clear();
    this.live.watch(null);
    this.root.hidden = true;
  }

  async readLog(generation) {
    for (;;) {
      const page = query({ after: this.lastSeq, limit: PAGE });
      const path = sessionPath(this.sessionId, `/events${page}`);
      const { events } = await api(path);
      if (generation !== this.generation) return;
      for (const event of events) this.add(event);
      if (events.length < PAGE) return;
    }
  }

  add(event) {
    if (this.events.has(event.seq)) return false;
    this.events.set(event.seq, event);
    this.lastSeq = Math.max(this.lastSeq, event.seq);
    return true;
  }

  /** A live frame of the log: applied once, in order; a gap is filled from the API. */
  applyLive(frame) {
    if (frame.session_id !== this.sessionId || this.session === null) return;
    if (frame.seq <= this.lastSeq) return;
    if (frame.seq > this.lastSeq + 1) {
      this.catchUp();
      return;
    }
    const detail = frame.data || {};
    const event = { seq: frame.seq, kind: frame.type, detail, created_at: detail.at };
    this.add(event);
    this.react([event]);
  }

  async catchUp() {
    if (this.catchingUp) return;
    this.catchingUp = true;
    const generation = this.generation;
    const before = this.lastSeq;
    try {
      await this.readLog(generation);
    } catch (err) {
      this.error(err);
    } finally {
      this.catchingUp = false;
    }
    if (generation !== this.generation) return;
    this.react([...this.events.values()].filter((e) => e.seq > before));
  }

  react(events) {
    if (events.some((e) => RELOAD_ON.has(e.kind))) this.reloadSoon();
    else this.render();
  }

  /** The session and its current branch, read again. */
  async reload(generation = this.generation) {
    const id = this.sessionId;
    if (!id) return;
    try {
      const [session, { messages }] = await Promise.all([
        api(sessionPath(id)),
        api(sessionPath(id, "/messages")),
      ]);
      if (generation !== this.generation) return;
      this.session = session;
      this.messages = messages;
      this.render();
    } catch (err) {
      if (generation !== this.generation) return;
      if (this.session === null) throw err;
      this.fail(err);
    }
  }

  fail(err) {
    if (err.code === "unknown_session") this.gone();
    this.error(err);
  }

  /** The session no longer exists: say so, stop following it. */
  gone() {
    this.generation += 1;
    this.session = null;
    this.live.watch(null);
    const gone = h("li", { class: "empty", dataset: { testid: "session-gone" } });
    gone.textContent = "This session was deleted.";
    byTestId("timeline", this.root).replaceChildren(gone);
  }

  render() {
    if (!this.session) return;
    this.renderHeader();
    const list = byTestId("timeline", this.root);
    const stick = list.scrollHeight - list.scrollTop - list.clientHeight < 40;
    const events = [...this.events.values()].sort((a, b) => a.seq - b.seq);
    const index = indexEvents(events);
    const items = buildTimeline(this.messages, events, index);
    const headId = this.session.head_id;
    list.replaceChildren(
      ...items.map((item) => this.view.item(item, index, item.message?.id === headId)),
    );
    if (!items.length) list.append(h("li", { class: "empty" }, "No messages yet."));
    if (stick) list.scrollTop = list.scrollHeight;
  }

  renderHeader() {
    const s = this.session;
    byTestId("conv-title", this.root).textContent = `${s.channel} · ${s.chat_id}`;
    byTestId("conv-id", this.root).textContent = s.session_id;
    byTestId("conv-agent", this.root).textContent = s.active_agent;
    const status = byTestId("conv-status", this.root);
    status.textContent = s.status === "running" ? "turn running" : s.status;
    status.className = `badge ${s.status}`;
    status.dataset.status = s.status;
    const badge = byTestId("conv-window", this.root);
    const state = windowState(s);
    badge.hidden = state === null;
    badge.textContent = state?.text ?? "";
    badge.className = `badge ${state?.open ? "window-open" : "window-closed"}`;
  }

  // Actions: each through the admin API; each error shown in words.

  async act(what, call) {
    // One action at a time: a key press or a rewind link is no disabled button, and a
    // second Ctrl+Enter sent the reply twice.
    if (this.acting) return undefined;
    this.acting = true;
    this.error(null);
    this.note(null);
    const buttons = this.root.querySelectorAll(".actions button");
    for (const b of buttons) b.disabled = true;
    try {
      const answer = await call();
      this.note(what);
      this.onChanged?.();
      return answer;
    } catch (err) {
      this.error(err);
      return undefined;
    } finally {
      this.acting = false;
      for (const b of buttons) b.disabled = false;
    }
  }

  async reply() {
    const box = byTestId("reply-text", this.root);
    const text = box.value.trim();
    const operator = this.getOperator();
    if (!operator) {
      return this.error("Type your name in the “Operator” field first: each reply keeps it.");
    }
    if (!text) return this.error("Type the reply first.");
    const sent = await this.act("Reply queued for the user.", () =>
      api(sessionPath(this.sessionId, "/reply"), { method: "POST", body: { text, operator } }),
    );
    if (sent !== undefined) box.value = "";
    this.reloadSoon();
  }

  async handoff() {
    const agent = byTestId("handoff-agent", this.root).value;
    await this.act(`Handed to ${agent}.`, () =>
      api(sessionPath(this.sessionId, "/handoff"), { method: "POST", body: { agent } }),
    );
    this.reloadSoon();
  }

  async rewind(message) {
    await this.act(`Rewound to message ${message.id}; the next turn continues from there.`, () =>
      api(sessionPath(this.sessionId, "/rewind"), {
        method: "POST",
        body: { message_id: message.id },
      }),
    );
    this.reloadSoon();
  }

  async cancel() {
    await this.act("The running turn was told to stop.", () =>
      api(sessionPath(this.sessionId, "/cancel"), { method: "POST" }),
    );
  }

  askDelete(show) {
    byTestId("delete-confirm", this.root).hidden = !show;
  }

  async remove() {
    const id = this.sessionId;
    this.askDelete(false);
    const done = await this.act(`Session ${id} deleted.`, () =>
      api(sessionPath(id), { method: "DELETE" }),
    );
    if (done !== undefined && this.sessionId === id) this.gone();
  }

  error(err) {
    const text = err === null ? null : typeof err === "string" ? err : describeError(err);
    showError(byTestId("action-error", this.root), text);
  }

  note(text) {
    const el = byTestId("action-note", this.root);
    el.textContent = text || "";
    el.hidden = !text;
    clearTimeout(this.noteTimer);
    if (text) this.noteTimer = setTimeout(() => this.note(null), 6000);
  }
}
