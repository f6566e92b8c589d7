// The admin API: the bearer token (this tab's sessionStorage only), fetch, errors in words.

const TOKEN_KEY = "gateway.console.token";

export function getToken() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
}

export function clearToken() {
  sessionStorage.removeItem(TOKEN_KEY);
}

/** A refused or failed call: HTTP status (0: no answer), the API's code and message. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

const WORDS = {
  run_active: "A turn is running for this session; try again in a moment.",
  no_turn_running: "No turn is running for this session, so there is nothing to cancel.",
  cancel_unanswered:
    "The gateway process running this turn did not answer the cancel; it may still be running: try again.",
  unknown_session: "This session does not exist (any more): it may have been deleted.",
  not_on_branch: "That message is not on the session's current branch.",
  unknown_message: "That message does not belong to this session.",
  unknown_agent: "There is no agent by that name.",
  agent_not_allowed: "That agent does not serve this session's bot or number (its agents list).",
  unauthorized: "The admin token was refused: sign in again.",
  admin_disabled: "The admin API is turned off on this gateway (admin.token is empty).",
  window_closed: "The 24-hour WhatsApp window is closed: only a template can be sent now.",
  unknown_button: "No message sent to this chat has that button.",
  unknown_attachment: "That attachment is not stored (any more).",
  store_unavailable: "The gateway's store did not answer; try again.",
  network: "The gateway did not answer: is it running?",
  signed_out: "Signed out: sign in again.",
};

/** What went wrong, in words an operator can act on. */
export function describeError(err) {
  if (!(err instanceof ApiError)) return `Something went wrong: ${err?.message || err}`;
  const words = WORDS[err.code];
  if (words) return words;
  return err.message ? `${err.message} (${err.code})` : `Error ${err.status} (${err.code})`;
}

// Called with the error when the token is refused, so the app can return to the sign-in form.
let onUnauthorized = () => {};
export function whenUnauthorized(handler) {
  onUnauthorized = handler;
}

async function raw(path, { method = "GET", body, signal, token = getToken() } = {}) {
  // Signed out (a refresh still pending at sign-out): nothing to send, not even an empty token.
  if (!token) throw new ApiError(0, "signed_out", "signed out");
  const headers = { Authorization: `Bearer ${token}` };
  const init = { method, headers, signal, cache: "no-store" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(0, "network", "the gateway did not answer");
  }
  if (response.ok) return response;
  throw await errorOf(response);
}

async function errorOf(response) {
  let code = `http_${response.status}`;
  let message = response.statusText;
  try {
    const body = await response.json();
    code = body?.error?.code || code;
    message = body?.error?.message || message;
  } catch {
    // not JSON: keep the status line
  }
  return new ApiError(response.status, code, message);
}

/** Call the API; the parsed JSON answer (null for 204). Throws ApiError. */
export async function api(path, options = {}) {
  try {
    const response = await raw(path, options);
    if (response.status === 204) return null;
    return await response.json();
  } catch (err) {
    if (err instanceof ApiError && err.status === 401 && !options.token) onUnauthorized(err);
    throw err;
  }
}

/** Check a token without keeping it: the console config, or ApiError (401 for a wrong one). */
export function tryToken(token) {
  return api("/api/console/config", { token });
}

/** A file of the API as an object URL (fetched with the header, never a token in a URL). */
export async function blobUrl(path) {
  const response = await raw(path);
  const blob = await response.blob();
  return { url: URL.createObjectURL(blob), type: blob.type };
}

/** A query string of the non-empty values. */
export function query(params) {
  const q = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") q.set(key, String(value));
  }
  const text = q.toString();
  return text ? `?${text}` : "";
}

/** Session ids are [A-Za-z0-9_-], but encode anyway. */
export function sessionPath(id, tail = "") {
  return `/api/sessions/${encodeURIComponent(id)}${tail}`;
}
