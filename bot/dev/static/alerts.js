/* The channel header's two alerts on the dev page.
 *
 * "Post a demo alert" posts /ui/alert: the emulator posts Alertmanager's Slack message for
 * the demo service, as its incoming webhook would (a bot's post: it starts nothing until
 * someone uses shortcut.js's "Investigate with opsloop" on it).
 *
 * "Fire an alert" posts /ui/fire-alert: the dev server sends the bot Alertmanager's webhook
 * notification for the demo service with the bearer token (which stays on the server: the
 * page never holds it), and answers what the bot said. The bot posts the alert message in
 * the channel and investigates it in its thread; once the message shows, its thread opens.
 * A refusal or no answer is a notice.
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

  function post(path) {
    return root.opsloopPostJson(path, {}); // channel.js's (loaded after this one, used on clicks)
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

  function postDemoAlert() {
    post("/ui/alert").then(function (r) {
      if (r.status !== 200) notice("No alert posted: " + (r.data.error || "HTTP " + r.status), "warn");
    }).catch(function () { notice("No alert posted: the emulator is not reachable", "warn"); });
  }

  function fire(button) {
    var before = new Set(Array.prototype.map.call(
      doc.querySelectorAll('[data-testid="channel-messages"] [data-testid="message"]'),
      function (el) { return el.dataset.ts; }
    ));
    button.disabled = true;
    post("/ui/fire-alert").then(function (r) {
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

  var BUTTONS = [
    { id: "post-alert", text: "Post a demo alert", act: postDemoAlert,
      title: "Post Alertmanager's alert for the demo service, as its webhook would" },
    { id: "fire-alert", text: "Fire an alert", act: fire,
      title: "Send the bot Alertmanager's webhook for the demo service: " +
        "it posts the alert and investigates it in its thread" },
  ];

  function addButtons() {
    var head = doc.querySelector('[data-testid="channel"] .pane-head');
    if (!head) return;
    BUTTONS.forEach(function (spec) {
      if (head.querySelector('[data-testid="' + spec.id + '"]')) return;
      var button = doc.createElement("button");
      button.type = "button";
      button.className = spec.id;
      button.setAttribute("data-testid", spec.id);
      button.title = spec.title;
      button.textContent = spec.text;
      button.addEventListener("click", function () { spec.act(button); });
      head.appendChild(button);
    });
  }

  if (doc.readyState === "loading") doc.addEventListener("DOMContentLoaded", addButtons);
  else addButtons();
})(window);
