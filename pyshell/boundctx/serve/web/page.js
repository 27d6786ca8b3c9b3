// What every view of the page shares: finding an element, and the notice line at the top
// that says why something the reader asked for did not happen.

import { ApiError } from "./api.js";

export const $ = (id) => document.getElementById(id);

let next = "";

// A notice for the view about to open (a route change clears the one shown).
export function noticeNext(message) {
  next = message;
}

// What a route change shows: the notice left for it, once.
export function takeNext() {
  const message = next;
  next = "";
  return message;
}

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

// Put `text` on the clipboard: the Clipboard API where the page may use it (a secure
// context: https, or loopback), else a selected, hidden text area copied the old way.
export async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    await navigator.clipboard.writeText(text);
    return;
  }
  const area = document.createElement("textarea");
  area.value = text;
  area.setAttribute("readonly", "");
  area.style.position = "fixed";
  area.style.opacity = "0";
  document.body.append(area);
  area.select();
  const ok = document.execCommand("copy");
  area.remove();
  if (!ok) throw new Error("this browser did not allow copying");
}

// A plain button (not a form's submit) that runs `onClick` when pressed.
export function button(text, onClick, className = "") {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = text;
  if (className) b.className = className;
  if (onClick) b.addEventListener("click", onClick);
  return b;
}

// A button that copies what `textOf()` gives when pressed, and says that it did.
export function copyButton(textOf, label = "Copy") {
  const b = button(label, null, "copy");
  b.addEventListener("click", async () => {
    try {
      await copyText(textOf());
      b.textContent = "Copied";
    } catch (err) {
      b.textContent = "Not copied";
      notice(`Not copied: ${err.message || err}`);
    }
    setTimeout(() => { b.textContent = label; }, 1500);
  });
  return b;
}
