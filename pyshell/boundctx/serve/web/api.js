// The HTTP edge: every request the page makes goes through here, with the API key the
// reader entered, and a refusal comes back as an ApiError carrying the server's status,
// message, code and param. A reply's named events are read by namedEvents, which needs
// nothing of the page.

export const API = "/boundctx/v1";

const KEY = "boundctx-key";  // sessionStorage: this tab only

export function apiKey() {
  return sessionStorage.getItem(KEY) || "";
}

export function setApiKey(key) {
  sessionStorage.setItem(KEY, key);
}

function headers(extra = {}) {
  const key = apiKey();
  return key ? { Authorization: `Bearer ${key}`, ...extra } : extra;
}

export class ApiError extends Error {
  constructor(status, body) {
    super((body && body.error && body.error.message) || `HTTP ${status}`);
    this.status = status;
    this.code = body && body.error && body.error.code;
    this.param = body && body.error && body.error.param;
  }
}

export async function api(path, { method = "GET", body } = {}) {
  const init = { method, headers: headers(body !== undefined ? { "Content-Type": "application/json" } : {}) };
  if (body !== undefined) init.body = JSON.stringify(body);
  const r = await fetch(path, init);
  const text = await r.text();
  const data = text ? JSON.parse(text) : null;
  if (!r.ok) throw new ApiError(r.status, data);
  return data;
}

// POST `body` and read the answer's named events as { name, data } with data parsed from
// JSON; a refusal before the stream starts is an ApiError. Aborting `signal` closes the
// stream (the server cancels the reply then).
export async function* postEvents(path, body, { signal } = {}) {
  const r = await fetch(path, { method: "POST", headers: headers({ "Content-Type": "application/json" }),
                                body: JSON.stringify(body), signal });
  if (!r.ok) throw new ApiError(r.status, await r.json().catch(() => null));
  for await (const { name, data } of namedEvents(r.body)) yield { name, data: JSON.parse(data) };
}

// The events of a server-sent-event stream (a ReadableStream of UTF-8 bytes) as the
// server writes them: { name, data }, name "message" unless an `event: ` line said
// otherwise, data the `data: ` lines joined by "\n", each event ended by a blank line.
export async function* namedEvents(stream) {
  const reader = stream.getReader();
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
      if (data.length) yield { name, data: data.join("\n") };  // a ": ping" has no data
    }
  }
}
