// Markdown as a chat answer uses it, turned into DOM nodes and never into markup: every
// piece of text becomes a text node, so nothing a model or a transcript says (a <script>,
// an onerror attribute, an entity) is ever parsed as HTML. A link keeps its address only
// when it is http(s) or mailto. The subset: fenced code blocks (each with a Copy
// button), headings, lists, quotes, rules, paragraphs; inline code, bold, italics and
// links. Anything else stays as the text it is.

import { copyButton } from "./page.js";

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const BULLET = /^ {0,3}[-*+]\s+(.*)$/;
const NUMBERED = /^ {0,3}(\d{1,9})[.)]\s+(.*)$/;
const QUOTE = /^ {0,3}>\s?(.*)$/;
const RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;
const SAFE_LINK = /^(https?:|mailto:)/i;

function el(tag, className) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  return node;
}

// -- inline ---------------------------------------------------------------------------------

// `code`, **bold**, __bold__, *italic*, _italic_, [text](address): the first that starts
// earliest wins; what lies between them is text. Emphasis hugs its text, and underscores
// emphasise only between words (a snake_case name or window.__name stays as it is).
const INLINE = new RegExp([
  "`([^`\\n]+)`",
  "\\*\\*(?=\\S)([^*\\n]+?)(?<=\\S)\\*\\*",
  "(?<![\\w])__(?=\\S)([^_\\n]+?)(?<=\\S)__(?![\\w])",
  "\\*(?=[^*\\s])([^*\\n]*?[^*\\s])?\\*",
  "(?<![\\w])_(?=\\S)([^_\\n]+?)(?<=\\S)_(?![\\w])",
  "\\[([^\\]\\n]+)\\]\\(([^)\\s]+)\\)",
].join("|"), "g");

function inline(text, parent) {
  let at = 0;
  for (const m of text.matchAll(INLINE)) {
    if (m.index > at) parent.append(document.createTextNode(text.slice(at, m.index)));
    if (m[1] !== undefined) {
      const code = el("code");
      code.textContent = m[1];
      parent.append(code);
    } else if (m[2] !== undefined || m[3] !== undefined) {
      inline(m[2] ?? m[3], parent.appendChild(el("strong")));
    } else if (m[4] !== undefined || m[5] !== undefined) {
      inline(m[4] ?? m[5], parent.appendChild(el("em")));
    } else if (SAFE_LINK.test(m[7])) {
      const a = el("a");
      a.href = m[7];
      a.rel = "noopener noreferrer nofollow";
      a.target = "_blank";
      inline(m[6], a);
      parent.append(a);
    } else {
      parent.append(document.createTextNode(m[0]));  // an address of another scheme stays text
    }
    at = m.index + m[0].length;
  }
  if (at < text.length) parent.append(document.createTextNode(text.slice(at)));
}

// Lines of one paragraph, their breaks kept (a chat answer means them).
function paragraph(lines) {
  const p = el("p");
  lines.forEach((line, i) => {
    if (i) p.append(el("br"));
    inline(line, p);
  });
  return p;
}

// -- blocks ---------------------------------------------------------------------------------

function codeBlock(lines, language) {
  const box = el("div", "code-block");
  const bar = el("div", "code-bar");
  const name = el("span", "code-language");
  name.textContent = language;
  const pre = el("pre");
  const code = el("code");
  code.textContent = lines.join("\n");
  pre.append(code);
  bar.append(name, copyButton(() => code.textContent, "Copy code"));
  box.append(bar, pre);
  return box;
}

// `text` as a fragment of DOM nodes.
export function renderMarkdown(text) {
  const out = document.createDocumentFragment();
  const lines = text.split("\n");
  let i = 0;
  let para = [];
  const flush = () => {
    if (para.length) out.append(paragraph(para));
    para = [];
  };
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if ((m = FENCE.exec(line))) {
      flush();
      const fence = m[1];
      const body = [];
      i += 1;
      while (i < lines.length && !lines[i].trimStart().startsWith(fence)) body.push(lines[i++]);
      i += 1;  // the closing fence (or the end: an unclosed block runs to it)
      out.append(codeBlock(body, m[2]));
      continue;
    }
    if (!line.trim()) {
      flush();
    } else if ((m = HEADING.exec(line))) {
      flush();
      const h = el(`h${Math.min(6, m[1].length + 2)}`);  // below the page's own headings
      inline(m[2], h);
      out.append(h);
    } else if (RULE.test(line)) {
      flush();
      out.append(el("hr"));
    } else if (BULLET.test(line) || NUMBERED.test(line)) {
      flush();
      const numbered = !BULLET.test(line);
      const list = el(numbered ? "ol" : "ul");
      if (numbered) list.start = Number(NUMBERED.exec(line)[1]);
      const pattern = numbered ? NUMBERED : BULLET;
      while (i < lines.length && (m = pattern.exec(lines[i]))) {
        const li = el("li");
        inline(m[m.length - 1], li);
        list.append(li);
        i += 1;
      }
      out.append(list);
      continue;
    } else if (QUOTE.test(line)) {
      flush();
      const quoted = [];
      while (i < lines.length && (m = QUOTE.exec(lines[i]))) {
        quoted.push(m[1]);
        i += 1;
      }
      const q = el("blockquote");
      q.append(renderMarkdown(quoted.join("\n")));
      out.append(q);
      continue;
    } else {
      para.push(line);
    }
    i += 1;
  }
  flush();
  return out;
}
