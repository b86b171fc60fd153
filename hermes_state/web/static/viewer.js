// hermes-state viewer: the only script. It adds to pages that work without it:
// the live tail of an open transcript (new messages appear without a reload),
// copy buttons, and each message's raw JSON shown in place.
// It never turns stored text into markup: new messages arrive as list items
// the server rendered (and escaped) exactly like the rest of the page, and
// JSON or copied text only ever goes through textContent and the clipboard.
"use strict";

(function () {
  async function messageRow(url) {
    const response = await fetch(url, { credentials: "same-origin", cache: "no-store" });
    if (response.status !== 200) {
      throw new Error("status " + response.status);
    }
    const body = await response.json();
    return body.messages && body.messages[0];
  }

  function plainText(content) {
    if (typeof content === "string") {
      return content;
    }
    if (Array.isArray(content)) {
      const texts = content.filter(p => p && typeof p.text === "string").map(p => p.text);
      if (texts.length === content.length) {
        return texts.join("\n");
      }
    }
    return JSON.stringify(content, null, 2);
  }

  async function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) {
      await navigator.clipboard.writeText(text);
      return;
    }
    const area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.className = "offscreen";
    document.body.appendChild(area);
    area.select();
    document.execCommand("copy");
    area.remove();
  }

  function flash(button, text) {
    const before = button.dataset.label || button.textContent;
    button.dataset.label = before;
    button.textContent = text;
    window.setTimeout(() => { button.textContent = before; }, 1200);
  }

  function addCodeButtons(root) {
    for (const pre of root.querySelectorAll("pre.code, pre.json")) {
      if (pre.parentElement.classList.contains("pre-wrap") || pre.classList.contains("raw-json")) {
        continue;
      }
      const wrap = document.createElement("div");
      wrap.className = "pre-wrap";
      pre.replaceWith(wrap);
      wrap.appendChild(pre);
      const button = document.createElement("button");
      button.type = "button";
      button.className = "copy-code";
      button.textContent = "copy";
      wrap.appendChild(button);
    }
  }

  function enhance(root) {
    for (const button of root.querySelectorAll("button.copy[hidden]")) {
      button.hidden = false;
    }
    addCodeButtons(root);
  }

  document.addEventListener("click", async (event) => {
    const target = event.target;
    if (!(target instanceof Element)) {
      return;
    }
    const copy = target.closest("button.copy, button.copy-code");
    if (copy) {
      try {
        if (copy.classList.contains("copy-code")) {
          await copyText(copy.parentElement.querySelector("pre").textContent);
        } else {
          const row = await messageRow(copy.dataset.src);
          await copyText(plainText(row ? row.content : ""));
        }
        flash(copy, "copied");
      } catch (error) {
        flash(copy, "copy failed");
      }
      return;
    }
    const raw = target.closest("a.raw");
    if (raw && !event.ctrlKey && !event.metaKey && !event.shiftKey) {
      event.preventDefault();
      const item = raw.closest("li.msg");
      const shown = item.querySelector(":scope > pre.raw-json");
      if (shown) {
        shown.remove();
        return;
      }
      const pre = document.createElement("pre");
      pre.className = "json raw-json";
      try {
        pre.textContent = JSON.stringify(await messageRow(raw.getAttribute("href")), null, 2);
      } catch (error) {
        pre.textContent = "could not load the message: " + error.message;
      }
      item.querySelector(".meta").after(pre);
    }
  });

  window.hermesEnhance = enhance;
  enhance(document);
})();

