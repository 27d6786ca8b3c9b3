// The HTTP edge: every request the page makes goes through here, with the API key the
// reader entered, and a refusal comes back as an ApiError carrying the server's status,
// message, code and param. A reply's named events are read by namedEvents, which needs
// nothing of the page (tests/web/stream_reader.test.mjs runs it under node).

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

// The events of a server-sent-event stream (a ReadableStream of UTF-8 bytes), as the
// HTML standard reads them: { name, data }, name "message" unless an `event:` field
// said otherwise, data the `data:` fields joined by "\n". Lines may end in LF, CRLF or
// CR, and a read may stop anywhere, even inside a character or between the CR and LF of
// one line end. Comments (the server's ": ping") and events without data yield nothing;
// `id:` and `retry:` are not used (a reply is never resumed). An event the stream ends
// before the blank line that closes it is dropped, as the standard says.
export async function* namedEvents(stream) {
  const reader = stream.getReader();
  const decoder = new TextDecoder();  // drops a leading byte order mark
  let buffer = "";
  let name = "";
  let data = [];
  for (;;) {
    const { value, done } = await reader.read();
    buffer += done ? decoder.decode() : decoder.decode(value, { stream: true });
    const ends = /\r\n|\r|\n/g;
    let from = 0;
    let end;
    while ((end = ends.exec(buffer)) !== null) {
      // A CR last in the buffer may be half of a CRLF: wait for the next read to say.
      if (end[0] === "\r" && end.index === buffer.length - 1 && !done) break;
      const line = buffer.slice(from, end.index);
      from = ends.lastIndex;
      if (line === "") {
        if (data.length) yield { name: name || "message", data: data.join("\n") };
        name = "";
        data = [];
        continue;
      }
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let text = colon < 0 ? "" : line.slice(colon + 1);
      if (text.startsWith(" ")) text = text.slice(1);
      if (field === "event") name = text;
      else if (field === "data") data.push(text);
    }
    buffer = buffer.slice(from);
    if (done) return;
  }
}
