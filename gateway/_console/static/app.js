// The console's entry point: sign-in, then the sessions list, the conversation, the live feed
// and (with the sandbox) the simulator, wired together.

import {
  api,
  clearToken,
  describeError,
  getToken,
  setToken,
  tryToken,
  whenUnauthorized,
} from "./api.js";
import { Conversation } from "./conversation.js";
import { byTestId, showError } from "./dom.js";
import { LiveFeed } from "./live.js";
import { SessionsList } from "./sessions.js";
import { Simulator } from "./simulator.js";

const OPERATOR_KEY = "gateway.console.operator";
const $ = (id) => byTestId(id);

const live = new LiveFeed({
  onEvent: (frame) => conversation.applyLive(frame),
  onSessionsChanged: () => sessions.refreshSoon(),
  onReady: () => sessions.refreshSoon(),
  onState: (state) => {
    const el = $("live-status");
    el.dataset.state = state;
    el.textContent = state;
  },
  onError: (data) => liveError(data),
});
const sessions = new SessionsList(document.getElementById("sessions"), {
  onOpen: (id) => openSession(id),
});
const conversation = new Conversation(document.getElementById("conversation"), {
  live,
  getOperator: () => $("operator-name").value.trim(),
  onChanged: () => sessions.refreshSoon(),
});
const simulator = new Simulator(document.getElementById("simulator"), {
  onOpenSession: (id) => openSession(id),
});

// For the browser tests and for curious operators: the parts, e.g. live.dropForTest().
window.__console = { live, sessions, conversation, simulator };

function openSession(id) {
  sessions.select(id);
  $("no-conversation").hidden = true;
  document.body.classList.add("viewing");
  history.replaceState(null, "", `#session=${encodeURIComponent(id)}`);
  conversation.open(id);
  if (window.matchMedia("(max-width: 799px)").matches) {
    document.getElementById("conversation").scrollIntoView();
  }
}

function closeSession() {
  conversation.close();
  sessions.select(null);
  $("no-conversation").hidden = false;
  document.body.classList.remove("viewing");
  history.replaceState(null, "", location.pathname);
}

function liveError({ code, message }) {
  if ((code === "session_gone" || code === "unknown_session") && conversation.sessionId) {
    conversation.gone();
    sessions.refreshSoon();
    return;
  }
  showError($("live-error"), `Live feed: ${message || code}`);
  setTimeout(() => showError($("live-error"), null), 8000);
}

async function start(config) {
  document.getElementById("signin").hidden = true;
  document.getElementById("app").hidden = false;
  $("operator-name").value = localStorage.getItem(OPERATOR_KEY) || "";
  live.start();
  simulator.configure(config.sandbox);
  sessions.refresh();
  try {
    const { agents } = await api("/api/agents");
    sessions.setAgents(agents);
    conversation.setAgents(agents);
  } catch (err) {
    showError($("live-error"), `Agents: ${describeError(err)}`);
  }
  const wanted = new URLSearchParams(location.hash.slice(1)).get("session");
  if (wanted) openSession(wanted);
}

function signOut(reason = null) {
  clearToken();
  live.stop();
  simulator.stop();
  closeSession();
  document.getElementById("app").hidden = true;
  document.getElementById("signin").hidden = false;
  showError($("signin-error"), reason);
  $("token-input").value = "";
  $("token-input").focus();
}

async function signIn(token) {
  showError($("signin-error"), null);
  try {
    const config = await tryToken(token);
    setToken(token);
    await start(config);
  } catch (err) {
    const words = err.status === 401 ? "wrong token" : describeError(err);
    showError($("signin-error"), words);
  }
}

$("signin-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const token = $("token-input").value.trim();
  if (token) signIn(token);
});
$("sign-out").addEventListener("click", () => signOut());
$("back").addEventListener("click", () => closeSession());
$("operator-name").addEventListener("input", (event) => {
  localStorage.setItem(OPERATOR_KEY, event.target.value.trim());
});
whenUnauthorized(() => signOut("The admin token was refused: sign in again."));

const saved = getToken();
if (saved) signIn(saved);
else $("token-input").focus();
