// Settings, rendered from the server's schema: each one labelled, with what it accepts,
// fixed ones disabled; a save sends only what changed, and a refused value is explained
// beside its field by the server's own message (the form is novalidate for that).

import { API, api } from "./api.js";
import { $ } from "./page.js";

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

export async function loadSettings() {
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
      input.closest("fieldset").append(why);
      input.setAttribute("aria-invalid", "true");
      input.focus();
    }
  }
}
