// How a transcript entry reads to a person: its role and its text, whatever the
// transcript's dialect (Claude Code, Codex, pi or boundctx's own). The one place that
// knows the dialects' shapes, so that it can be replaced whole by text the server sends.

export function entryText(entry) {
  // (role, text) of a window entry, whatever the transcript's dialect.
  if (entry.record === null || entry.record === undefined) return ["corrupt", `(${entry.corrupt}) ${entry.raw || ""}`];
  const rec = entry.record;
  let msg = typeof rec.message === "object" && rec.message ? rec.message : rec.payload;
  if (typeof msg !== "object" || msg === null) msg = rec;
  const role = msg.role || rec.type || "?";
  const content = msg.content !== undefined ? msg.content : msg.summary !== undefined ? msg.summary : rec.summary;
  if (typeof content === "string") return [String(role), content];
  if (Array.isArray(content)) {
    return [String(role), content.map((block) => {
      if (block && typeof block === "object") {
        for (const key of ["text", "thinking", "output", "content"]) {
          if (typeof block[key] === "string") return block[key];
        }
        return JSON.stringify(block);
      }
      return String(block);
    }).join("\n")];
  }
  return [String(role), JSON.stringify(content === undefined ? msg : content)];
}
