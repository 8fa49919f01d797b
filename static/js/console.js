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
})();
