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
        window.prompt("Copy this:", text);
      });
    } else {
      window.prompt("Copy this:", text);
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

  // Every htmx action (a POST, not a poll) shows that it is in flight: its
  // form is aria-busy and its buttons are disabled until the answer arrives,
  // so a second click cannot send it twice. CSS (.htmx-request) shows the state.
  var inFlight = function (event) {
    var config = event.detail && event.detail.requestConfig;
    return config && config.verb && config.verb !== "get" ? event.detail.elt : null;
  };
  document.addEventListener("htmx:beforeRequest", function (event) {
    var elt = inFlight(event);
    if (!elt || !elt.querySelectorAll) return;
    elt.setAttribute("aria-busy", "true");
    elt.querySelectorAll("button:not([disabled])").forEach(function (button) {
      button.disabled = true;
      button.setAttribute("data-busy", "true");
    });
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    var elt = inFlight(event);
    if (!elt || !elt.querySelectorAll) return;
    elt.removeAttribute("aria-busy");
    elt.querySelectorAll("button[data-busy]").forEach(function (button) {
      button.disabled = false;
      button.removeAttribute("data-busy");
    });
  });
})();
