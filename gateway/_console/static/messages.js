// How one timeline item looks: user, agent, operator, tool and system messages, pending user
// messages, markers, attachments and delivery states.

import { blobUrl, sessionPath } from "./api.js";
import { h, shortTime } from "./dom.js";
import { deliveryOf, markerText } from "./timeline.js";

const DELIVERY_WORDS = { queued: "queued", sent: "sent", delivered: "delivered", read: "read" };

/** Renders items; `files` caches the attachments' object URLs of one session. */
export class MessageView {
  constructor({ onRewind }) {
    this.onRewind = onRewind;
    this.files = new Map(); // attachment id -> Promise<{url, type}>
    this.sessionId = null;
  }

  reset(sessionId) {
    for (const file of this.files.values()) file.then((f) => URL.revokeObjectURL(f.url), () => {});
    this.files.clear();
    this.sessionId = sessionId;
  }

  item(item, index, isHead) {
    if (item.type === "marker") return marker(item.event);
    if (item.type === "pending") return this.pending(item.event, index);
    return this.message(item.message, index, isHead);
  }

  message(m, index, isHead) {
    const role = m.role;
    const toolCall = role === "assistant" && !m.text && !m.attachments?.length;
    if (role === "tool" || role === "system" || toolCall) return folded(m);
    const head = h(
      "div",
      { class: "meta" },
      h("span", { class: "who", dataset: { testid: "message-author" } }, author(m)),
      h("span", { class: "time" }, shortTime(m.created_at)),
      m.data?.cancelled ? h("span", { class: "badge" }, "cancelled") : null,
      deliveryBadge(deliveryOf(index, m)),
      isHead
        ? null
        : h(
            "button",
            {
              class: "link rewind",
              title: "Make this message the head: the next turn continues from here",
              dataset: { testid: "rewind", messageId: String(m.id) },
              onclick: () => this.onRewind(m),
            },
            "rewind here",
          ),
    );
    return h(
      "li",
      { class: `msg ${role}`, dataset: { testid: "message", role, messageId: String(m.id) } },
      head,
      m.text ? h("div", { class: "text", dataset: { testid: "message-text" } }, m.text) : null,
      buttons(m.data?.buttons),
      this.attachments(m.attachments || [], index),
    );
  }

  pending(event, index) {
    const d = event.detail;
    return h(
      "li",
      { class: "msg user pending", dataset: { testid: "message", role: "user", pending: "" } },
      h(
        "div",
        { class: "meta" },
        h("span", { class: "who" }, d.sender_name ? `user (${d.sender_name})` : "user"),
        h("span", { class: "time" }, shortTime(event.created_at)),
        h(
          "span",
          { class: "badge", title: "recorded; its turn has not finished yet" },
          "waiting for the turn",
        ),
      ),
      d.text ? h("div", { class: "text", dataset: { testid: "message-text" } }, d.text) : null,
      this.attachments(d.attachments || [], index),
    );
  }

  attachments(ids, index) {
    if (!ids.length) return null;
    const files = ids.map((id) => this.attachment(id, index.attachments.get(id)));
    return h("div", { class: "files" }, ...files);
  }

  attachment(id, meta) {
    const name = meta?.name || `attachment ${id}`;
    const el = h("div", { class: "file", dataset: { testid: "attachment", attachmentId: id } });
    if (meta?.state === "failed") {
      el.append(`${name}: could not be downloaded (${meta.error || "no reason given"})`);
    } else if (meta?.state === "pending") {
      el.append(`${name} (downloading…)`);
    } else if (meta?.content_type?.startsWith("image/")) {
      const img = h("img", { alt: name, title: name });
      this.file(id).then(
        (f) => (img.src = f.url),
        () => img.replaceWith(`${name} (could not be loaded)`),
      );
      el.append(img);
    } else {
      const size = meta?.size ? ` (${kilobytes(meta.size)})` : "";
      const save = () => this.download(id, meta?.name || `attachment-${id}`);
      el.append(h("button", { class: "link", onclick: save }, `⬇ ${name}${size}`));
    }
    return el;
  }

  file(id) {
    if (!this.files.has(id)) {
      const path = sessionPath(this.sessionId, `/attachments/${encodeURIComponent(id)}`);
      const promise = blobUrl(path);
      promise.catch(() => this.files.delete(id));
      this.files.set(id, promise);
    }
    return this.files.get(id);
  }

  async download(id, name) {
    const { url } = await this.file(id);
    const a = h("a", { href: url, download: name });
    document.body.append(a);
    a.click();
    a.remove();
  }
}

function author(m) {
  if (m.role === "user") return "user";
  if (m.role === "operator") return `operator${m.data?.operator ? `: ${m.data.operator}` : ""}`;
  return m.agent ? `agent ${m.agent}` : "agent";
}

/** Tool calls, tool results and system messages: one small line, opened on demand. */
function folded(m) {
  let label = "system";
  let body = m.text || JSON.stringify(m.data, null, 1);
  if (m.role === "tool") label = `tool ${m.data?.name || ""} answered`;
  if (m.role === "assistant") {
    const calls = Array.isArray(m.data?.tool_calls) ? m.data.tool_calls : [];
    label = `${m.agent || "agent"} calls ${calls.map((c) => c.name).join(", ") || "a tool"}`;
    body = calls.map((c) => `${c.name}(${c.arguments || ""})`).join("\n") || body;
  }
  return h(
    "li",
    { class: "msg folded", dataset: { testid: "message", role: m.role, messageId: String(m.id) } },
    h("details", {}, h("summary", {}, label), h("pre", {}, body)),
  );
}

function marker(event) {
  const testid = `marker-${event.kind.replaceAll("_", "-")}`;
  return h(
    "li",
    { class: `marker ${event.kind}`, dataset: { testid } },
    markerText(event),
  );
}

function buttons(list) {
  if (!Array.isArray(list) || !list.length) return null;
  const chips = list.map((b) => h("span", { class: "chip" }, b.title || b.id || String(b)));
  return h("div", { class: "buttons" }, ...chips);
}

function deliveryBadge(delivery) {
  if (!delivery) return null;
  const { state, error } = delivery;
  const text = state === "failed" ? `failed: ${error}` : DELIVERY_WORDS[state] || state;
  const dataset = { testid: "delivery-status", state };
  return h("span", { class: `badge delivery ${state}`, dataset }, text);
}

function kilobytes(size) {
  if (size < 1024) return `${size} bytes`;
  if (size < 1024 * 1024) return `${Math.round(size / 1024)} KB`;
  return `${(size / 1024 / 1024).toFixed(1)} MB`;
}
