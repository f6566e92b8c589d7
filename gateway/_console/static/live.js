// The live feed: /console/live, authenticated by a one-time ticket sent as the first frame
// (never a token or ticket in the URL), reconnected with backoff, watch re-sent with the last
// seq the view has, so it catches up by sequence number.

import { api } from "./api.js";

const BACKOFF_MS = [250, 500, 1000, 2000, 4000, 8000];

export class LiveFeed {
  /**
   * onEvent(frame): a logged event of the watched session ({type, session_id, seq, data});
   * onSessionsChanged(ids); onState("connecting" | "live" | "reconnecting" | "off");
   * onError(data): an error frame's {code, message}; onReady(): (re)connected.
   */
  constructor({ onEvent, onSessionsChanged, onState, onError, onReady }) {
    this.handlers = { onEvent, onSessionsChanged, onState, onError, onReady };
    this.ws = null;
    this.ready = false;
    this.running = false;
    this.failures = 0;
    this.timer = null;
    this.watching = null; // {sessionId, after: () => last seq the view has}
  }

  start() {
    if (this.running) return;
    this.running = true;
    this.failures = 0;
    this.connect();
  }

  stop() {
    this.running = false;
    clearTimeout(this.timer);
    const ws = this.ws;
    this.ws = null;
    this.ready = false;
    if (ws) ws.close(1000, "signed out");
    this.setState("off");
  }

  /** Watch one session (replaces the previous watch); `after` gives the last seq applied. */
  watch(sessionId, after) {
    this.watching = sessionId ? { sessionId, after } : null;
    this.sendWatch();
  }

  /** For tests: drop the connection as a network failure would; the feed reconnects. */
  dropForTest() {
    if (this.ws) this.ws.close(4999, "dropped for test");
  }

  setState(state) {
    this.state = state;
    this.handlers.onState?.(state);
  }

  async connect() {
    this.setState(this.failures ? "reconnecting" : "connecting");
    let ticket;
    try {
      ({ ticket } = await api("/api/console/ticket", { method: "POST" }));
    } catch (err) {
      if (err.status === 401) return this.stop();
      return this.retry();
    }
    if (!this.running) return;
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const ws = new WebSocket(`${scheme}://${location.host}/console/live`);
    this.ws = ws;
    ws.addEventListener("open", () => ws.send(JSON.stringify({ type: "auth", ticket })));
    ws.addEventListener("message", (msg) => this.receive(ws, msg));
    ws.addEventListener("close", () => this.closed(ws));
  }

  receive(ws, msg) {
    if (ws !== this.ws) return;
    let frame;
    try {
      frame = JSON.parse(msg.data);
    } catch {
      return;
    }
    if (frame.type === "ready") {
      this.ready = true;
      this.failures = 0;
      this.setState("live");
      this.sendWatch();
      // What changed while the feed was down was never announced: read the lists again.
      this.handlers.onReady?.();
    } else if (frame.type === "sessions_changed") {
      this.handlers.onSessionsChanged?.(frame.session_ids || []);
    } else if (frame.type === "error") {
      this.handlers.onError?.(frame.data || {});
    } else if (typeof frame.seq === "number") {
      this.handlers.onEvent?.(frame);
    }
  }

  closed(ws) {
    if (ws !== this.ws) return;
    this.ws = null;
    this.ready = false;
    if (this.running) this.retry();
  }

  retry() {
    if (!this.running) return;
    const delay = BACKOFF_MS[Math.min(this.failures, BACKOFF_MS.length - 1)];
    this.failures += 1;
    this.setState("reconnecting");
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.connect(), delay);
  }

  sendWatch() {
    if (!this.ready || !this.ws) return;
    if (!this.watching) return this.ws.send(JSON.stringify({ type: "unwatch" }));
    const { sessionId, after } = this.watching;
    this.ws.send(JSON.stringify({ type: "watch", session_id: sessionId, after: after() }));
  }
}
