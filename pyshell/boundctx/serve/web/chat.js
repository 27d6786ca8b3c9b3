// Chat on the open session: the question (and an attached file) goes out, the reply's
// named events come back, the answer's text apart from the progress shown below it, and
// Stop cancels. The exchange joins the transcript only once the server saved it (a
// complete answer). A turn that ends any other way (stopped, cut at the length limit,
// refused, failed) stays on the page as it was, marked with why, with Retry, Edit and
// Dismiss; this browser keeps it, and the composer's unsent draft, per session and
// bounded (localStorage), so a reload shows both again.

import { API, ApiError, api, postEvents } from "./api.js";
import { AttachmentRefused, chip, readAttachment, sizeInWords, splitAttachment, withAttachment } from "./attach.js";
import { $, button, notice } from "./page.js";
import { counted, showText, unsavedMessage, view } from "./session.js";
import { ReplyClock } from "./clock.js";
import { draftToCount, fitted, gaugeFor } from "./gauge.js";
import { DRAFT_KEY, KEEP, TURN_KEY, cut, forget, keep, kept } from "./keep.js";

let turn = null;      // the reply in flight, if any
let leaving = false;  // the page is being unloaded: what is kept now stays as it is

// -- the draft --------------------------------------------------------------------------------

function draftNote(text) {
  const note = $("draft-note");
  note.textContent = text;
  note.hidden = !text;
}

// The composer changed: keep what it holds for the open session.
export function draftChanged() {
  const sid = view.sid;
  const text = $("question").value;
  draftToCount(composed(text));
  let note = text.length > KEEP.draft ? `This message has ${text.length.toLocaleString()} characters; this ` +
    `browser keeps only its first ${KEEP.draft.toLocaleString()} if the page is reloaded before it is sent.` : "";
  if (!sid) return;
  if (!text) forget(DRAFT_KEY, sid);
  else if (!keep(DRAFT_KEY, sid, { text: cut(text, KEEP.draft), length: text.length })) {
    note = "This browser would not keep this message: it is lost if the page is reloaded before it is sent.";
  }
  draftNote(note);
}

function restoreDraft(sid) {
  const draft = kept(DRAFT_KEY, sid);
  const text = draft && typeof draft.text === "string" ? draft.text : "";
  $("question").value = text;
  gaugeFor(sid);
  draftToCount(text);
  draftNote(draft && draft.length > text.length ? `Your unsent message had ${draft.length.toLocaleString()} ` +
    `characters; this browser kept its first ${text.length.toLocaleString()}, shown here: the rest was not kept.` : "");
}

// -- how a turn ended, in words -------------------------------------------------------------

const ENDINGS = {
  cancelled: "Stopped: you pressed Stop before the answer was complete.",
  length: "Cut at the length limit: the answer reached the most it may be (its token limit) before it was complete.",
  repetition: "Stopped: the model began repeating itself, so the answer was ended early.",
  tool_rounds_exhausted: "Cut short: the model still wanted to reread the input when its rereads were spent.",
  content_filter: "Stopped by the model's content filter.",
  interrupted: "Interrupted: the page was reloaded or closed while the answer was coming, which stopped it.",
};

const FAILURES = {
  ContextOverflow: "the question and the history are too long for the model",
  GenerationTimeout: "the model took longer than its time limit",
  ServerUnreachable: "the model's server could not be reached",
  ServerTimeout: "the model's server did not answer in time",
  ServerResponseError: "the model's server answered with an error",
  IncompleteCoverage: "part of the input could not be read, so no answer was given",
};

function refusal(status) {
  if (status === 401) return "the server asks for an API key: enter it above, then Retry";
  if (status === 403) return "the server does not allow this";
  if (status === 404) return "this session is not on the server (any more)";
  if (status === 409) return "the session cannot take a reply now";
  if (status === 413) return "the question is larger than the server accepts";
  if (status === 400) return "the server did not accept the question";
  if (status === 429 || status === 503) return "the server is busy: try again in a moment";
  if (status >= 500) return "the server ran into an error";
  return `the server refused it (HTTP ${status})`;
}

// { ending, words, detail } of a turn that is not saved.
function finished(reason, detail = "") {
  if (Object.hasOwn(ENDINGS, reason)) return { ending: reason, words: ENDINGS[reason], detail: "" };
  return { ending: reason, words: `The answer ended (${reason}) and was not saved.`, detail };
}

// -- one turn on the page -------------------------------------------------------------------

