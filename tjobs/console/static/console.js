// tjobs console: the little the pages do without a round trip. Everything works without it.
"use strict";

// <div data-refresh="/console/..." data-refresh-s="2">: replace the content with that fragment
// every few seconds while the page is visible (a task's flows arriving).
function startRefreshing(element) {
  const url = element.dataset.refresh;
  const every = Math.max(1, Number(element.dataset.refreshS || 5)) * 1000;
  async function refresh() {
    if (!document.hidden) {
      try {
        const answer = await fetch(url, { credentials: "same-origin", headers: { "accept": "text/html" } });
        if (answer.redirected) {  // the session ended: reloading leads to the sign-in page, and back here
          window.location.reload();
          return;
        }
        if (answer.ok && answer.headers.get("content-type")?.startsWith("text/html")) {
          const html = await answer.text();
          if (html !== element.dataset.lastHtml) {
            element.dataset.lastHtml = html;
            element.innerHTML = html;
          }
        }
      } catch (error) {
        // the node may be restarting: try again at the next tick
      }
    }
    setTimeout(refresh, every);
  }
  setTimeout(refresh, every);
}

// <input type="checkbox" data-select-all="flow_ids">: check or uncheck every box of that name in its form.
function wireSelectAll(box) {
  box.addEventListener("change", () => {
    for (const other of box.form.querySelectorAll(`input[type=checkbox][name="${box.dataset.selectAll}"]`)) {
      other.checked = box.checked;
    }
  });
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("[data-refresh]").forEach(startRefreshing);
  document.querySelectorAll("input[data-select-all]").forEach(wireSelectAll);
});
