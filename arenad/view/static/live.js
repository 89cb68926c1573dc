// arenad view: follow the log (server-sent events from /events). The overview's figures
// are set in place as text (textContent), never as markup; the campaign page fetches its
// results region anew (HTML the server rendered and escaped, as the page itself) when the
// log moved. The campaign page's scrubber shows the event it points at and goes there.
"use strict";
(() => {
  const scrub = document.getElementById("scrub");
  const scrubAt = document.getElementById("scrub-at");
  if (scrub && scrubAt) {
    scrub.addEventListener("input", () => { scrubAt.textContent = scrub.value; });
    scrub.addEventListener("change", () => { scrub.form.submit(); });
  }
  const cells = document.querySelectorAll("[data-live]");
  const results = document.body.dataset.results;
  const region = document.getElementById("results");
  const state = document.getElementById("live-state");
  if ((!cells.length && !(results && region)) || !window.EventSource) return;
  const shown = document.body.dataset.campaigns;
  const names0 = JSON.parse(shown || "[]");
  let seq = document.body.dataset.seq;
  let fetching = false;
  let again = false;
  const refresh = async () => {
    // One fetch at a time; a move of the log meanwhile asks for one more after it.
    if (fetching) { again = true; return; }
    fetching = true;
    try {
      do {
        again = false;
        const response = await fetch(results, { credentials: "same-origin" });
        if (response.ok) region.innerHTML = await response.text();
      } while (again);
    } catch (e) {
      if (state) state.textContent = "reconnecting";
    } finally {
      fetching = false;
    }
  };
  const source = new EventSource("/events");
  source.addEventListener("open", () => { if (state) state.textContent = "live"; });
  source.addEventListener("error", () => { if (state) state.textContent = "reconnecting"; });
  source.addEventListener("progress", (event) => {
    const doc = JSON.parse(event.data);
    const names = doc.campaigns;
    // A campaign came or went: the overview's rows change, so it is rendered anew.
    if (shown !== undefined
        && (names.length !== names0.length || names.some((n, i) => n !== names0[i]))) {
      source.close();
      window.location.reload();
      return;
    }
    for (const el of cells) {
      const value = doc.values[el.dataset.live];
      if (value !== undefined && el.textContent !== value) el.textContent = value;
    }
    if (results && region && String(doc.last_seq) !== seq) {
      refresh();
      // The scrubber reaches the log's new end; left at "now", it stays there.
      if (scrub && scrubAt) {
        const atEnd = scrub.value === scrub.max;
        scrub.max = String(doc.last_seq);
        if (atEnd) { scrub.value = scrub.max; scrubAt.textContent = scrub.max; }
      }
    }
    seq = String(doc.last_seq);
    document.body.dataset.seq = seq;
  });
})();
