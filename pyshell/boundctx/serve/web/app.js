// boundctx's reference front end: sessions, a bounded session view that pages older
// messages in as the reader scrolls up, chat over a session's replies (progress kept
// apart from the answer), settings rendered from the server's schema, and replies read
// aloud. Plain ES modules, no build step, no inline script (the page's content security
// policy forbids it), nothing from another origin.

const API = "/boundctx/v1";
const PAGE = 100;                 // messages per window
const DISPLAY_BYTES = 64 * 1024;  // the display budget of each message in a window
const NEAR_TOP_PX = 200;          // how close to the top a scroll fetches the page before

const $ = (id) => document.getElementById(id);
const state = { sid: null, start: 0, count: 0, version: null, more: false, loading: false,
                reply: null, compactions: new Set() };

// -- the HTTP edge ------------------------------------------------------------------------

function headers(extra = {}) {
  const key = sessionStorage.getItem("boundctx-key");
  return key ? { Authorization: `Bearer ${key}`, ...extra } : extra;
}

class ApiError extends Error {
  constructor(status, body) {
    super((body && body.error && body.error.message) || `HTTP ${status}`);
    this.status = status;
    this.code = body && body.error && body.error.code;
    this.param = body && body.error && body.error.param;
  }
}

async function api(path, { method = "GET", body } = {}) {
  const init = { method, headers: headers(body !== undefined ? { "Content-Type": "application/json" } : {}) };
  if (body !== undefined) init.body = JSON.stringify(body);
  const r = await fetch(path, init);
  const text = await r.text();
  const data = text ? JSON.parse(text) : null;
  if (!r.ok) throw new ApiError(r.status, data);
  return data;
}

function notice(message) {
  const n = $("notice");
  n.textContent = message || "";
  n.hidden = !message;
}

function failed(err) {
  if (err instanceof ApiError && err.status === 401) {
    notice("The server asks for an API key: enter it above, then reload the view.");
  } else {
    notice(String(err.message || err));
  }
}

// -- views ----------------------------------------------------------------------------------

function show(view) {
  for (const id of ["sessions-view", "session-view", "settings-view"]) $(id).hidden = id !== view;
}

