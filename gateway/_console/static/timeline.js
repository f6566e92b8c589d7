// The conversation's timeline: the current branch's messages placed among the session's log
// events (agent changes, rewinds, cancelled turns), with the delivery state of each reply.
// Pure functions of (messages, events): easy to re-run after each change.

// send_failed is shown beside its reply, as the failed delivery state.
const MARKERS = new Set(["agent_changed", "head_moved", "turn_cancelled", "chat_migrated"]);
const RANK = { queued: 0, sent: 1, delivered: 2, read: 3 };
const WHY = {
  handoff: "handoff",
  operator: "by an operator",
  fallback: "fallback",
  dead_letter: "after repeated failures",
};

/** What the log says about the messages: seq of each, outbox rows, states, attachments. */
export function indexEvents(events) {
  const index = {
    seqOfAnswer: new Map(), // history message id -> seq of its message event
    seqOfInbound: new Map(), // platform / client message id -> seq of the user message event
    outboxOf: new Map(), // history message id -> outbox id
    delivery: new Map(), // outbox id -> {state, error}
    attachments: new Map(), // attachment id -> latest attachment event detail
    lastRewind: 0,
  };
  for (const event of events) indexOne(index, event);
  return index;
}

function indexOne(index, { seq, kind, detail }) {
  if (kind === "message" && detail.role === "user") {
    if (detail.message_id != null) index.seqOfInbound.set(String(detail.message_id), seq);
  } else if (kind === "message" && typeof detail.message_id === "number") {
    index.seqOfAnswer.set(detail.message_id, seq);
    if (detail.outbox_id != null) index.outboxOf.set(detail.message_id, detail.outbox_id);
  } else if (kind === "status" || kind === "send_failed") {
    index.delivery.set(detail.outbox_id, nextState(index.delivery.get(detail.outbox_id), detail));
  } else if (kind === "attachment") {
    index.attachments.set(detail.id, detail);
  } else if (kind === "head_moved") {
    index.lastRewind = seq;
  }
}

function nextState(current, detail) {
  const state = detail.state === "dead" || detail.state === "uncertain" ? "failed" : detail.state;
  if (state === "failed") return { state, error: detail.error || "no reason given" };
  if (current && current.state !== "failed" && RANK[current.state] > RANK[state]) return current;
  return { state, error: null };
}

/** The delivery state of a reply: null (nothing is sent for it), or {state, error}. */
export function deliveryOf(index, message) {
  const outbox = index.outboxOf.get(message.id);
  if (outbox == null) return null;
  return index.delivery.get(outbox) || { state: "queued", error: null };
}

function inboundIds(message) {
  const refs = Array.isArray(message.data?.messages) ? message.data.messages : [];
  return refs.map((ref) => ref?.message_id).filter((id) => id != null).map(String);
}

function seqOfMessage(index, message) {
  if (message.role === "user") {
    const seqs = inboundIds(message).map((id) => index.seqOfInbound.get(id)).filter(Boolean);
    return seqs.length ? Math.max(...seqs) : null;
  }
  return index.seqOfAnswer.get(message.id) ?? null;
}

/**
 * The items to show, in order: {type: "message", message}, {type: "pending", event}
 * (a user message recorded but not yet in the history: its turn has not committed), and
 * {type: "marker", event}.
 */
export function buildTimeline(messages, events, index) {
  const items = [];
  const seen = new Set();
  // The branch keeps its own order (a message that arrived while a turn ran is logged before
  // that turn's answer but follows it); a message the log does not name (a tool call, a tool's
  // result) follows the one before it, so a turn's tool calls come before its handoff's marker.
  let previous = 0;
  messages.forEach((message, i) => {
    const seq = seqOfMessage(index, message);
    if (message.role === "user") for (const id of inboundIds(message)) seen.add(id);
    if (seq != null) previous = Math.max(previous, seq);
    items.push({ key: [previous, seq != null ? 0 : 1, i], type: "message", message });
  });
  for (const event of events) {
    const key = [event.seq, 0, -1];
    if (MARKERS.has(event.kind) || isNotice(event)) items.push({ key, type: "marker", event });
    else if (isPending(event, seen, index)) items.push({ key, type: "pending", event });
  }
  return items.sort((a, b) => compare(a.key, b.key));
}

/** A message sent to the user outside any turn (a web session's apology): in the log only. */
function isNotice({ kind, detail }) {
  return kind === "message" && detail.role !== "user" && typeof detail.message_id !== "number";
}

function isPending(event, seen, index) {
  if (event.kind !== "message" || event.detail.role !== "user") return false;
  if (event.seq < index.lastRewind) return false; // on a branch the operator left
  const id = event.detail.message_id;
  return id == null || !seen.has(String(id));
}

function compare(a, b) {
  for (let i = 0; i < a.length; i += 1) {
    if (a[i] !== b[i]) return a[i] < b[i] ? -1 : 1;
  }
  return 0;
}

/** A marker's words. */
export function markerText({ kind, detail }) {
  switch (kind) {
    case "agent_changed": {
      const why = WHY[detail.reason] || detail.reason || "changed";
      return `${detail.from || "?"} → ${detail.to || "?"} (${why})`;
    }
    case "head_moved":
      return `rewound to message ${detail.message_id}`;
    case "turn_cancelled":
      return `turn ended without an answer (${detail.reason || "cancelled"})`;
    case "message":
      return `sent to the user: “${detail.text || ""}”`;
    case "chat_migrated":
      return `chat moved from ${detail.from} to ${detail.to}`;
    default:
      return kind;
  }
}
