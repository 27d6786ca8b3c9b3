// A reply's time as one line that keeps moving: the seconds so far, and what the
// server's one estimate of the whole reply (the `remaining_s` its analysis_progress and
// stage events carry, the number `boundctx ask` shows too) leaves, counted down every
// second between events. Once the estimate has run out with the reply still going, the
// line says it is running over the estimate, never "0 s left"; where the server has no
// estimate (nothing measured yet), only the seconds so far. Text only, set with
// textContent; it imports nothing, so it is tested alone under node.

const TICK_MS = 1000;

// The line for `soFarS` seconds since the reply began and `leftS` seconds of the estimate
// left (null or undefined: no estimate).
export function clockLine(soFarS, leftS) {
  const line = `${Math.floor(soFarS)} s so far`;
  if (typeof leftS !== "number") return line;
  return leftS > 0 ? `${line} · about ${Math.ceil(leftS)} s left` : `${line} · running over the estimate`;
}

// One reply's clock, started when it is made: `node()` gives the element to write in,
// looked up at every draw (the progress area may be replaced under it, and a node that
// is gone is skipped). `now` (milliseconds) and `timers` are the browser's unless given.
export class ReplyClock {
  constructor(node, { now = () => performance.now(), timers = globalThis } = {}) {
    this.node = node;
    this.now = now;
    this.timers = timers;
    this.started = now();
    this.left = null;  // seconds of the estimate as last heard, or null
    this.heardAt = this.started;
    this.timer = timers.setInterval(() => this.draw(), TICK_MS);
    this.draw();
  }

  // An event's data: one that carries `remaining_s` sets the estimate, counted down from
  // now (null: none); any other leaves it as it was. Either way the line is drawn again
  // (after an event's own handler, it is back at once if that replaced the progress area).
  heard(data) {
    if (data && typeof data === "object" && Object.hasOwn(data, "remaining_s")) {
      this.left = typeof data.remaining_s === "number" ? data.remaining_s : null;
      this.heardAt = this.now();
    }
    this.draw();
  }

  text() {
    const at = this.now();
    const left = this.left === null ? null : this.left - (at - this.heardAt) / 1000;
    return clockLine((at - this.started) / 1000, left);
  }

  draw() {
    const node = this.node();
    if (node) node.textContent = this.text();
  }

  // The reply ended (however it ended): the ticking stops and the line says the time it took.
  stop() {
    if (this.timer === null) return;
    this.timers.clearInterval(this.timer);
    this.timer = null;
    const node = this.node();
    if (node) node.textContent = `${Math.floor((this.now() - this.started) / 1000)} s in all`;
  }
}
