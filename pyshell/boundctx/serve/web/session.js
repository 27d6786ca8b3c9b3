// Sessions: the list of them, and one session's view, which opens at its newest window
// and pages older messages in as the reader scrolls up, keeping what they look at in
// place. Only a bounded window is ever asked for (decision 0022).

import { API, ApiError, api } from "./api.js";
import { chip, sizeInWords, splitAttachment } from "./attach.js";
import { renderMarkdown } from "./markdown.js";
import { $, button, copyButton, failed, notice, noticeNext } from "./page.js";

const PAGE = 100;                 // messages per window
const DISPLAY_BYTES = 64 * 1024;  // the display budget of each message in a window
const NEAR_TOP_PX = 200;          // how close to the top a scroll fetches the page before

// The open session: where its window starts, how many messages it has, the layout
// version paging relies on, whether replies are saved to it, and the compactions
// already shown.
export const view = { sid: null, start: 0, count: 0, version: null, more: false, loading: false,
                      writable: true, compactions: new Set(), leaf: null, chosen: null };

// What else follows the view to a session (chat.js): `switched` runs as soon as the view
// is the session's, before its window is fetched, so the composer never shows another
// session's draft meanwhile; `opened` runs once the newest window is on the page (the
// unfinished turn this browser kept goes under it), and only if the view is still there.
const hooks = { switched: () => {}, opened: () => {} };

export function onSessionView({ switched, opened }) {
  hooks.switched = switched;
  hooks.opened = opened;
}

// One window of a session's messages: the newest, or those `before` asks for. The server
// bounds the page in bytes too (transcript.window_page_bytes): long messages make it
// shorter, and the page before goes on from where it began. A session whose entries fork
// is read along the branch chosen, else its newest (`leaf`).
function windowOf(sid, before = {}, leaf = null) {
  const query = new URLSearchParams({ ...before, message_limit: PAGE, content_limit: DISPLAY_BYTES });
  if (leaf !== null) query.set("leaf", leaf);
  return api(`${API}/sessions/${encodeURIComponent(sid)}/messages?${query}`);
}

// -- the list -------------------------------------------------------------------------------

export async function listSessions() {
  const list = $("session-list");
  list.replaceChildren();
  const page = await api(`${API}/sessions?limit=1000`);
  for (const s of page.data) {
    const li = document.createElement("li");
    const a = document.createElement("a");
    a.href = `#/s/${encodeURIComponent(s.id)}`;
    a.textContent = s.title || s.id;
    const small = document.createElement("small");
    small.textContent = (s.title ? ` ${s.id} ·` : "") + (s.error ? ` cannot be read: ${s.error}`
      : ` ${s.message_count.toLocaleString()} messages, ${new Date(s.modified * 1000).toLocaleString()}`);
    li.dataset.search = `${s.title || ""} ${s.id}`.toLocaleLowerCase();
    li.append(a, small);
    list.append(li);
  }
  if (!page.data.length) {
    const li = document.createElement("li");
    li.textContent = "No sessions yet.";
    list.append(li);
  }
  filterSessions();
}

// The sessions list narrowed to those whose title or id holds every word searched for.
export function filterSessions() {
  const words = $("session-search").value.toLocaleLowerCase().split(/\s+/).filter(Boolean);
  let shown = 0;
  for (const li of $("session-list").querySelectorAll("li[data-search]")) {
    li.hidden = !words.every((w) => li.dataset.search.includes(w));
    shown += li.hidden ? 0 : 1;
  }
  const note = $("search-note");
  note.hidden = !words.length;
  note.textContent = shown ? "" : "No session's title or id has these words.";
}

export async function newSession(event) {
  event.preventDefault();
  const id = $("new-session-id").value.trim();
  try {
    const s = await api(`${API}/sessions`, { method: "POST", body: id ? { id } : {} });
    location.hash = `#/s/${encodeURIComponent(s.id)}`;
  } catch (err) {
    failed(err);
  }
}

// A new session under a name the server picks, opened with the composer ready.
export async function newChat() {
  const s = await api(`${API}/sessions`, { method: "POST", body: {} });
  location.hash = `#/s/${encodeURIComponent(s.id)}`;
  $("question").focus();
}

// -- messages -------------------------------------------------------------------------------

