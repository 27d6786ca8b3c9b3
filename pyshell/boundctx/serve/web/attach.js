// An attached file, checked before the page reads it: its size against what the server
// takes (serve.max_body_bytes, analysis.max_source_chars, from /settings), its kind
// from its first bytes (text, not an image or an archive), and only then read. A file
// the server would refuse is refused here at once, in words, without freezing the tab
// on reading it; on the page an attachment is a chip with its name and size, never its
// text poured into the message.

import { API, api } from "./api.js";

const SNIFF_BYTES = 8192;
// What the server takes when /settings cannot be read (the defaults).
const DEFAULTS = { maxBody: 32 << 20, maxChars: 1_000_000 };

// Asked at each attachment: a PATCH of the settings may have changed them.
async function serverLimits() {
  try {
    const s = await api(`${API}/settings`);
    const value = (key, fallback) => {
      const item = s.data.find((d) => d.name === key);
      return item && typeof item.value === "number" ? item.value : fallback;
    };
    return { maxBody: value("serve.max_body_bytes", DEFAULTS.maxBody),
             maxChars: value("analysis.max_source_chars", DEFAULTS.maxChars) };
  } catch {
    return DEFAULTS;  // the server's own check still holds
  }
}

export function sizeInWords(bytes) {
  if (bytes < 1024) return `${bytes} bytes`;
  const units = ["KB", "MB", "GB"];
  let n = bytes / 1024;
  let u = 0;
  while (n >= 1024 && u < units.length - 1) {
    n /= 1024;
    u += 1;
  }
  return `${n.toFixed(n < 10 ? 1 : 0)} ${units[u]}`;
}

// What a file's first bytes say it is, when that is not text: a name for the refusal.
const SIGNATURES = [
  [[0x89, 0x50, 0x4e, 0x47], "a PNG image"], [[0xff, 0xd8, 0xff], "a JPEG image"], [[0x47, 0x49, 0x46, 0x38], "a GIF image"],
  [[0x25, 0x50, 0x44, 0x46], "a PDF document"], [[0x50, 0x4b, 0x03, 0x04], "a ZIP archive (or an Office document)"],
  [[0x1f, 0x8b], "a gzip archive"], [[0x7f, 0x45, 0x4c, 0x46], "a program (ELF)"],
];

function notText(head) {
  for (const [magic, what] of SIGNATURES) {
    if (magic.every((b, i) => head[i] === b)) return what;
  }
  if (head.includes(0)) return "a binary file (it holds zero bytes)";
  try {
    // `stream` lets the sniffed prefix end inside a character.
    new TextDecoder("utf-8", { fatal: true }).decode(head, { stream: true });
  } catch {
    return "not UTF-8 text";
  }
  return null;
}

export class AttachmentRefused extends Error {}

// `file` read as text once it passes every check: { name, size, text }; else
// AttachmentRefused saying why and what to do.
export async function readAttachment(file) {
  const { maxBody, maxChars } = await serverLimits();
  const size = sizeInWords(file.size);
  if (file.size > maxBody) {
    throw new AttachmentRefused(`${file.name} is ${size}; the server takes requests of at most ` +
      `${sizeInWords(maxBody)} (serve.max_body_bytes). Attach a smaller file, or part of this one.`);
  }
  if (file.size > 4 * maxChars) {  // UTF-8 holds at most 4 bytes a character
    throw new AttachmentRefused(`${file.name} is ${size}, more than the ${maxChars.toLocaleString()} characters ` +
      "one reply reads (analysis.max_source_chars). Attach a smaller file, or part of this one.");
  }
  const head = new Uint8Array(await file.slice(0, SNIFF_BYTES).arrayBuffer());
  const kind = notText(head);
  if (kind) {
    throw new AttachmentRefused(`${file.name} is ${kind}; only text files can be attached ` +
      "(the model reads text). Paste or attach its text instead.");
  }
  const text = await file.text();
  if (text.length > maxChars) {
    throw new AttachmentRefused(`${file.name} has ${text.length.toLocaleString()} characters, more than the ` +
      `${maxChars.toLocaleString()} one reply reads (analysis.max_source_chars). Attach a smaller file, or part of this one.`);
  }
  return { name: file.name, size: file.size, text };
}

// How an attachment is sent: after the question, named (the model and the transcript
// see this; the page shows a chip instead).
export const ATTACHED = "\n\n[attached: ";

export function withAttachment(question, attachment) {
  return `${question}${ATTACHED}${attachment.name}]\n${attachment.text}`;
}

// A question as sent, split into what the person typed and what they attached:
// { typed, name, text } (name null when nothing was attached).
export function splitAttachment(content) {
  const none = { typed: content, name: null, text: "" };
  const at = content.indexOf(ATTACHED);
  if (at < 0) return none;
  const end = content.indexOf("]\n", at + ATTACHED.length);
  if (end < 0) return none;
  return { typed: content.slice(0, at), name: content.slice(at + ATTACHED.length, end), text: content.slice(end + 2) };
}

// The chip a message shows for an attachment.
export function chip(name, detail) {
  const c = document.createElement("span");
  c.className = "chip";
  c.textContent = `📎 ${name}`;
  if (detail) {
    const d = document.createElement("small");
    d.textContent = ` ${detail}`;
    c.append(d);
  }
  return c;
}
