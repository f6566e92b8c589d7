// WhatsApp's customer-service window as the console shows it: free text only within 24 hours
// of the user's last message (session metadata last_user_message_at, Unix seconds).

const WINDOW_SECONDS = 24 * 3600;

/** null for a session without the window; else {open, text} as at nowMs. */
export function windowState(session, nowMs = Date.now()) {
  if (session.channel !== "whatsapp") return null;
  const wrote = session.metadata?.last_user_message_at;
  if (typeof wrote !== "number") return { open: false, text: "window closed: templates only" };
  const left = wrote + WINDOW_SECONDS - nowMs / 1000;
  if (left <= 0) return { open: false, text: "window closed: templates only" };
  const hours = Math.floor(left / 3600);
  const minutes = Math.floor((left % 3600) / 60);
  return { open: true, text: `window open · ${hours} h ${minutes} min left` };
}
