// How full the model's window is, beside the composer: the last reply's prompt against
// what a prompt may take (its `fitted` event, exact where the server counts exactly),
// and, before sending, whether the message alone is over that, so it will be read in
// sections rather than sent whole. Every number is the server's count (POST /count);
// nothing is estimated here.

import { API, api } from "./api.js";
import { $ } from "./page.js";

const WAIT_MS = 600;  // a pause in typing before the draft is counted
let limit = null;     // tokens a prompt may take: the last reply's, else the server's default
let timer = null;
let asked = 0;        // the newest count asked for: an older answer is dropped

let shownFor = null;  // the session the gauge is about

// The view moved to session `sid`: what the gauge said was about another session's prompt.
export function gaugeFor(sid) {
  if (sid === shownFor) return;
  shownFor = sid;
  limit = null;
  $("window-line").hidden = true;
}

// A reply's `fitted` event: its prompt as fitted against what the prompt may take.
export function fitted(data) {
  if (!data.prompt_limit) return;
  limit = data.prompt_limit;
  const used = Math.min(data.prompt_tokens, limit);
  $("window-gauge").max = limit;
  $("window-gauge").value = used;
  $("window-said").textContent = `Window: the last prompt took ${data.prompt_tokens.toLocaleString()} of the ` +
    `${limit.toLocaleString()} tokens a prompt may take (${Math.round((100 * used) / limit)} %)`;
  $("window-line").hidden = false;
}

function sectionsNote(text) {
  const note = $("sections-note");
  note.textContent = text;
  note.hidden = !text;
}

// The draft (with its attachment) changed: counted after a pause in typing.
export function draftToCount(content) {
  clearTimeout(timer);
  const mine = ++asked;
  if (!content.trim()) {
    sectionsNote("");
    return;
  }
  timer = setTimeout(() => count(content, mine), WAIT_MS);
}

async function count(content, mine) {
  let c;
  try {
    c = await api(`${API}/count`, { method: "POST", body: { messages: [{ role: "user", content }] } });
  } catch {
    return;  // the reply itself will say what it does
  }
  if (mine !== asked) return;
  const over = limit ?? c.prompt_limit;
  const more = `This message is ${c.prompt_tokens.toLocaleString()} tokens, more than the ` +
    `${over.toLocaleString()} a prompt may take: `;
  sectionsNote(c.prompt_tokens <= over ? "" : c.reads_in_sections
    ? more + "it will be read in sections (notes first, then the answer from them)."
    : more + "the server reads nothing in sections (chat.analysis_workers is 0), so it will be refused.");
}
