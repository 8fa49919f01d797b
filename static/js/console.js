// Paperclip Console: the little behaviour pages need beyond htmx. A static file,
// so a Content-Security-Policy without 'unsafe-inline' allows it.
(function () {
  "use strict";

  // Copy-to-clipboard for ids: <button class="copy" data-copy="…">.
  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("button[data-copy]") : null;
    if (!button) return;
    event.preventDefault();
    var text = button.getAttribute("data-copy");
    var done = function () {
      var label = button.textContent;
      button.textContent = "copied";
      button.setAttribute("data-copied", "true");
      setTimeout(function () {
        button.textContent = label;
        button.removeAttribute("data-copied");
      }, 1500);
    };
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(text).then(done, function () {
        window.prompt("Copy this id:", text);
      });
    } else {
      window.prompt("Copy this id:", text);
    }
  });

  // Live regions ([data-live], hx-trigger "every 3s") poll every 3 s while the
  // tab is visible and every 30 s while it is hidden. htmx trigger filters
  // ([document.visibilityState=='visible']) would need eval, which the
  // Content-Security-Policy forbids, so the throttle lives here.
  var HIDDEN_INTERVAL_MS = 30000;
  var lastPoll = new WeakMap();
  document.addEventListener("htmx:confirm", function (event) {
    var elt = event.detail && event.detail.elt;
    if (!elt || !elt.hasAttribute || !elt.hasAttribute("data-live")) return;
    var now = Date.now();
    if (document.visibilityState === "hidden") {
      var last = lastPoll.get(elt) || 0;
      if (now - last < HIDDEN_INTERVAL_MS) {
        event.preventDefault();
        return;
      }
    }
    lastPoll.set(elt, now);
  });
})();
