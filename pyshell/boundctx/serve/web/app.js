// boundctx's reference front end: sessions, a bounded session view that pages older
// messages in as the reader scrolls up, chat over a session's replies (progress kept
// apart from the answer), settings rendered from the server's schema, and replies read
// aloud. Plain ES modules, one concern each, no build step, no inline script (the
// page's content security policy forbids it), nothing from another origin; serve/ui.py
// lists every file served. This one routes between the views and wires the page's
// controls to the modules that own them:
//
//   api.js       the HTTP edge: requests with the key, ApiError, the event-stream reader
//   page.js      what every view shares: finding an element, the notice line
//   session.js   the sessions list and one session's view, paged
//   chat.js      sending a message and showing its reply as it streams; Stop; the
//                unfinished turn and the draft this browser keeps
//   edits.js     delete a saved message; regenerate the last answer, or edit and resend
//                a question
//   clock.js     one ticking line of a reply's time: so far, and about how long is left
//   gauge.js     how full the window is: the last prompt against its limit, and whether
//                a draft will be read in sections
//   attach.js    an attached file, checked (size, kind) before it is read; its chip
//   markdown.js  an answer's Markdown as DOM nodes, never as markup
//   settings.js  the settings form

import { api, apiKey, setApiKey } from "./api.js";
import { draftChanged, fileChosen, leave, returned, send, sessionOpened, sessionSwitched, stop } from "./chat.js";
import { watchMessages } from "./edits.js";
import { $, failed, notice, takeNext } from "./page.js";
import { filterSessions, listSessions, newChat, newSession, onSessionView, openSession, rename, scrolled } from "./session.js";
import { loadSettings, saveSettings } from "./settings.js";

function show(view) {
  for (const id of ["sessions-view", "session-view", "settings-view"]) $(id).hidden = id !== view;
}

async function route() {
  notice(takeNext());
  const hash = location.hash || "#/";
  try {
    if (hash.startsWith("#/s/")) {
      show("session-view");
      await openSession(decodeURIComponent(hash.slice(4)));
    } else if (hash === "#/settings") {
      show("settings-view");
      await loadSettings();
    } else {
      show("sessions-view");
      await listSessions();
    }
  } catch (err) {
    failed(err);
  }
}

function start() {
  const key = $("api-key");
  key.value = apiKey();
  key.addEventListener("change", () => {
    setApiKey(key.value);
    route();
    showModel();
  });
  $("new-session").addEventListener("submit", newSession);
  $("session-search").addEventListener("input", filterSessions);
  $("rename").addEventListener("click", rename);
  $("messages").addEventListener("scroll", scrolled);
  watchMessages();
  $("composer").addEventListener("submit", (event) => send(event).catch(failed));
  $("question").addEventListener("input", draftChanged);
  onSessionView({ switched: sessionSwitched, opened: sessionOpened });
  window.addEventListener("pagehide", leave);
  window.addEventListener("pageshow", returned);
  $("attach").addEventListener("change", () => fileChosen().catch(failed));
  // The shortcuts the composer names under it.
  $("question").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) $("composer").requestSubmit();
  });
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && !$("stop").disabled) {
      event.preventDefault();
      stop();
    } else if ((event.ctrlKey || event.metaKey) && event.shiftKey && event.key.toLowerCase() === "o") {
      event.preventDefault();
      newChat().catch(failed);
    }
  });
  $("stop").addEventListener("click", () => stop());
  $("settings-form").addEventListener("submit", (event) => saveSettings(event));
  window.addEventListener("hashchange", route);
  route();
  showModel();
}

// The model's name in the header, as the server lists it (GET /v1/models).
async function showModel() {
  try {
    const models = await api("/v1/models");
    const ids = models.data.map((m) => m.id);
    $("model").textContent = ids.length ? `Model: ${ids.join(", ")}` : "";
  } catch {
    $("model").textContent = "";  // asked for a key: shown once the key is entered
  }
}

start();
