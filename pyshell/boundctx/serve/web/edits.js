// What a person does to a session's saved messages: delete one, regenerate the last
// answer, or take a question back to edit and send again (the last one or an earlier
// one: everything after it goes with it, as the conversation it started is no longer
// the one asked). Each change is the server's delete (one rewrite of the session's file,
// checked against the layout version the page read, so it never lands on a message
// another client moved), and the view is read again after it. The buttons are given to
// the messages on the page as they come (watched, so the session view need not know of
// them): Delete on every saved message, "Edit and resend" on every question, Regenerate
// on the last answer. Another agent's session is read, never written: it gets none.

import { API, api } from "./api.js";
import { ask, editInComposer } from "./chat.js";
import { $, button, failed, notice } from "./page.js";
import { openSession, view } from "./session.js";

const SAVED = "#messages .message[data-index]:not(.unfinished):not(.unsaved):not(.sending)";

function actionButton(action, text) {
  const b = button(text, null, "edit-action");  // pressed: the one listener on #messages acts
  b.dataset.action = action;
  return b;
}

const LABELS = { delete: "Delete", regenerate: "Regenerate", resend: "Edit and resend" };

// Give `node` exactly `actions`' buttons; a node that has them already is not touched
// (the observer that calls this sees its own changes: only a real one may make another).
function give(node, actions) {
  const head = node.querySelector(".message-head");
  let box = head.querySelector(".message-actions");
  if ((box ? box.dataset.actions : "") === actions.join(" ")) return;
  if (!box) {
    box = document.createElement("span");
    box.className = "message-actions";
    head.append(box);
  }
  box.dataset.actions = actions.join(" ");
  box.replaceChildren(...actions.map((a) => actionButton(a, LABELS[a])));
}

// The buttons each saved message on the page should have, as things stand now.
function refresh() {
  const nodes = [...document.querySelectorAll(SAVED)];
  const wanted = new Map(nodes.map((n) => [n, !view.writable ? [] :
    n.classList.contains("user") ? ["resend", "delete"] : ["delete"]]));
  if (view.writable && nodes.length >= 2) {
    const [question, answer] = nodes.slice(-2);
    const last = Number(answer.dataset.index);
    if (last === view.count - 1 && Number(question.dataset.index) === last - 1 &&
        question.classList.contains("user") && answer.classList.contains("assistant")) {
      wanted.get(answer).unshift("regenerate");
    }
  }
  for (const [node, actions] of wanted) give(node, actions);
}

let pending = false;

export function watchMessages() {
  const box = $("messages");
  new MutationObserver(() => {
    if (pending) return;
    pending = true;
    queueMicrotask(() => {
      pending = false;
      refresh();
    });
  }).observe(box, { childList: true, subtree: true, attributeFilter: ["aria-busy", "class"] });
  box.addEventListener("click", (event) => {
    const b = event.target.closest("button[data-action]");
    if (b) act(b.dataset.action, b.closest(".message")).catch(failed);
  });
}

// Delete message `index` of the open session (with `andLater`, every message after it
// too, in one rewrite); the version it was read at must still hold.
async function remove(index, andLater = false) {
  const sid = encodeURIComponent(view.sid);
  const after = await api(`${API}/sessions/${sid}/messages/${index}?layout_version=${encodeURIComponent(view.version)}` +
                          (andLater ? `&and_later=true&message_count=${view.count}` : ""), { method: "DELETE" });
  view.version = after.layout_version;
  view.count = after.message_count;
}

// A question as it was asked (whole, though the view shows it cut).
async function questionOf(index) {
  const m = await api(`${API}/sessions/${encodeURIComponent(view.sid)}/messages/${index}?` +
                      `layout_version=${encodeURIComponent(view.version)}`);
  return m.text;
}

async function act(action, node) {
  const index = Number(node.dataset.index);
  const sid = view.sid;
  if (action === "delete") {
    if (!window.confirm(`Delete message ${index} from this session? The session's file is rewritten ` +
                        "without it; this cannot be undone.")) return;
    await remove(index);
    notice("");
    await openSession(sid);
    return;
  }
  const q = action === "regenerate" ? index - 1 : index;
  const later = view.count - 1 - q;  // the messages after the question
  const words = action === "regenerate" ? "Replace this answer with a new one?"
    : `Take this question back to edit? ${later === 0 ? "It is" : later === 1 ? "It and the answer after it are"
      : `It and the ${later} messages after it are`} deleted from the session, and the question goes to the composer.`;
  if (!window.confirm(words)) return;
  const question = await questionOf(q);
  await remove(q, true);
  await openSession(sid);
  if (view.sid !== sid) return;
  if (action === "regenerate") await ask(sid, question);
  else editInComposer(question);
}
