// arenad view: follow the log (server-sent events from /events) and update the
// overview's figures in place. Values are set as text (textContent), never as markup.
"use strict";
(() => {
  const cells = document.querySelectorAll("[data-live]");
  const state = document.getElementById("live-state");
  if (!cells.length || !window.EventSource) return;
  const shown = JSON.parse(document.body.dataset.campaigns || "[]");
  const source = new EventSource("/events");
  source.addEventListener("open", () => { if (state) state.textContent = "live"; });
  source.addEventListener("error", () => { if (state) state.textContent = "reconnecting"; });
  source.addEventListener("progress", (event) => {
    const doc = JSON.parse(event.data);
    const names = doc.campaigns;
    // A campaign came or went: the table's rows change, so the page is rendered anew.
    if (names.length !== shown.length || names.some((n, i) => n !== shown[i])) {
      source.close();
      window.location.reload();
      return;
    }
    for (const el of cells) {
      const value = doc.values[el.dataset.live];
      if (value !== undefined && el.textContent !== value) el.textContent = value;
    }
    document.body.dataset.seq = String(doc.last_seq);
  });
})();
