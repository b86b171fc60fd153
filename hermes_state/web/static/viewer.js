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
  let after = tail.dataset.after || "0";
  let busy = false;
  const POLL_MS = 1000;

  async function poll() {
    if (busy || document.hidden) {
      return;
    }
    busy = true;
    try {
      const url = "/tail?session=" + encodeURIComponent(session) + "&after=" + encodeURIComponent(after);
      const response = await fetch(url, { credentials: "same-origin", cache: "no-store" });
      if (response.status === 200) {
        const last = response.headers.get("x-last-id");
        const parsed = new DOMParser().parseFromString("<ol>" + (await response.text()) + "</ol>", "text/html");
        const list = parsed.body.firstElementChild;
        for (const item of Array.from(list ? list.children : [])) {
          if (item.id && !document.getElementById(item.id)) {
            const added = document.adoptNode(item);
            tail.appendChild(added);
            window.hermesEnhance(added);
          }
        }
        if (last && /^[0-9]+$/.test(last)) {
          after = last;
        }
        if (status) {
          status.textContent = "Live: last update " + new Date().toLocaleTimeString() + ".";
        }
      }
    } catch (error) {
      if (status) {
        status.textContent = "Live updates paused: the viewer did not answer.";
      }
    } finally {
      busy = false;
    }
  }

  if (status) {
    status.textContent = "Live: new messages appear here as they are written.";
  }
  window.setInterval(poll, POLL_MS);
  document.addEventListener("visibilitychange", poll);
})();