async function route() {
  notice("");
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

// -- sessions -------------------------------------------------------------------------------

async function listSessions() {
  const list = $("session-list");
  list.replaceChildren();
  const page = await api(`${API}/sessions?limit=1000`);
  for (const s of page.data) {
    const li = document.createElement("li");
    const a = document.createElement("a");
    a.href = `#/s/${encodeURIComponent(s.id)}`;
    a.textContent = s.id;
    const small = document.createElement("small");
    small.textContent = s.error ? ` cannot be read: ${s.error}`
      : ` ${s.message_count.toLocaleString()} messages, ${new Date(s.modified * 1000).toLocaleString()}`;
    li.append(a, small);
    list.append(li);
  }
  if (!page.data.length) {
    const li = document.createElement("li");
    li.textContent = "No sessions yet.";
    list.append(li);
  }
}

// -- one session ----------------------------------------------------------------------------

function entryText(entry) {
  // (role, text) of a window entry, whatever the transcript's dialect.
  if (entry.record === null || entry.record === undefined) return ["corrupt", `(${entry.corrupt}) ${entry.raw || ""}`];
  const rec = entry.record;
  let msg = typeof rec.message === "object" && rec.message ? rec.message : rec.payload;
  if (typeof msg !== "object" || msg === null) msg = rec;
  const role = msg.role || rec.type || "?";
  const content = msg.content !== undefined ? msg.content : msg.summary !== undefined ? msg.summary : rec.summary;
  if (typeof content === "string") return [String(role), content];
  if (Array.isArray(content)) {
    return [String(role), content.map((block) => {
      if (block && typeof block === "object") {
        for (const key of ["text", "thinking", "output", "content"]) {
          if (typeof block[key] === "string") return block[key];
        }
        return JSON.stringify(block);
      }
      return String(block);
    }).join("\n")];
  }
  return [String(role), JSON.stringify(content === undefined ? msg : content)];
}

function messageNode(entry, { compaction = false } = {}) {
  const [role, text] = entryText(entry);
  const node = document.createElement("article");
  node.className = `message ${compaction ? "compaction" : role}`;
  node.dataset.line = entry.line;
  if (entry.index !== null && entry.index !== undefined) node.dataset.index = entry.index;
  const label = document.createElement("span");
  label.className = "role";
  label.textContent = compaction ? `compaction (line ${entry.line})` : role === "corrupt"
    ? `corrupt entry at line ${entry.line}` : `${role} · message ${entry.index}`;
  const body = document.createElement("span");
  body.className = "text";
  body.textContent = text;
  node.append(label, body);
  if (entry.cut_bytes > 0) {
    const cut = document.createElement("span");
    cut.className = "cut";
    cut.textContent = `… ${entry.cut_bytes.toLocaleString()} more bytes not shown`;
    const whole = document.createElement("button");
    whole.type = "button";
    whole.className = "whole";
    whole.textContent = "Show whole message";
    whole.addEventListener("click", () => showWhole(node, entry.index).catch(failed));
    node.append(cut, whole);
  }
  return node;
}

async function showWhole(node, index) {
  const entry = await api(`${API}/sessions/${encodeURIComponent(state.sid)}/messages/${index}`);
  node.replaceWith(messageNode(entry));
}

function nodesOf(win) {
  // Messages and the compactions among them, in file order; each compaction once. A
  // window also names the compaction in force before its first message: that one sits
  // among an older page's lines and is shown with that page (or here, at the top, when
  // there is no older page).
  const items = win.messages.map((e) => ({ line: e.line, node: () => messageNode(e) }));
  const from = win.messages.length ? win.messages[0].line : -1;
  for (const c of win.compactions) {
    if (state.compactions.has(c.line) || (c.line < from && win.has_more_before)) continue;
    state.compactions.add(c.line);
    items.push({ line: c.line, node: () => messageNode(c, { compaction: true }) });
  }
  items.sort((a, b) => a.line - b.line);
  return items.map((i) => i.node());
}

async function openSession(sid) {
  state.sid = sid;
  state.compactions = new Set();
  $("session-title").textContent = sid;
  $("progress").replaceChildren();
  $("reply-error").hidden = true;
  const box = $("messages");
  box.replaceChildren();
  const win = await api(`${API}/sessions/${encodeURIComponent(sid)}/messages?message_limit=${PAGE}&content_limit=${DISPLAY_BYTES}`);
  remember(win);
  box.append(...nodesOf(win));
  box.scrollTop = box.scrollHeight;
  meta();
  // A first page shorter than the view cannot be scrolled: fetch older ones until it can.
  while (state.more && box.scrollHeight <= box.clientHeight && state.sid === sid) await olderPage();
}

function remember(win) {
  state.start = win.message_start;
  state.count = win.message_count;
  state.more = win.has_more_before;
  state.version = win.layout_version;
}

function meta() {
  $("session-meta").textContent = `${state.count.toLocaleString()} messages; showing from message ${state.start}` +
    (state.more ? " (scroll up for older ones)" : "");
}

async function olderPage() {
  if (state.loading || !state.more || !state.sid) return;
  state.loading = true;
  const box = $("messages");
  try {
    const q = `message_before=${state.start}&message_limit=${PAGE}&content_limit=${DISPLAY_BYTES}&layout_version=${state.version}`;
    const win = await api(`${API}/sessions/${encodeURIComponent(state.sid)}/messages?${q}`);
    // Keep what the reader looks at in place: the distance from the bottom stays.
    const fromBottom = box.scrollHeight - box.scrollTop;
    box.prepend(...nodesOf(win));
    box.scrollTop = box.scrollHeight - fromBottom;
    remember(win);
    meta();
  } catch (err) {
    if (err instanceof ApiError && err.status === 409) {
      notice("The session was rewritten (a message edited or deleted) since it was opened; it was read again from the end.");
      await openSession(state.sid);
    } else {
      failed(err);
    }
  } finally {
    state.loading = false;
  }
}

// -- replies --------------------------------------------------------------------------------

async function* namedEvents(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let name = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event: ")) name = line.slice(7);
        else if (line.startsWith("data: ")) data.push(line.slice(6));
      }
      if (data.length) yield { name, data: JSON.parse(data.join("\n")) };  // a ": ping" has no data
    }
  }
}

function progressLine(text, className = "") {
  const p = document.createElement("span");
  if (className) p.className = className;
  p.textContent = text;
  return p;
}

function speak(text) {
  if (!$("voice").checked || !text.trim() || !("speechSynthesis" in window)) return;
  window.speechSynthesis.speak(new SpeechSynthesisUtterance(text));
}

