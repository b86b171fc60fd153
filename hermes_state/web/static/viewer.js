// hermes-state viewer: the only script. It adds to pages that work without it:
// the live tail of an open transcript (new messages appear without a reload).
// It never turns stored text into markup: new messages arrive as list items
// the server rendered (and escaped) exactly like the rest of the page.
"use strict";

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
            tail.appendChild(document.adoptNode(item));
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