// A message's text as the page shows it: an answer's Markdown rendered (safely: as
// nodes, never markup), a question with its attachment as a chip, anything else (tool
// output, compactions, corrupt lines) as the text it is.
export function showText(body, role, text) {
  if (role === "assistant") {
    body.classList.add("markdown");
    body.replaceChildren(renderMarkdown(text));
    return;
  }
  body.classList.remove("markdown");
  const { typed, name, text: file } = role === "user" ? splitAttachment(text) : { typed: text, name: null };
  body.textContent = typed;
  if (name !== null) body.append(chip(name, `${file.length.toLocaleString()} characters`));
}

function messageCard(kind, label, text, { line, index, cut = false } = {}) {
  const node = document.createElement("article");
  node.className = `message ${kind}`;
  if (line !== undefined) node.dataset.line = line;
  if (index !== null && index !== undefined) node.dataset.index = index;
  const head = document.createElement("div");
  head.className = "message-head";
  const role = document.createElement("span");
  role.className = "role";
  role.textContent = label;
  const body = document.createElement("div");
  body.className = "text";
  showText(body, kind, text);
  node.raw = text;  // what Copy copies: the text as it is, not as rendered
  head.append(role, copyButton(() => node.raw, cut ? "Copy shown part" : "Copy"));
  node.append(head, body);
  return node;
}

// A message of this session that is not in its file: the turn being sent (its index
// known, its line not), or one the server did not save (index null).
export function unsavedMessage(role, index, text) {
  return index === null ? messageCard(role, `${role} · not saved`, text)
    : messageCard(role, `${role} · message ${index}`, text, { index });
}

function messageNode(entry, { compaction = false } = {}) {
  // The server says how each entry reads for a person (its format's rule): role, text.
  const { role, text } = entry;
  const label = compaction ? `compaction (line ${entry.line})` : role === "corrupt"
    ? `corrupt entry at line ${entry.line}` : `${role} · message ${entry.index}`;
  const cut = entry.cut_bytes > 0;
  const node = messageCard(compaction ? "compaction" : role, label, text,
                           { line: entry.line, index: entry.index, cut });
  if (!compaction && FOLDED[entry.kind]) fold(node, entry);
  if (cut) {
    const more = document.createElement("p");
    more.className = "cut";
    more.textContent = `… ${sizeInWords(entry.cut_bytes)} more not shown (this message is ` +
      `${sizeInWords(entry.length)} in the session's file).`;
    more.append(" ", button("Read it in pages", () => readInPages(node, entry, 0).catch(failed), "whole"));
    node.append(more);
  }
  return node;
}

// An agent's tool calls, their results and its reasoning, folded into a block whose
// one-line summary says what it is (the tool and its first line); opened, the text is
// shown as it is, never as Markdown.
const FOLDED = {
  tool_call: (e, first) => `Tool call · ${e.tool || "tool"}${first ? ` · ${first}` : ""}`,
  tool_result: (e, first, lines) => `Tool result · ${lines.toLocaleString()} line${lines === 1 ? "" : "s"}` +
    (first ? ` · ${first}` : ""),
  reasoning: () => "Reasoning",
};

function fold(node, entry) {
  const body = node.querySelector(".text");
  body.classList.remove("markdown");
  body.textContent = entry.text;
  const lines = entry.text ? entry.text.split("\n").length : 0;
  let first = entry.text.split("\n").find((l) => l.trim()) || "";
  if (entry.kind === "tool_call") {  // its arguments on one line: "git status", or { "path": "…" }
    const prefix = `${entry.tool}: `;
    const args = entry.text.startsWith(prefix) ? entry.text.slice(prefix.length) : entry.text;
    first = args.slice(0, 400).replace(/\s+/g, " ").trim();
  }
  if (first.length > 100) first = `${first.slice(0, 99)}…`;
  const details = document.createElement("details");
  details.className = `folded ${entry.kind}`;
  const summary = document.createElement("summary");
  summary.textContent = FOLDED[entry.kind](entry, first, lines);
  body.replaceWith(details);
  details.append(summary, body);
  node.classList.add("tool");
}

// -- a long message, a page at a time -------------------------------------------------------

const PAGE_CHARS = 64 * 1024;  // characters of a long message on the page at once