async function send(event) {
  event.preventDefault();
  if (state.reply) return;
  const question = $("question").value;
  const file = $("attach").files[0];
  let content = question;
  if (file) content += `\n\n[attached: ${file.name}]\n${await file.text()}`;
  if (!content.trim()) return;
  const box = $("messages");
  const progress = $("progress");
  const error = $("reply-error");
  error.hidden = true;
  progress.replaceChildren();
  const mine = messageNode({ line: -1, index: state.count, record: { message: { role: "user", content } } });
  const answer = messageNode({ line: -1, index: state.count + 1, record: { message: { role: "assistant", content: "" } } });
  answer.setAttribute("aria-busy", "true");
  box.append(mine, answer);
  box.scrollTop = box.scrollHeight;
  const text = answer.querySelector(".text");
  const abort = new AbortController();
  state.reply = { id: null, abort };
  $("send").disabled = true;
  $("stop").disabled = false;
  let said = "";
  let ended = false;  // a done or failed event came: the stream did not just stop
  try {
    const r = await fetch(`${API}/sessions/${encodeURIComponent(state.sid)}/replies`, {
      method: "POST", headers: headers({ "Content-Type": "application/json" }),
      body: JSON.stringify({ content }), signal: abort.signal });
    if (!r.ok) throw new ApiError(r.status, await r.json().catch(() => null));
    for await (const { name, data } of namedEvents(r)) {
      if (name === "reply") {
        state.reply.id = data.id;
        for (const n of data.notices) progress.append(progressLine(`Note: ${n}`));
      } else if (name === "fitted") {
        if (data.dropped.length || data.analysed.length || data.clipped) {
          progress.replaceChildren(progressLine(`${data.dropped.length} older messages left out; ` +
            `${data.analysed.length} inputs to read in sections` + (data.clipped ? `; ${data.clipped} clipped` : "")));
        }
        if (data.reused_tokens !== null && data.prompt_tokens) {
          // Why this turn starts at once or takes a while: what the model must read anew.
          const fresh = data.prompt_tokens - data.reused_tokens;
          progress.append(progressLine(`Reading ${fresh.toLocaleString()} new prompt tokens` +
            (data.reused_tokens ? ` (${data.reused_tokens.toLocaleString()} kept from before)` : ""), "prompt"));
        }
      } else if (name === "analysis_progress") {
        const line = progress.querySelector(".section") || progress.appendChild(progressLine("", "section"));
        line.textContent = `Reading section ${data.section} of ${data.sections} (worker ${data.worker + 1}, ` +
          `${data.elapsed_s.toFixed(1)} s)`;
      } else if (name === "stage") {
        const line = progress.querySelector(".stage") || progress.appendChild(progressLine("", "stage"));
        line.textContent = data.stage === "answering" ? "Answering" : "Rereading the originals";
      } else if (name === "tool_call") {
        progress.append(progressLine(`Reread of the original: ${data.arguments}`, "reread"));
      } else if (name === "reply_delta") {
        said += data.text;
        text.textContent = said;
        box.scrollTop = box.scrollHeight;
      } else if (name === "done") {
        ended = true;
        answer.removeAttribute("aria-busy");
        if (data.saved) {
          state.count = data.message_count;
          meta();
        } else {
          error.textContent = data.finish_reason === "cancelled" ? `Stopped. ${data.not_saved}` : `Not saved: ${data.not_saved}`;
          error.hidden = false;
        }
        speak(said);
      } else if (name === "failed") {
        ended = true;
        answer.removeAttribute("aria-busy");
        error.textContent = `The reply failed: ${data.error}`;
        error.hidden = false;
      }
    }
    if (!ended) throw new Error("the connection to the server closed before the reply ended");
  } catch (err) {
    answer.removeAttribute("aria-busy");
    if (err.name !== "AbortError") {
      error.textContent = err instanceof ApiError ? `The reply was refused: ${err.message}` : `The reply failed: ${err.message}`;
      error.hidden = false;
    }
  } finally {
    state.reply = null;
    $("send").disabled = false;
    $("stop").disabled = true;
    $("question").value = "";
    $("attach").value = "";
  }
}

async function stop() {
  const reply = state.reply;
  if (!reply) return;
  $("stop").disabled = true;
  try {
    if (!reply.id) throw new Error("no reply id yet");
    await api(`${API}/replies/${encodeURIComponent(reply.id)}/cancel`, { method: "POST" });
  } catch {
    reply.abort.abort();  // closing the stream cancels the reply too
  }
}

// -- settings -------------------------------------------------------------------------------

