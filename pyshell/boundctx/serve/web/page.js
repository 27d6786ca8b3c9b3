// What every view of the page shares: finding an element, and the notice line at the top
// that says why something the reader asked for did not happen.

import { ApiError } from "./api.js";

export const $ = (id) => document.getElementById(id);

export function notice(message) {
  const n = $("notice");
  n.textContent = message || "";
  n.hidden = !message;
}

export function failed(err) {
  if (err instanceof ApiError && err.status === 401) {
    notice("The server asks for an API key: enter it above, then reload the view.");
  } else {
    notice(String(err.message || err));
  }
}
