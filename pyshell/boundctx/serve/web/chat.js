// Chat on the open session: the question (and an attached file) goes out, the reply's
// named events come back, the answer's text apart from the progress shown below it, and
// Stop cancels. The exchange joins the transcript only once the server saved it.

import { API, ApiError, api, postEvents } from "./api.js";
import { $ } from "./page.js";
import { counted, unsavedMessage, view } from "./session.js";

let turn = null;  // the reply in flight, if any

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

// One reply as the page shows it: the answer's node, its text so far, the progress
// lines, and whether a done or failed event came (else the stream just stopped); its
// id once the server named it, for Stop.
class Turn {
  constructor(answer) {
    this.id = null;
    this.abort = new AbortController();
    this.box = $("messages");
    this.answer = answer;
    this.text = answer.querySelector(".text");
    this.progress = $("progress");
    this.said = "";
    this.ended = false;
  }

  line(className) {  // the one progress line of this kind, replaced as it changes
    return this.progress.querySelector(`.${className}`) || this.progress.appendChild(progressLine("", className));
  }

  end() {
    this.ended = true;
    this.answer.removeAttribute("aria-busy");
  }

  fail(message) {
    const error = $("reply-error");
    error.textContent = message;
    error.hidden = false;
  }
}

// What each named event of a reply does to the page (serve/session_replies.py sends
// them); an event not named here is not shown.
const ON = {
  reply(t, data) {
    t.id = data.id;
    for (const n of data.notices) t.progress.append(progressLine(`Note: ${n}`));
  },
  fitted(t, data) {
    if (data.dropped.length || data.analysed.length || data.clipped) {
      t.progress.replaceChildren(progressLine(`${data.dropped.length} older messages left out; ` +
        `${data.analysed.length} inputs to read in sections` + (data.clipped ? `; ${data.clipped} clipped` : "")));
    }
    if (data.reused_tokens !== null && data.prompt_tokens) {
      // Why this turn starts at once or takes a while: what the model must read anew.
      const fresh = data.prompt_tokens - data.reused_tokens;
      t.progress.append(progressLine(`Reading ${fresh.toLocaleString()} new prompt tokens` +
        (data.reused_tokens ? ` (${data.reused_tokens.toLocaleString()} kept from before)` : ""), "prompt"));
    }
  },
  analysis_progress(t, data) {
    t.line("section").textContent = `Reading section ${data.section} of ${data.sections} ` +
      `(worker ${data.worker + 1}, ${data.elapsed_s.toFixed(1)} s)`;
  },
  stage(t, data) {
    t.line("stage").textContent = data.stage === "answering" ? "Answering" : "Rereading the originals";
  },
  tool_call(t, data) {
    t.progress.append(progressLine(`Reread of the original: ${data.arguments}`, "reread"));
  },
  reply_delta(t, data) {
    t.said += data.text;
    t.text.textContent = t.said;
    t.box.scrollTop = t.box.scrollHeight;
  },
  done(t, data) {
    t.end();
    if (data.saved) counted(data.message_count);
    else t.fail(data.finish_reason === "cancelled" ? `Stopped. ${data.not_saved}` : `Not saved: ${data.not_saved}`);
    speak(t.said);
  },
  failed(t, data) {
    t.end();
    t.fail(`The reply failed: ${data.error}`);
  },
};

export async function send(event) {
  event.preventDefault();
  if (turn) return;
  const question = $("question").value;
  const file = $("attach").files[0];
  let content = question;
  if (file) content += `\n\n[attached: ${file.name}]\n${await file.text()}`;
  if (!content.trim()) return;
  const box = $("messages");
  $("reply-error").hidden = true;
  $("progress").replaceChildren();
  const answer = unsavedMessage("assistant", view.count + 1, "");
  answer.setAttribute("aria-busy", "true");
  box.append(unsavedMessage("user", view.count, content), answer);
  box.scrollTop = box.scrollHeight;
  const t = turn = new Turn(answer);
  $("send").disabled = true;
  $("stop").disabled = false;
  try {
    const events = postEvents(`${API}/sessions/${encodeURIComponent(view.sid)}/replies`, { content },
                              { signal: t.abort.signal });
    for await (const { name, data } of events) {
      if (Object.hasOwn(ON, name)) ON[name](t, data);
    }
    if (!t.ended) throw new Error("the connection to the server closed before the reply ended");
  } catch (err) {
    answer.removeAttribute("aria-busy");
    if (err.name !== "AbortError") {
      t.fail(err instanceof ApiError ? `The reply was refused: ${err.message}` : `The reply failed: ${err.message}`);
    }
  } finally {
    turn = null;
    $("send").disabled = false;
    $("stop").disabled = true;
    $("question").value = "";
    $("attach").value = "";
  }
}

export async function stop() {
  const t = turn;
  if (!t) return;
  $("stop").disabled = true;
  try {
    if (!t.id) throw new Error("no reply id yet");
    await api(`${API}/replies/${encodeURIComponent(t.id)}/cancel`, { method: "POST" });
  } catch {
    t.abort.abort();  // closing the stream cancels the reply too
  }
}