// Show page `offset` of message `entry` in `node`, in place of what it showed: the
// server sends that page alone, so neither the payload nor the page's layout grows with
// the message (a 5 MB tool output stays as quick as a short one).
async function readInPages(node, entry, offset) {
  const sid = view.sid;
  const query = new URLSearchParams({ text_offset: offset, text_limit: PAGE_CHARS, layout_version: view.version });
  if (view.leaf !== null) query.set("leaf", view.leaf);
  const page = await api(`${API}/sessions/${encodeURIComponent(sid)}/messages/${entry.index}?${query}`);
  if (view.sid !== sid) return;
  const body = node.querySelector(".text");
  body.classList.remove("markdown");
  body.textContent = page.text;  // a page may cut a code block in two: shown as the text it is
  node.raw = page.text;
  node.querySelector(".message-head .copy").textContent = "Copy this page";
  const end = page.text_offset + page.text.length;
  const bar = document.createElement("p");
  bar.className = "cut pager";
  bar.textContent = `Characters ${(page.text_offset + 1).toLocaleString()}–${end.toLocaleString()} of ` +
    `${page.text_length.toLocaleString()} (page ${Math.floor(page.text_offset / PAGE_CHARS) + 1} of ` +
    `${Math.max(1, Math.ceil(page.text_length / PAGE_CHARS))}). `;
  const go = (text, to) => button(text, () => readInPages(node, entry, to).catch(failed));
  if (page.text_offset > 0) bar.append(go("Previous page", Math.max(0, page.text_offset - PAGE_CHARS)));
  if (end < page.text_length) bar.append(" ", go("Next page", end));
  node.querySelector(".cut")?.remove();
  node.append(bar);
}

function nodesOf(win) {
  // Messages and the compactions among them, in file order; each compaction once. A
  // window also names the compaction in force before its first message: that one sits
  // among an older page's lines and is shown with that page (or here, at the top, when
  // there is no older page).
  const items = win.messages.map((e) => ({ line: e.line, node: () => messageNode(e) }));
  const from = win.messages.length ? win.messages[0].line : -1;
  for (const c of win.compactions) {
    if (view.compactions.has(c.line) || (c.line < from && win.has_more_before)) continue;
    view.compactions.add(c.line);
    items.push({ line: c.line, node: () => messageNode(c, { compaction: true }) });
  }
  items.sort((a, b) => a.line - b.line);
  return items.map((i) => i.node());
}

// -- the view -------------------------------------------------------------------------------

// -- the title ------------------------------------------------------------------------------

function showTitle(sid, meta) {
  $("session-title").textContent = (meta && meta.title) || sid;
  $("session-title").title = sid;
}

// Rename: the title in a text box in place of the heading; Enter or Save keeps it, an
// empty one goes back to the first question, Escape leaves it as it was.
export function rename() {
  const sid = view.sid;
  const form = $("rename-form");
  const input = $("rename-input");
  input.value = $("session-title").textContent;
  form.hidden = false;
  $("session-heading").hidden = true;
  input.focus();
  input.select();
  const done = () => {
    form.hidden = true;
    $("session-heading").hidden = false;
    form.onsubmit = input.onkeydown = null;
  };
  input.onkeydown = (event) => {
    if (event.key === "Escape") {
      event.stopPropagation();
      done();
    }
  };
  form.onsubmit = async (event) => {
    event.preventDefault();
    try {
      const meta = await api(`${API}/sessions/${encodeURIComponent(sid)}`,
                             { method: "PATCH", body: { title: input.value } });
      if (view.sid === sid) showTitle(sid, meta);
      done();
    } catch (err) {
      failed(err);
    }
  };
}

export async function openSession(sid, chosen = null) {
  view.sid = sid;
  // Nothing of the session before may page this one: until its own window is here there
  // is nothing older to fetch (a scroll event meanwhile would ask with the other's cursor).
  Object.assign(view, { start: 0, count: 0, version: null, more: false, compactions: new Set(), leaf: null,
                        chosen });
  $("session-title").textContent = sid;
  $("branches").hidden = true;
  api(`${API}/sessions/${encodeURIComponent(sid)}`).then((meta) => {
    if (view.sid !== sid) return;
    showTitle(sid, meta);
    if (meta.in_file_order === false) showBranches(sid).catch(() => {});
  }, () => {});  // the window's own request says what is wrong, if anything
  $("progress").replaceChildren();
  const box = $("messages");
  box.replaceChildren();
  hooks.switched(sid);
  const win = await windowOf(sid, {}, chosen);
  if (view.sid !== sid) return;  // the reader went on to another session meanwhile
  remember(win);
  box.append(...nodesOf(win));
  hooks.opened(sid);
  box.scrollTop = box.scrollHeight;
  meta();
  // A first page shorter than the view cannot be scrolled: fetch older ones until it can.
  while (view.more && box.scrollHeight <= box.clientHeight && view.sid === sid) await olderPage();
}

