/* The message shortcuts "Investigate with opsloop" and "Incident timeline" on the dev page.
 *
 *    window.opsloopShortcut.menu(msg) -> HTML of a message's "⋯" menu (channel.js's messageEl);
 *    window.opsloopShortcut.attachments(msg) -> HTML of its legacy attachments (an
 *    integration's post: Alertmanager's title, text and fields), for channel.js's contentHtml.
 *
 * "⋯ → Investigate with opsloop" posts /ui/shortcut (the emulator sends the bot a signed
 * message_action as the person acting), then opens the message's thread, where the job
 * answers. alerts.js's "Post a demo alert" gives it an integration's post to act on.
 * "⋯ → Incident timeline" does the same with its own callback id: the bot posts the
 * thread's timeline there as a Markdown file, which tasks.js renders.
 */
(function (root) {
  "use strict";

  var SHORTCUTS = [ // [callback id, label, test id], as manifest.yml declares them
    ["opsloop_investigate", "Investigate with opsloop", "shortcut-investigate"],
    ["opsloop_timeline", "Incident timeline", "shortcut-timeline"],
  ];
  var doc = root.document;

  function esc(value) {
    return String(value == null ? "" : value)
      .replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;").replace(/'/g, "&#39;");
  }

  function tell(text) {
    var box = doc.querySelector('[data-testid="notices"]');
    if (!box) return;
    var el = doc.createElement("div");
    el.className = "notice warn";
    el.setAttribute("data-testid", "notice");
    el.textContent = text;
    box.appendChild(el);
    setTimeout(function () { el.remove(); }, 8000);
  }

  function post(path, body) {
    return root.opsloopPostJson(path, body); // channel.js's (loaded after this one, used on clicks)
  }

  function menu(msg) {
    return (
      '<div class="msg-menu" data-testid="message-menu" data-channel="' + esc(msg.channel) + '">' +
      '<button type="button" class="msg-menu-toggle" data-testid="message-menu-toggle"' +
      ' aria-label="More actions" aria-haspopup="menu" title="More actions">\u22EF</button>' +
      '<div class="msg-menu-items" role="menu" hidden>' +
      SHORTCUTS.map(function (s) {
        return '<button type="button" role="menuitem" data-testid="' + s[2] + '"' +
          ' data-callback-id="' + s[0] + '">' + esc(s[1]) + "</button>";
      }).join("") +
      "</div></div>"
    );
  }

  function attachments(msg) {
    var list = Array.isArray(msg.attachments) ? msg.attachments.slice(0, 20) : [];
    var md = root.opsloopRender ? root.opsloopRender.mrkdwn : esc;
    return list.map(function (a) {
      if (!a || typeof a !== "object") return "";
      // The page's CSP allows no inline style: an attachment's colour is a class ("good",
      // "warning", "danger", or a red/other hex) rather than its exact shade.
      var color = String(a.color || "").replace(/^#/, "").toLowerCase();
      var tone = color === "good" ? "good" : color === "warning" ? "warning"
        : color === "danger" || /^[a-f0-9]{2}[0-3][0-9a-f]{3}$/.test(color) ? "danger" : "other";
      var html = '<div class="attachment att-' + tone + '" data-testid="attachment">';
      if (a.pretext) html += '<div class="att-pretext">' + md(String(a.pretext)) + "</div>";
      if (a.title) html += '<div class="att-title">' + esc(a.title) + "</div>";
      if (a.text) html += '<div class="att-text">' + md(String(a.text)) + "</div>";
      var fields = Array.isArray(a.fields) ? a.fields.slice(0, 20) : [];
      if (fields.length) {
        html += '<div class="att-fields">' + fields.map(function (f) {
          return '<div class="att-field"><b>' + esc(f && f.title) + "</b> " + md(String((f && f.value) || "")) + "</div>";
        }).join("") + "</div>";
      }
      if (!a.title && !a.text && !fields.length && a.fallback) {
        html += '<div class="att-text">' + esc(a.fallback) + "</div>";
      }
      return html + "</div>";
    }).join("");
  }

  function closeAll(except) {
    Array.prototype.forEach.call(doc.querySelectorAll(".msg-menu-items"), function (items) {
      if (items !== except) items.hidden = true;
    });
  }

  // channel.js opens a channel message's thread when it is clicked (the element of the time:
  // a re-render may have replaced the one the menu was in).
  function openThread(ts) {
    var selector = '[data-testid="channel-messages"] [data-testid="message"][data-ts="' + ts + '"]';
    var current = doc.querySelector(selector);
    if (current) current.click();
  }

  function useShortcut(item) {
    var menuEl = item.closest('[data-testid="message-menu"]');
    var msgEl = item.closest('[data-testid="message"]');
    if (!menuEl || !msgEl) return;
    closeAll(null);
    post("/ui/shortcut", {
      user: doc.body.dataset.user || "",
      channel: menuEl.dataset.channel,
      message_ts: msgEl.dataset.ts,
      callback_id: item.dataset.callbackId,
    }).then(function (r) {
      if (r.status !== 200) tell("Shortcut refused: " + (r.data.error || "HTTP " + r.status));
      else if (r.data.status === 0) tell("The bot did not answer the shortcut within 3 s.");
      else if (r.data.status < 200 || r.data.status >= 300) tell("The bot answered the shortcut with HTTP " + r.data.status);
      else openThread(msgEl.dataset.ts);
    }).catch(function () { tell("Shortcut not sent: the emulator is not reachable"); });
  }

  // Capture phase: a click in a menu is the menu's, not the message's (channel.js opens threads).
  doc.addEventListener("click", function (event) {
    var target = event.target;
    var inMenu = target && target.closest ? target.closest('[data-testid="message-menu"]') : null;
    if (!inMenu) {
      closeAll(null);
      return;
    }
    event.stopPropagation();
    var item = target.closest("[data-callback-id]");
    if (item) {
      useShortcut(item);
      return;
    }
    if (target.closest('[data-testid="message-menu-toggle"]')) {
      var items = inMenu.querySelector(".msg-menu-items");
      closeAll(items);
      items.hidden = !items.hidden;
    }
  }, true);

  root.opsloopShortcut = { menu: menu, attachments: attachments };
})(window);