function paragraph(className, text) {
  const p = document.createElement("p");
  p.className = className;
  p.textContent = text;
  return p;
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

// One reply as the page shows it: the question's and the answer's nodes, the answer's
// text so far, the progress lines, and whether a done or failed event came (else the
// stream just stopped); its id once the server named it, for Stop. A turn read back
// from this browser has the question and answer it kept and their lengths as asked and
// said, longer where they were cut.
class Turn {
  constructor(sid, question, asked, answer) {
    this.sid = sid;
    this.id = null;
    this.abort = new AbortController();
    this.stopping = false;
    this.question = question;
    this.questionLength = question.length;
    this.answerLength = null;  // the length of `said`, unless it was cut when kept
    this.asked = asked;
    this.answer = answer;
    this.text = answer.querySelector(".text");
    this.progress = $("progress");
    this.said = "";
    this.ended = false;
    this.keptAt = 0;
  }

  line(className) {  // the one progress line of this kind, replaced as it changes
    return this.progress.querySelector(`.${className}`) || this.progress.appendChild(progressLine("", className));
  }

  end() {
    this.ended = true;
    this.answer.removeAttribute("aria-busy");
    for (const node of [this.asked, this.answer]) node.classList.remove("sending");
  }

  // Keep this turn in the browser as it stands, ended as `how` says.
  keep(how) {
    this.keptAt = Date.now();
    this.how = how;
    return keep(TURN_KEY, this.sid, { question: cut(this.question, KEEP.question), questionLength: this.question.length,
                                      answer: cut(this.said, KEEP.answer), answerLength: this.said.length, ...how });
  }

  get whole() {  // the question is all there, as asked
    return this.question.length === this.questionLength;
  }

  // A complete answer on a session boundctx does not write into: it stays on the page
  // (not in the browser), marked as not saved, as the question asked.
  answeredUnsaved() {
    this.end();
    forget(TURN_KEY, this.sid);
    for (const [node, role] of [[this.asked, "user"], [this.answer, "assistant"]]) {
      node.classList.add("unsaved");
      delete node.dataset.index;
      node.querySelector(".role").textContent = `${role} · on this page only, not saved`;
    }
  }

  // The reply ended without a saved answer: the turn stays, marked, with what can be done.
  unfinished(how) {
    this.end();
    const stored = leaving || this.keep(how);
    markUnfinished(this, how, stored);
  }
}

function removeKeptTurn() {
  for (const node of $("messages").querySelectorAll(".message.unfinished")) node.remove();
}

// Mark `t`'s nodes as a turn not saved, the reason beside its answer.
function markUnfinished(t, how, stored) {
  for (const [node, role] of [[t.asked, "user"], [t.answer, "assistant"]]) {
    node.classList.add("unfinished");
    delete node.dataset.index;
    node.querySelector(".role").textContent = `${role} · not saved`;
  }
  t.answer.dataset.ending = how.ending;
  const ending = paragraph("ending", `${how.words} Not saved to this session: only a complete answer is.`);
  ending.setAttribute("role", "status");
  const notes = [ending];
  if (how.detail) notes.push(paragraph("detail", `The server said: ${how.detail}`));
  if (!stored) notes.push(paragraph("keep-note", "This browser would not keep this turn: it is lost if the page is reloaded."));
  if (!t.whole) {
    notes.push(paragraph("keep-note", `This browser kept the first ${t.question.length.toLocaleString()} of this ` +
      `question's ${t.questionLength.toLocaleString()} characters: Retry would send less than was asked, so it ` +
      "is off; Edit puts what was kept in the composer."));
  } else if (t.question.length > KEEP.question) {
    notes.push(paragraph("keep-note", `If the page is reloaded, this browser keeps the first ` +
      `${KEEP.question.toLocaleString()} of this question's ${t.question.length.toLocaleString()} characters.`));
  }
  if (t.answerLength !== null && t.answerLength > t.said.length) {
    notes.push(paragraph("keep-note", `This browser kept the first ${t.said.length.toLocaleString()} of this ` +
      `answer's ${t.answerLength.toLocaleString()} characters.`));
  } else if (t.said.length > KEEP.answer) {
    notes.push(paragraph("keep-note", `If the page is reloaded, this browser keeps the first ` +
      `${KEEP.answer.toLocaleString()} of this answer's ${t.said.length.toLocaleString()} characters.`));
  }
  const retry = button("Retry", () => {
    removeKeptTurn();
    ask(t.sid, t.question).catch((err) => console.error(err));
  });
  retry.disabled = !t.whole;
  const edit = button("Edit", () => {
    dismiss(t.sid);
    editInComposer(t.question, t.whole);
  });
  const actions = document.createElement("div");
  actions.className = "row actions";
  actions.append(retry, edit, button("Dismiss", () => dismiss(t.sid)));
  t.answer.append(...notes, actions);
}

// A question asked before, back in the composer to be edited: what was typed in the text
// box (before a draft already there), what was attached back to its chip. `whole`:
// the question is all there (else an attachment in it may be cut: it stays text).
export function editInComposer(question, whole = true) {
  const box = $("question");
  const { typed, name, text } = whole ? splitAttachment(question) : { typed: question, name: null };
  if (name !== null) setAttachment({ name, size: new Blob([text]).size, text });
  box.value = box.value ? `${typed}\n\n${box.value}` : typed;
  draftChanged();
  box.focus();
}

// The person is done with the session's unfinished turn: off the page and out of the browser.
function dismiss(sid) {
  if (view.sid === sid) removeKeptTurn();
  forget(TURN_KEY, sid);
}

// The view went to a session: its draft, and only its own, in the composer.
export function sessionSwitched(sid) {
  restoreDraft(sid);
}

// The session's view opened: under its saved history the reply in flight (when the
// reader comes back to it) or the unfinished turn this browser kept.
export function sessionOpened(sid) {
  const box = $("messages");
  if (turn && turn.sid === sid) {
    box.append(turn.asked, turn.answer);
    return;
  }
  const k = kept(TURN_KEY, sid);
  if (!k || typeof k.question !== "string" || typeof k.answer !== "string") return;
  const asked = unsavedMessage("user", null, k.question);
  const answer = unsavedMessage("assistant", null, k.answer);
  box.append(asked, answer);
  const t = new Turn(sid, k.question, asked, answer);
  t.questionLength = Math.max(k.question.length, Number(k.questionLength) || 0);
  t.said = k.answer;
  t.answerLength = Math.max(k.answer.length, Number(k.answerLength) || 0);
  markUnfinished(t, { ending: String(k.ending), words: String(k.words || ""), detail: String(k.detail || "") }, true);
}

// The page is going away: a reply in flight is kept as interrupted, with what it said.
// If it comes back (the back-forward cache), it keeps turns as before.
export function leave() {
  if (turn) turn.keep(finished("interrupted"));
  leaving = true;
}

export function returned() {
  leaving = false;
}

// What each named event of a reply does to the page (serve/session_replies.py sends
// them); an event not named here is not shown.
const ON = {
  reply(t, data) {
    t.id = data.id;
    for (const n of data.notices) t.progress.append(progressLine(`Note: ${n}`));
  },
  fitted(t, data) {
    fitted(data);
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
    // The server says what the call does ("searching earlier messages for 'deploy key'").
    const said = data.said || `rereading: ${data.arguments}`;
    t.progress.append(progressLine(said.charAt(0).toUpperCase() + said.slice(1), "reread"));
  },
  reply_delta(t, data) {
    t.said += data.text;
    t.text.textContent = t.said;  // plain while it streams; rendered once it ends
    t.answer.raw = t.said;
    $("messages").scrollTop = $("messages").scrollHeight;
    // What survives a crash of the tab: the answer so far, written about once a second.
    if (Date.now() - t.keptAt > 1000) t.keep(finished("interrupted"));
  },
  done(t, data) {
    showText(t.text, "assistant", t.said);
    for (const c of data.cut_prompts || []) {
      // The model's server kept less of a prompt than was sent (decision 0043).
      notice(`The model's server read ${c.evaluated.toLocaleString()} tokens of the ${c.call}'s prompt of ` +
             `${c.sent_at_least.toLocaleString()} or more: it cut the prompt, so that call did not see all of it.`);
    }
    if (data.saved) {
      t.end();
      forget(TURN_KEY, t.sid);
      if (view.sid === t.sid) counted(data.message_count);
    } else if (!t.saving && data.finish_reason === "stop") {
      t.answeredUnsaved();
    } else if (data.finish_reason === "stop") {
      t.unfinished({ ending: "unsaved", words: "The answer is complete but could not be saved.",
                     detail: data.not_saved });
    } else {
      t.unfinished(finished(data.finish_reason, data.not_saved));
    }
    speak(t.said);
  },
  failed(t, data) {
    t.unfinished({ ending: "failed", words: `Failed: ${FAILURES[data.kind] || "the model could not give an answer"}.`,
                   detail: data.error });
  },
};

// -- the composer's attachment --------------------------------------------------------------

let attached = null;  // { name, size, text } checked and read, sent with the next question

function attachNote(text) {
  const note = $("attach-note");
  note.textContent = text;
  note.hidden = !text;
}

// What sending `question` now would send: it, with the attachment if there is one.
function composed(question) {
  return attached ? withAttachment(question, attached) : question;
}

function setAttachment(a) {
  attached = a;
  draftToCount(composed($("question").value));
  const box = $("attached");
  box.replaceChildren();
  if (!a) return;
  const c = chip(a.name, `${sizeInWords(a.size)}, ${a.text.length.toLocaleString()} characters`);
  const remove = button("Remove", () => setAttachment(null));
  remove.setAttribute("aria-label", `Remove the attachment ${a.name}`);
  box.append(c, remove);
}

// A file was chosen: checked (size, kind) before it is read, then held as a chip.
export async function fileChosen() {
  const input = $("attach");
  const file = input.files[0];
  input.value = "";  // the same file can be chosen again after a refusal
  attachNote("");
  if (!file) return;
  attachNote(`Reading ${file.name}…`);
  try {
    setAttachment(await readAttachment(file));
    attachNote("");
  } catch (err) {
    attachNote(err instanceof AttachmentRefused ? `Not attached: ${err.message}` : `Not attached: ${err.message || err}`);
  }
}

export async function send(event) {
  event.preventDefault();
  if (turn || !view.sid) return;
  const question = $("question").value;
  if (!question.trim() && !attached) return;
  const content = composed(question);
  // The question moves from the composer into the turn, which keeps it from here on.
  $("question").value = "";
  setAttachment(null);
  attachNote("");
  draftChanged();
  await ask(view.sid, content);
}

// Ask `content` on session `sid`: a session has at most one unfinished turn, and a new
// question (or the same one again) takes its place.
export async function ask(sid, content) {
  if (turn) return;
  dismiss(sid);
  const box = $("messages");
  $("progress").replaceChildren();
  const answer = unsavedMessage("assistant", view.count + 1, "");
  answer.setAttribute("aria-busy", "true");
  const asked = unsavedMessage("user", view.count, content);
  for (const node of [asked, answer]) node.classList.add("sending");  // not the session's until saved
  box.append(asked, answer);
  box.scrollTop = box.scrollHeight;
  const t = turn = new Turn(sid, content, asked, answer);
  const clock = new ReplyClock(() => t.line("clock"));  // the reply's time, one line ticking every second
  t.keep(finished("interrupted"));  // if the page goes away mid-reply, this is what stays
  $("send").disabled = true;
  $("stop").disabled = false;
  try {
    // Another agent's session is asked without saving (the server would refuse to write).
    t.saving = view.sid !== sid || view.writable;
    const events = postEvents(`${API}/sessions/${encodeURIComponent(sid)}/replies`,
                              t.saving ? { content } : { content, save: false },
                              { signal: t.abort.signal });
    for await (const { name, data } of events) {
      if (Object.hasOwn(ON, name)) ON[name](t, data);
      clock.heard(data);
    }
    if (!t.ended) throw new Error("the connection to the server closed before the answer ended");
  } catch (err) {
    if (t.ended) {
      // the turn was marked already
    } else if (err.name === "AbortError" && t.stopping) {
      t.unfinished(finished("cancelled"));
    } else if (err instanceof ApiError) {
      t.unfinished({ ending: "refused", words: `Refused: ${refusal(err.status)}.`, detail: err.message });
    } else if (!leaving) {
      t.unfinished({ ending: "failed", words: "Failed: the connection to the server was lost before the answer ended.",
                     detail: err.name === "AbortError" ? "" : err.message });
    }
  } finally {
    clock.stop();
    turn = null;
    $("send").disabled = false;
    $("stop").disabled = true;
    if (box.scrollHeight - box.scrollTop - box.clientHeight < 200) box.scrollTop = box.scrollHeight;
  }
}

export async function stop() {
  const t = turn;
  if (!t) return;
  $("stop").disabled = true;
  t.stopping = true;
  try {
    if (!t.id) throw new Error("no reply id yet");
    await api(`${API}/replies/${encodeURIComponent(t.id)}/cancel`, { method: "POST" });
  } catch {
    t.abort.abort();  // closing the stream cancels the reply too
  }
}
