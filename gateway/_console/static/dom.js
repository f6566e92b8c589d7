// Small DOM helpers shared by the console's modules.

/** h("div", {class: "x", dataset: {testid: "y"}, onclick: fn}, child, ...): one element. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "dataset") Object.assign(el.dataset, value);
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else if (key in el && typeof value !== "string") el[key] = value;
    else el.setAttribute(key, value === true ? "" : value);
  }
  el.append(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  return el;
}

/** The element with this data-testid inside root (document by default). */
export function byTestId(id, root = document) {
  return root.querySelector(`[data-testid="${id}"]`);
}

/** "just now", "4 min", "2 h 5 min", "3 d". */
export function duration(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) return s < 10 ? "just now" : `${s} s`;
  const min = Math.floor(s / 60);
  if (min < 60) return `${min} min`;
  const hours = Math.floor(min / 60);
  if (hours < 24) return min % 60 ? `${hours} h ${min % 60} min` : `${hours} h`;
  return `${Math.floor(hours / 24)} d`;
}

/** A short local time of an ISO 8601 string: today "14:05", otherwise "3 Mar 14:05". */
export function shortTime(iso) {
  if (!iso) return "";
  const at = new Date(iso);
  if (Number.isNaN(at.getTime())) return "";
  const time = at.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  if (at.toDateString() === new Date().toDateString()) return time;
  return `${at.toLocaleDateString([], { day: "numeric", month: "short" })} ${time}`;
}

/** Call fn at most once per `ms`, after the calls stop (the last arguments win). */
export function debounce(fn, ms) {
  let timer = null;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}

/** Show an error (or clear it with null) in an element meant for one. */
export function showError(el, text) {
  el.textContent = text || "";
  el.hidden = !text;
}