function remember(win) {
  view.leaf = win.leaf;  // older pages stay on this branch, whatever grows meanwhile
  view.start = win.message_start;
  view.count = win.message_count;
  view.more = win.has_more_before;
  view.version = win.layout_version;
  view.writable = win.writable !== false;
  readOnly(win);
}

// The agents whose sessions boundctx reads but does not write into, by their names.
const AGENTS = { "claude-code": "Claude Code", codex: "Codex CLI" };

// Another agent's session: questions are answered without saving, and the page says so
// where the composer is, before anything is asked.
function readOnly(win) {
  const bar = $("read-only");
  bar.hidden = win.writable !== false;
  if (bar.hidden) return;
  const agent = AGENTS[win.format] || "another agent's";
  bar.textContent = `This is a ${agent} session: boundctx reads it but does not write into it. ` +
    "You can still ask about it: each answer stays on this page and is not saved to the session. " +
    "Or go on with it in a session of boundctx's own, which starts with its newest messages: ";
  bar.append(button("Continue in a new session", () => continueInNew(view.sid).catch(failed)));
}

// A new session that starts with session `sid`'s newest messages, opened, and what was
// carried over said.
async function continueInNew(sid) {
  const s = await api(`${API}/sessions`, { method: "POST", body: { continue_from: sid } });
  const c = s.continued;
  noticeNext(`Continued from ${sid}: its newest ${c.messages} messages were carried over.` +
    (c.notices.length ? ` ${c.notices.join(" ")}` : ""));
  location.hash = `#/s/${encodeURIComponent(s.id)}`;
}

// A session whose entries fork (a rewind left another branch in the file): the page shows
// the newest branch, and says which others there are, any of which can be read instead.
async function showBranches(sid) {
  const list = await api(`${API}/sessions/${encodeURIComponent(sid)}/branches`);
  if (view.sid !== sid || list.branch_count < 2) return;
  const select = $("branch-select");
  select.replaceChildren();
  for (const b of list.data) {
    const option = document.createElement("option");
    option.value = String(b.leaf);
    option.textContent = b.active
      ? `the newest branch (${b.message_count.toLocaleString()} messages)`
      : `a branch left after message ${b.shared.toLocaleString()} (${b.message_count.toLocaleString()} messages)`;
    option.selected = view.chosen === null ? b.active : String(view.chosen) === option.value;
    select.append(option);
  }
  $("branch-count").textContent = `This session forks: ${list.branch_count.toLocaleString()} branches` +
    (list.has_more ? " (the newest shown)" : "") + ". Showing";
  // A reply always goes on from the newest branch (the server saves it after its leaf).
  $("branch-note").textContent = view.chosen === null ? "" : " A question asked now goes on from the newest branch.";
  select.onchange = () => {
    const chosen = list.data.find((b) => String(b.leaf) === select.value);
    openSession(sid, chosen && !chosen.active ? chosen.leaf : null).catch(failed);
  };
  $("branches").hidden = false;
}

function meta() {
  $("session-meta").textContent = `${view.count.toLocaleString()} messages; showing from message ${view.start}` +
    (view.more ? " (scroll up for older ones)" : "");
}

// The session now has `count` messages (a reply was saved).
export function counted(count) {
  view.count = count;
  meta();
}

async function olderPage() {
  if (view.loading || !view.more || !view.sid) return;
  view.loading = true;
  const box = $("messages");
  const sid = view.sid;
  try {
    const win = await windowOf(sid, { message_before: view.start, layout_version: view.version }, view.leaf);
    if (view.sid !== sid) return;  // the reader went on to another session meanwhile
    // Keep what the reader looks at in place: the distance from the bottom stays.
    const fromBottom = box.scrollHeight - box.scrollTop;
    box.prepend(...nodesOf(win));
    box.scrollTop = box.scrollHeight - fromBottom;
    remember(win);
    meta();
  } catch (err) {
    if (view.sid !== sid) return;  // about a session no longer shown
    if (err instanceof ApiError && err.status === 409) {
      notice("The session was rewritten (a message edited or deleted) since it was opened; it was read again from the end.");
      await openSession(view.sid, view.chosen);
    } else {
      failed(err);
    }
  } finally {
    view.loading = false;
  }
}

export function scrolled() {
  if ($("messages").scrollTop < NEAR_TOP_PX) olderPage();
}