let shown = {};

function settingInput(item) {
  const id = `setting-${item.name}`;
  let input;
  if (item.choices) {
    input = document.createElement("select");
    for (const c of item.choices) {
      const o = document.createElement("option");
      o.value = JSON.stringify(c);
      o.textContent = String(c);
      input.append(o);
    }
    input.value = JSON.stringify(item.value);
  } else if (item.type === "bool") {
    input = document.createElement("input");
    input.type = "checkbox";
    input.checked = item.value;
  } else if (item.type === "int" || item.type === "float") {
    input = document.createElement("input");
    input.type = "number";
    input.step = item.type === "int" ? "1" : "any";
    if (item.minimum !== undefined && !item.exclusive_minimum) input.min = item.minimum;
    if (item.maximum !== undefined) input.max = item.maximum;
    input.value = item.value;
  } else {
    input = document.createElement("input");
    input.type = "text";
    input.value = item.value;
  }
  input.id = id;
  input.name = item.name;
  input.disabled = !item.writable;
  return input;
}

function valueOf(item, input) {
  if (item.choices) return JSON.parse(input.value);
  if (item.type === "bool") return input.checked;
  if (item.type === "int") return input.value.trim() === "" ? input.value : Number(input.value);
  if (item.type === "float") return input.value.trim() === "" ? input.value : Number(input.value);
  return input.value;
}

async function loadSettings() {
  const view = await api(`${API}/settings`);
  renderSettings(view.data);
}

function renderSettings(items) {
  const form = $("settings-form");
  form.replaceChildren();
  shown = {};
  for (const item of items) {
    shown[item.name] = item;
    const set = document.createElement("fieldset");
    const label = document.createElement("label");
    label.htmlFor = `setting-${item.name}`;
    label.textContent = item.name;
    const help = document.createElement("span");
    help.className = "help";
    help.id = `help-${item.name}`;
    help.textContent = `${item.help} Accepted: ${item.accepted}.` + (item.writable ? "" : " Fixed while the server runs.");
    const input = settingInput(item);
    input.setAttribute("aria-describedby", help.id);
    set.append(label, input, help);
    form.append(set);
  }
  const save = document.createElement("button");
  save.type = "submit";
  save.textContent = "Save settings";
  form.append(save);
}

async function saveSettings(event) {
  event.preventDefault();
  const changes = {};
  for (const [name, item] of Object.entries(shown)) {
    if (!item.writable) continue;
    const value = valueOf(item, $(`setting-${name}`));
    if (JSON.stringify(value) !== JSON.stringify(item.value)) changes[name] = value;
  }
  const status = $("settings-status");
  for (const old of document.querySelectorAll(".settings .refused")) old.remove();
  if (!Object.keys(changes).length) {
    status.textContent = "Nothing changed.";
    return;
  }
  try {
    const view = await api(`${API}/settings`, { method: "PATCH", body: changes });
    renderSettings(view.data);
    status.textContent = `Saved: ${Object.keys(changes).join(", ")}.`;
  } catch (err) {
    status.textContent = `Not saved: ${err.message}`;
    const input = err.param && $(`setting-${err.param}`);
    if (input) {
      const why = document.createElement("span");
      why.className = "refused";
      why.textContent = err.message;
      input.closest("fieldset").append(why);
      input.setAttribute("aria-invalid", "true");
      input.focus();
    }
  }
}

// -- wiring ---------------------------------------------------------------------------------

function start() {
  const key = $("api-key");
  key.value = sessionStorage.getItem("boundctx-key") || "";
  key.addEventListener("change", () => {
    sessionStorage.setItem("boundctx-key", key.value);
    route();
  });
  $("new-session").addEventListener("submit", async (event) => {
    event.preventDefault();
    const id = $("new-session-id").value.trim();
    try {
      const s = await api(`${API}/sessions`, { method: "POST", body: id ? { id } : {} });
      location.hash = `#/s/${encodeURIComponent(s.id)}`;
    } catch (err) {
      failed(err);
    }
  });
  $("messages").addEventListener("scroll", () => {
    if ($("messages").scrollTop < NEAR_TOP_PX) olderPage();
  });
  $("composer").addEventListener("submit", (event) => send(event).catch(failed));
  $("question").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) $("composer").requestSubmit();
  });
  $("stop").addEventListener("click", () => stop());
  $("settings-form").addEventListener("submit", (event) => saveSettings(event));
  window.addEventListener("hashchange", route);
  route();
}

start();
