// The front end's event-stream reader (serve/web/api.js namedEvents) alone, under node's
// own test runner: `node --test tests/web/stream_reader.test.mjs` (test_stream_reader.py
// runs it with the rest of the suite). Each stream is handed over in exactly the reads
// given, so an event can be cut anywhere a network read may cut it.

import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { test } from "node:test";

// The browser's module, loaded as a module whatever node takes a plain .js file for (it
// imports nothing, so a data: URL holds all of it).
const source = await readFile(new URL("../../pyshell/boundctx/serve/web/api.js", import.meta.url), "utf8");
const { namedEvents } = await import(`data:text/javascript;base64,${Buffer.from(source).toString("base64")}`);

const bytes = (read) => (typeof read === "string" ? new TextEncoder().encode(read) : Uint8Array.from(read));

// A byte stream that answers each read with the next of `reads` (strings as UTF-8, or
// arrays of bytes), then ends.
function streamOf(reads) {
  const queue = reads.map(bytes);
  return new ReadableStream({
    pull(controller) {
      if (queue.length) controller.enqueue(queue.shift());
      else controller.close();
    },
  }, { highWaterMark: 0 });
}

async function eventsOf(reads) {
  const out = [];
  for await (const event of namedEvents(streamOf(reads))) out.push(event);
  return out;
}

// Every way of cutting `text` into two reads, and into reads of one byte each.
function everySplit(text) {
  const all = bytes(text);
  const splits = [];
  for (let at = 0; at <= all.length; at++) splits.push([all.slice(0, at), all.slice(at)].map((b) => [...b]));
  splits.push([...all].map((b) => [b]));
  return splits;
}

const REPLY = 'id: 0\nevent: reply\ndata: {"id":"reply-1","notices":[]}\n\n' +
  ": ping\n\n" +
  'id: 1\nevent: reply_delta\ndata: {"text":"The failing "}\n\n' +
  'id: 2\nevent: reply_delta\ndata: {"text":"step is 377. é漢👩‍👩‍👧"}\n\n' +
  'id: 3\nevent: done\ndata: {"saved":true}\n\n';
const REPLY_EVENTS = [
  { name: "reply", data: '{"id":"reply-1","notices":[]}' },
  { name: "reply_delta", data: '{"text":"The failing "}' },
  { name: "reply_delta", data: '{"text":"step is 377. é漢👩‍👩‍👧"}' },
  { name: "done", data: '{"saved":true}' },
];

test("a stream read whole gives its named events in order", async () => {
  assert.deepEqual(await eventsOf([REPLY]), REPLY_EVENTS);
});

test("an event cut anywhere across reads, mid-line, mid-field or mid-character, comes out the same", async () => {
  for (const reads of everySplit(REPLY)) assert.deepEqual(await eventsOf(reads), REPLY_EVENTS, JSON.stringify(reads));
});

test("an event cut across many reads, each cut inside a field name or value", async () => {
  const reads = ["ev", "ent: rep", "ly_de", "lta\nda", "ta", ": {\"te", "xt\":\"hi\"}", "\n", "\n"];
  assert.deepEqual(await eventsOf(reads), [{ name: "reply_delta", data: '{"text":"hi"}' }]);
});

test("data: fields of one event are joined by newlines", async () => {
  const events = await eventsOf(["event: failed\ndata: {\"error\":\ndata:  \"went\\naway\"\ndata: }\n\n"]);
  assert.deepEqual(events, [{ name: "failed", data: '{"error":\n "went\\naway"\n}' }]);
  assert.deepEqual(JSON.parse(events[0].data), { error: "went\naway" });
});

test("comments and pings yield nothing, alone or among an event's fields", async () => {
  const events = await eventsOf([": ping\n\n", ":\n\n", "event: stage\n: ping\ndata: 1\n\n", ": ping\n\n"]);
  assert.deepEqual(events, [{ name: "stage", data: "1" }]);
});

test("an event without event: is a message, and a name does not carry over to the next event", async () => {
  const events = await eventsOf(["data: 1\n\nevent: stage\ndata: 2\n\ndata: 3\n\n"]);
  assert.deepEqual(events, [{ name: "message", data: "1" }, { name: "stage", data: "2" }, { name: "message", data: "3" }]);
});

test("an event with a name but no data yields nothing", async () => {
  assert.deepEqual(await eventsOf(["event: stage\n\nid: 7\n\ndata: x\n\n"]), [{ name: "message", data: "x" }]);
});

test("fields without the space after the colon, with two spaces, empty, or unknown", async () => {
  const events = await eventsOf(["event:stage\ndata:a\ndata:  b\ndata\ndata:\nretry: 10\nid: 4\nother: x\n\n"]);
  assert.deepEqual(events, [{ name: "stage", data: "a\n b\n\n" }]);
});

test("CRLF and CR line ends read as LF does, a CRLF cut between its CR and LF too", async () => {
  const lf = "event: reply_delta\ndata: {\"text\":\"a\"}\n\nevent: done\ndata: {}\n\n";
  const want = await eventsOf([lf]);
  assert.equal(want.length, 2);
  for (const text of [lf.replaceAll("\n", "\r\n"), lf.replaceAll("\n", "\r")]) {
    for (const reads of everySplit(text)) assert.deepEqual(await eventsOf(reads), want, JSON.stringify(reads));
  }
});

test("a leading byte order mark is not part of the first field's name", async () => {
  assert.deepEqual(await eventsOf([[0xef, 0xbb, 0xbf], "event: done\ndata: {}\n\n"]), [{ name: "done", data: "{}" }]);
});

test("the end of the stream: what came whole is given, an event left open is dropped", async () => {
  assert.deepEqual(await eventsOf([]), []);
  assert.deepEqual(await eventsOf(["event: done\ndata: {}\n\nevent: failed\ndata: {\"error\":\"cut"]),
    [{ name: "done", data: "{}" }]);
  assert.deepEqual(await eventsOf(["data: {}\n"]), []);  // no blank line closed it
  assert.deepEqual(await eventsOf(["data: {}\n\r"]), [{ name: "message", data: "{}" }]);  // a CR last ends a line
});

test("the reader stops when the consumer does, and a read that fails reaches the consumer", async () => {
  const first = [];
  for await (const event of namedEvents(streamOf([REPLY]))) {
    first.push(event);
    break;
  }
  assert.deepEqual(first, REPLY_EVENTS.slice(0, 1));
  let reads = 0;
  const broken = new ReadableStream({
    pull(controller) {
      if (reads++ === 0) controller.enqueue(bytes("event: stage\ndata: 1\n\nevent: done\n"));
      else controller.error(new Error("the connection closed"));
    },
  }, { highWaterMark: 0 });
  const seen = [];
  await assert.rejects(async () => {
    for await (const event of namedEvents(broken)) seen.push(event);
  }, /the connection closed/);
  assert.deepEqual(seen, [{ name: "stage", data: "1" }]);
});
