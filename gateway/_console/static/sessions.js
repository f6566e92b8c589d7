// The sessions list: the human queue first (oldest waiting first), then the rest, filtered.

import { api, describeError, query } from "./api.js";
import { byTestId, debounce, duration, h, shortTime, showError } from "./dom.js";

const PAGE = 50;
const QUEUE_PAGE = 500; // the longest-waiting sessions shown (the API's largest page)

export class SessionsList {
  /** root: the list's section; onOpen(sessionId) when one is picked. */
  constructor(root, { onOpen }) {
    this.root = root;
    this.onOpen = onOpen;
    this.selected = null;
    this.limit = PAGE;
    this.queue = [];
    this.queueMore = 0;
    this.fetchedAt = 0;
    this.seq = 0;
    this.refreshSoon = debounce(() => this.refresh(), 250);
    this.filters = ["filter-channel", "filter-agent", "filter-status", "filter-q"].map((id) =>
      byTestId(id, root),
    );
    for (const input of this.filters) {
      input.addEventListener("input", () => {
        this.limit = PAGE;
        this.refreshSoon();
      });
    }
    byTestId("sessions-more", root).addEventListener("click", () => {
      this.limit += PAGE;
      this.refresh();
    });
    this.ticker = setInterval(() => this.renderQueue(), 15000);
  }

  setAgents(agents) {
    const select = byTestId("filter-agent", this.root);
    select.replaceChildren(
      h("option", { value: "" }, "all agents"),
      ...agents.map((a) => h("option", { value: a.name }, `${a.name} (${a.kind})`)),
    );
  }

  select(sessionId) {
    this.selected = sessionId;
    for (const item of this.root.querySelectorAll("[data-session-id]")) {
      item.classList.toggle("selected", item.dataset.sessionId === sessionId);
    }
  }

  values() {
    const [channel, agent, status, q] = this.filters.map((input) => input.value.trim());
    return { channel, agent, status, q };
  }

  async refresh() {
    const seq = ++this.seq;
    const filters = this.values();
    const error = byTestId("sessions-error", this.root);
    try {
      const [queue, page] = await Promise.all([
        api(`/api/queue${query({ limit: QUEUE_PAGE })}`),
        api(`/api/sessions${query({ ...filters, limit: this.limit })}`),
      ]);
      if (seq !== this.seq) return; // a newer refresh is under way
      showError(error, null);
      this.fetchedAt = Date.now();
      this.queue = queue.queue.filter((s) => matches(s, filters));
      this.queueMore = queue.total - queue.queue.length; // waiting past the first page
      this.renderQueue();
      this.renderRest(page);
    } catch (err) {
      if (seq === this.seq) showError(error, describeError(err));
    }
  }

  renderQueue() {
    const list = byTestId("queue-list", this.root);
    const since = (Date.now() - this.fetchedAt) / 1000;
    list.replaceChildren(
      ...this.queue.map((s) =>
        this.item(s, "queue-item", `waiting ${duration(s.waiting_seconds + since)}`),
      ),
    );
    byTestId("queue-empty", this.root).hidden = this.queue.length > 0;
    const count = byTestId("queue-count", this.root);
    const more = this.queueMore > 0 ? ` (+${this.queueMore} waiting less long)` : "";
    count.textContent = `${this.queue.length}${more}`;
    count.dataset.count = String(this.queue.length);
  }

  renderRest(page) {
    const waiting = new Set(this.queue.map((s) => s.session_id));
    const rest = page.sessions.filter((s) => !waiting.has(s.session_id));
    const list = byTestId("session-list", this.root);
    list.replaceChildren(...rest.map((s) => this.item(s, "session-item", shortTime(s.updated_at))));
    byTestId("sessions-empty", this.root).hidden = rest.length > 0;
    byTestId("sessions-more", this.root).hidden = page.sessions.length >= page.total;
  }

  item(session, testid, when) {
    const busy = session.status !== "idle";
    const status = busy ? h("span", { class: `badge ${session.status}` }, session.status) : null;
    const whenId = testid === "queue-item" ? "waiting" : "updated";
    return h(
      "li",
      {},
      h(
        "button",
        {
          class: `session ${session.session_id === this.selected ? "selected" : ""}`,
          dataset: { testid, sessionId: session.session_id },
          onclick: () => this.onOpen(session.session_id),
        },
        h("span", { class: "chat" }, session.chat_id),
        h("span", { class: "when", dataset: { testid: whenId } }, when),
        h("span", { class: "agent" }, `${session.channel} · ${session.active_agent} `, status),
      ),
    );
  }
}

function matches(session, { channel, agent, status, q }) {
  if (channel && session.channel !== channel) return false;
  if (agent && session.active_agent !== agent) return false;
  if (status && session.status !== status) return false;
  // As the API's q: any case.
  const needle = q ? q.toLowerCase() : "";
  const found = (text) => text.toLowerCase().includes(needle);
  if (needle && !found(session.chat_id) && !found(session.session_id)) return false;
  return true;
}
