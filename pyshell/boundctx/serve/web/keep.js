// What this browser keeps of a session between page loads: the composer's unsent draft
// and an unfinished turn, in localStorage, each bounded, the least recently written going
// first when there are too many or the browser's quota is reached. Nothing here knows
// what a draft or a turn is: values are plain objects, written with the time they were.

// The bounds of what is kept, in characters (UTF-16 code units, as the browser counts its
// quota of about 5 million per site): a session's draft and its unfinished turn's
// question and answer are each cut to their limit (and the cut said where they are
// shown), and at most `sessions` sessions keep a draft, and as many an unfinished turn,
// the least recently written out first: 8 × 350,000 characters at most, in all.
export const KEEP = { draft: 100_000, question: 100_000, answer: 50_000, sessions: 8 };
export const DRAFT_KEY = "boundctx-draft:";  // + session id
export const TURN_KEY = "boundctx-turn:";    // + session id

// `text` cut to `limit` characters, never between the halves of a surrogate pair.
export function cut(text, limit) {
  if (text.length <= limit) return text;
  const end = /[\uD800-\uDBFF]/.test(text[limit - 1]) ? limit - 1 : limit;
  return text.slice(0, end);
}

export function kept(prefix, sid) {
  try {
    const value = JSON.parse(localStorage.getItem(prefix + sid));
    return value && typeof value === "object" ? value : null;
  } catch {
    return null;  // no storage here, or not ours
  }
}

export function forget(prefix, sid) {
  try {
    localStorage.removeItem(prefix + sid);
  } catch {
    // no storage here: nothing was kept
  }
}

// The keys of one kind, oldest written first.
function keysOf(prefix) {
  const keys = [];
  for (let i = 0; i < localStorage.length; i++) {
    const key = localStorage.key(i);
    if (key && key.startsWith(prefix)) {
      let at = 0;
      try { at = JSON.parse(localStorage.getItem(key)).at || 0; } catch { /* oldest */ }
      keys.push({ key, at });
    }
  }
  return keys.sort((a, b) => a.at - b.at).map((k) => k.key);
}

// Keep `value` for `sid`; false if the browser would not keep it, even after the oldest
// entries of this kind made room.
export function keep(prefix, sid, value) {
  const text = JSON.stringify({ ...value, at: Date.now() });
  try {
    for (;;) {
      try {
        localStorage.setItem(prefix + sid, text);
        break;
      } catch {
        const oldest = keysOf(prefix).find((k) => k !== prefix + sid);
        if (!oldest) return false;
        localStorage.removeItem(oldest);
      }
    }
    const keys = keysOf(prefix);
    for (const key of keys.slice(0, Math.max(0, keys.length - KEEP.sessions))) localStorage.removeItem(key);
    return true;
  } catch {
    return false;  // no storage here
  }
}
