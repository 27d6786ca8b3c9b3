// Settings, rendered from the server's schema in groups a person reads: Chat first and
// open, the rest behind a disclosure each. Every setting is shown by its label, with its
// key and what it accepts in words; settings the server was started with are shown as
// text, not as inputs that cannot be used. A save sends only what changed, and a refused
// value is explained beside its field by the server's own message (the form is
// novalidate for that).

import { API, api } from "./api.js";
import { $ } from "./page.js";

// [title, what it is for, keys or "group." prefixes]; a key lands in the first group
// that names it, and one no group names lands in "Other", so a new setting is never lost.
const GROUPS = [
  ["Chat", "How replies are written.", ["chat.system_prompt", "chat.temperature", "chat.repeat_penalty"]],
  ["Long inputs", "How inputs too large for the context are read in sections, and how old history is dropped.",
    ["chat.analysis_workers", "analysis.", "chat.tool_result_clip_chars", "chat.low_water"]],
  ["Model", "Which model answers and how it is loaded: set when the server starts.",
    ["chat.provider", "chat.n_ctx", "local.", "remote."]],
  ["Understanding", "The bounds of turning a message into a checked plan.", ["understanding."]],
  ["Transcripts", "How much of a session one page shows.", ["transcript."]],
  ["Server", "The server itself: set when it starts.", ["serve."]],
];

function groupOf(name) {
  for (const [title, , members] of GROUPS) {
    if (members.some((m) => (m.endsWith(".") ? name.startsWith(m) : name === m))) return title;
  }
  return "Other";
}

function sentence(text) {
  const t = text.trim();
  return t && !/[.!?]$/.test(t) ? `${t}.` : t;
}

let shown = {};  // name -> the item the form was rendered from

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

// Where a change applies: this server process, or (its sessions in a database) every
// server process on that database, one started later included.
function sayWhere(shared) {
  $("settings-scope").textContent = shared
    ? "Changes apply from the next reply, in every server process on this sessions database, and stay until set back."
    : "Changes apply from the next reply, in this server process.";
}

export async function loadSettings() {
  const view = await api(`${API}/settings`);
  sayWhere(view.shared);
  renderSettings(view.data);
}

function settingRow(item) {
  const set = document.createElement("div");
  set.className = "setting";
  const label = document.createElement("label");
  label.htmlFor = `setting-${item.name}`;
  const title = document.createElement("span");
  title.className = "label";
  title.textContent = item.label || item.name;
  const key = document.createElement("code");
  key.className = "key";
  key.textContent = item.name;
  label.append(title, " ", key);
  const help = document.createElement("span");
  help.className = "help";
  help.id = `help-${item.name}`;
  help.textContent = `${sentence(item.help)} Accepted: ${sentence(item.accepted)}`;
  if (item.writable) {
    const input = settingInput(item);
    input.setAttribute("aria-describedby", help.id);
    set.append(label, input, help);
  } else {
    // Fixed while serving: the value as text, and where to change it.
    const value = document.createElement("output");
    value.id = `setting-${item.name}`;
    value.className = "fixed";
    value.setAttribute("aria-describedby", help.id);
    value.textContent = item.value === "" ? "(none)" : String(item.value);
    help.textContent += " Set when the server starts (config file, environment or flag).";
    set.append(label, value, help);
  }
  return set;
}

function renderSettings(items) {
  const form = $("settings-form");
  form.replaceChildren();
  shown = {};
  const groups = new Map([...GROUPS.map(([title]) => [title, []]), ["Other", []]]);
  for (const item of items) {
    shown[item.name] = item;
    groups.get(groupOf(item.name)).push(item);
  }
  const about = Object.fromEntries(GROUPS.map(([title, what]) => [title, what]));
  let first = true;
  for (const [title, members] of groups) {
    if (!members.length) continue;
    const box = document.createElement("details");
    box.className = "settings-group";
    box.open = first;  // Chat, what a chat user changes, is open; the rest one click away
    first = false;
    const summary = document.createElement("summary");
    summary.textContent = title;
    box.append(summary);
    if (about[title]) {
      const what = document.createElement("p");
      what.className = "help";
      what.textContent = about[title];
      box.append(what);
    }
    for (const item of members) box.append(settingRow(item));
    form.append(box);
  }
  const save = document.createElement("button");
  save.type = "submit";
  save.textContent = "Save settings";
  form.append(save);
}

export async function saveSettings(event) {
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
      input.closest(".setting").append(why);
      input.closest("details").open = true;  // a refusal inside a closed group is still seen
      input.setAttribute("aria-invalid", "true");
      input.focus();
    }
  }
}
