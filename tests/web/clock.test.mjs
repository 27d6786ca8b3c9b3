// The front end's reply clock (serve/web/clock.js) alone, under node's own test runner:
// `node --test tests/web/clock.test.mjs` (test_clock.py runs it with the rest of the
// suite). Time and the interval timer are given, so every tick is exact.

import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { test } from "node:test";

// The browser's module, loaded as a module whatever node takes a plain .js file for (it
// imports nothing, so a data: URL holds all of it).
const source = await readFile(new URL("../../pyshell/boundctx/serve/web/clock.js", import.meta.url), "utf8");
const { ReplyClock, clockLine } = await import(`data:text/javascript;base64,${Buffer.from(source).toString("base64")}`);

// A clock on a given time (milliseconds) and a timer that ticks only when told.
function scripted() {
  const state = { ms: 0, tick: null, every: null, cleared: false, node: { textContent: "" } };
  const timers = {
    setInterval(fn, every) { state.tick = fn; state.every = every; return 7; },
    clearInterval(handle) { assert.equal(handle, 7); state.cleared = true; },
  };
  state.clock = new ReplyClock(() => state.node, { now: () => state.ms, timers });
  state.at = (seconds) => { state.ms = seconds * 1000; state.tick(); return state.node.textContent; };
  return state;
}

test("the line says the seconds so far and, with an estimate, what is left", () => {
  assert.equal(clockLine(12.7, null), "12 s so far");
  assert.equal(clockLine(12, undefined), "12 s so far");
  assert.equal(clockLine(12, 40), "12 s so far · about 40 s left");
  assert.equal(clockLine(12, 0.2), "12 s so far · about 1 s left");  // never "about 0 s"
  assert.equal(clockLine(12, 0), "12 s so far · running over the estimate");
  assert.equal(clockLine(12, -30), "12 s so far · running over the estimate");
});

test("it ticks every second between events, counting the estimate down", () => {
  const s = scripted();
  assert.equal(s.every, 1000);
  assert.equal(s.node.textContent, "0 s so far");  // drawn at once, no estimate yet
  assert.equal(s.at(3), "3 s so far");
  s.clock.heard({ type: "analysis_progress", remaining_s: null });  // nothing measured yet
  assert.equal(s.node.textContent, "3 s so far");
  s.ms = 10000;
  s.clock.heard({ type: "analysis_progress", remaining_s: 40 });
  assert.equal(s.node.textContent, "10 s so far · about 40 s left");
  assert.equal(s.at(11), "11 s so far · about 39 s left");
  assert.equal(s.at(30), "30 s so far · about 20 s left");
});

test("each event's estimate replaces the last, and events without one keep it", () => {
  const s = scripted();
  s.ms = 10000;
  s.clock.heard({ type: "analysis_progress", remaining_s: 40 });
  s.ms = 20000;
  s.node.textContent = "";  // the page replaced its progress lines
  s.clock.heard({ type: "fitted", analysed: ["remaining_s"] });
  assert.equal(s.node.textContent, "20 s so far · about 30 s left");  // drawn again at once, still counting
  s.clock.heard({ type: "stage", remaining_s: 5.5 });  // corrected: the events know better now
  assert.equal(s.node.textContent, "20 s so far · about 6 s left");
  s.clock.heard(null);
  assert.equal(s.at(21), "21 s so far · about 5 s left");
});

test("an estimate that runs out while the reply goes on is said to be running over", () => {
  const s = scripted();
  s.clock.heard({ type: "stage", remaining_s: 2 });
  assert.equal(s.at(1.5), "1 s so far · about 1 s left");
  assert.equal(s.at(2), "2 s so far · running over the estimate");
  assert.equal(s.at(60), "60 s so far · running over the estimate");
});

test("stop ends the ticking and says the time it took, once", () => {
  const s = scripted();
  s.ms = 52400;
  s.clock.stop();
  assert.ok(s.cleared);
  assert.equal(s.node.textContent, "52 s in all");
  s.ms = 90000;
  s.clock.stop();
  assert.equal(s.node.textContent, "52 s in all");
});

test("a node that is gone is skipped, and a new one is written in at the next tick", () => {
  const s = scripted();
  s.node = null;
  assert.doesNotThrow(() => s.tick());
  s.node = { textContent: "" };
  assert.equal(s.at(4), "4 s so far");
});
