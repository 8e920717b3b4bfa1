/* "Fire an alert" on the dev page: Alertmanager's webhook reaching the bot.
 *
 * The button (in the channel's header) posts /ui/fire-alert; the dev server sends the bot
 * Alertmanager's notification for the demo service with the bearer token (which stays on
 * the server: the page never holds it), and answers what the bot said. The bot posts the
 * alert message in the channel and investigates it in its thread; once the message shows,
 * its thread opens. A refusal or no answer is a notice.
 */
(function (root) {
  "use strict";

  var doc = root.document;
  var FOLLOW_MS = 20000; // how long the page waits for the alert message to open its thread

  function notice(text, kind) {
    var box = doc.querySelector('[data-testid="notices"]');
    if (!box) return;
    var el = doc.createElement("div");
    el.className = "notice " + kind;
    el.setAttribute("data-testid", "notice");
    el.textContent = text;
    box.appendChild(el);
    setTimeout(function () { el.remove(); }, 8000);
  }

  // Open the thread of the first channel message naming `name` that was not there before.
  function follow(name, before) {
    var list = doc.querySelector('[data-testid="channel-messages"]');
    if (!list) return;
    function look() {
      var found = Array.prototype.find.call(
        list.querySelectorAll('[data-testid="message"].bot'),
        function (el) { return !before.has(el.dataset.ts) && el.textContent.indexOf(name) >= 0; }
      );
      if (!found) return false;
      found.click(); // channel.js opens a channel message's thread on a click
      return true;
    }
    if (look()) return;
    var watcher = new MutationObserver(function () { if (look()) watcher.disconnect(); });
    watcher.observe(list, { childList: true, subtree: true });
    setTimeout(function () { watcher.disconnect(); }, FOLLOW_MS);
  }

  function fire(button) {
    var before = new Set(Array.prototype.map.call(
      doc.querySelectorAll('[data-testid="channel-messages"] [data-testid="message"]'),
      function (el) { return el.dataset.ts; }
    ));
    button.disabled = true;
    root.opsloopPostJson("/ui/fire-alert", {}).then(function (r) {
      var d = r.data || {};
      if (r.status !== 200) notice("No alert fired: " + (d.error || "HTTP " + r.status), "warn");
      else if (d.status === 0) notice("The bot did not answer the alert (" + d.outcome + ")", "warn");
      else if (d.status !== 200) notice("The bot refused the alert: HTTP " + d.status + " (" + d.outcome + ")", "warn");
      else {
        notice("Alertmanager sent " + d.alert + (d.outcome === "opened"
          ? ": the bot opened its thread" : ": the bot answered " + d.outcome), "info");
        if (d.outcome === "opened") follow(d.alert, before);
      }
    }).catch(function () {
      notice("No alert fired: the emulator is not reachable", "warn");
    }).then(function () { button.disabled = false; });
  }

  function addButton() {
    var head = doc.querySelector('[data-testid="channel"] .pane-head');
    if (!head || head.querySelector('[data-testid="fire-alert"]')) return;
    var button = doc.createElement("button");
    button.type = "button";
    button.className = "fire-alert";
    button.setAttribute("data-testid", "fire-alert");
    button.title = "Send the bot Alertmanager's webhook for the demo service: " +
      "it posts the alert and investigates it in its thread";
    button.textContent = "Fire an alert";
    button.addEventListener("click", function () { fire(button); });
    head.appendChild(button);
  }

  if (doc.readyState === "loading") doc.addEventListener("DOMContentLoaded", addButton);
  else addButton();
})(window);