(function () {
  const tail = document.getElementById("tail");
  if (!tail) {
    return;
  }
  const status = document.getElementById("live-status");
  const session = tail.dataset.session || "";
  const append = tail.dataset.append === "1";
  const first = tail.dataset.first || "0";
  let after = tail.dataset.after || "0";
  let last = tail.dataset.last || "0";
  let inactive = tail.dataset.inactive || "0";
  let newer = 0;
  let busy = false;
  const POLL_MS = 1000;

  function say(text, link) {
    if (!status) {
      return;
    }
    status.textContent = text;
    if (link) {
      const a = document.createElement("a");
      a.href = link;
      a.textContent = "go to the last page";
      status.append(" ", a);
    }
  }

  // Rows a compaction (or rewind) archived since the page was rendered: marked as such, in place.
  function markArchived(header) {
    let marked = 0;
    for (const entry of header.split(",")) {
      const [id, kind] = entry.split(":");
      const item = document.getElementById("m" + id);
      if (!item || item.classList.contains("inactive")) {
        continue;
      }
      item.classList.add("inactive");
      const flag = document.createElement("span");
      flag.className = "flag state";
      if (kind === "c") {
        item.classList.add("compacted");
        flag.textContent = "archived by compaction";
      } else {
        flag.textContent = "rewound";
      }
      const meta = item.querySelector(".meta");
      if (meta) {
        meta.appendChild(flag);
      }
      marked += 1;
    }
    return marked;
  }

  async function poll() {
    if (busy || document.hidden) {
      return;
    }
    busy = true;
    try {
      const query = new URLSearchParams({ session: session, after: after, first: first, last: last, inactive: inactive });
      const response = await fetch("/tail?" + query.toString(), { credentials: "same-origin", cache: "no-store" });
      if (response.status === 200) {
        let compacted = 0;
        const archived = response.headers.get("x-archived");
        if (archived) {
          compacted = markArchived(archived);
        }
        const count = response.headers.get("x-inactive");
        if (count && /^[0-9]+$/.test(count)) {
          inactive = count;
        }
        const lastId = response.headers.get("x-last-id");
        const parsed = new DOMParser().parseFromString("<ol>" + (await response.text()) + "</ol>", "text/html");
        const list = parsed.body.firstElementChild;
        const items = Array.from(list ? list.children : []).filter(item => item.id && !document.getElementById(item.id));
        if (append) {
          if (compacted && items.length) {
            const boundary = document.createElement("div");
            boundary.className = "boundary";
            boundary.setAttribute("role", "separator");
            boundary.textContent = "compaction: the messages above were archived and replaced by the ones below";
            tail.appendChild(boundary);
          }
          for (const item of items) {
            const added = document.adoptNode(item);
            tail.appendChild(added);
            window.hermesEnhance(added);
          }
          if (lastId && /^[0-9]+$/.test(lastId)) {
            last = lastId;
          }
        } else {
          newer += items.length;
        }
        if (lastId && /^[0-9]+$/.test(lastId)) {
          after = lastId;
        }
      }
      const when = new Date().toLocaleTimeString();
      if (newer) {
        say("Live: " + newer + " new message" + (newer === 1 ? "" : "s") + " since this page opened (" + when + ").",
            tail.dataset.lastPage);
      } else {
        say("Live: last update " + when + ".");
      }
    } catch (error) {
      say("Live updates paused: the viewer did not answer.");
    } finally {
      busy = false;
    }
  }

  say("Live: new messages and compactions show here as they are written.");
  window.setInterval(poll, POLL_MS);
  document.addEventListener("visibilitychange", poll);
})();

// Landing on a search hit (?hl=word#mID): open the folds around and inside that message and mark the words.
(function () {
  const words = new URLSearchParams(window.location.search).getAll("hl").map(w => w.trim().toLowerCase()).filter(Boolean);
  const target = window.location.hash ? document.getElementById(window.location.hash.slice(1)) : null;
  if (!words.length || !target) {
    return;
  }
  for (let up = target.parentElement; up; up = up.parentElement) {
    if (up.localName === "details") {
      up.open = true;
    }
  }
  for (const fold of target.querySelectorAll("details")) {
    fold.open = true;
  }
  const walker = document.createTreeWalker(target, NodeFilter.SHOW_TEXT);
  const nodes = [];
  while (walker.nextNode()) {
    const node = walker.currentNode;
    if (!node.parentElement.closest(".head, .meta, button")) {
      nodes.push(node);
    }
  }
  let firstMark = null;
  for (const node of nodes) {
    const text = node.nodeValue;
    const lower = text.toLowerCase();
    const pieces = [];
    let from = 0;
    for (;;) {
      let at = -1;
      let length = 0;
      for (const word of words) {
        const found = lower.indexOf(word, from);
        if (found >= 0 && (at < 0 || found < at)) {
          at = found;
          length = word.length;
        }
      }
      if (at < 0) {
        break;
      }
      pieces.push(document.createTextNode(text.slice(from, at)));
      const mark = document.createElement("mark");
      mark.className = "landed";
      mark.textContent = text.slice(at, at + length);
      pieces.push(mark);
      firstMark = firstMark || mark;
      from = at + length;
    }
    if (pieces.length) {
      pieces.push(document.createTextNode(text.slice(from)));
      node.replaceWith(...pieces);
    }
  }
  if (firstMark) {
    firstMark.scrollIntoView({ block: "center" });
  }
})();
