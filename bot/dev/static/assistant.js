/* opsloop dev: the assistant pane and the App Home tab (see bot/dev/pane.py).
 *
 * Adds two buttons to the header. "Assistant" opens a split-view pane like Slack's: a new
 * assistant thread in the user's DM with the bot (/ui/pane/open), the bot's greeting and
 * suggested prompts, a DM-like thread and a composer (/ui/pane/ask). "Home" asks the bot
 * for the user's App Home (/ui/home/open) and shows the view it published. Both re-read
 * /ui/pane/state when the page's event stream says something changed (their own
 * EventSource). Rendering is app.js's (window.opsloopRender); every text is escaped
 * there. The acting user is the header's switcher. */
(function (root) {
  "use strict";
  if (typeof document === "undefined" || !document.querySelector('[data-testid="channel"]')) return;

  var render = root.opsloopRender;
  // threads: user id -> their open pane thread (each dev user has their own DM).
  var pane = { thread: null, threads: {}, source: null, timer: null, open: false, home: false, user: null };

  function $(testid) {
    return document.querySelector('[data-testid="' + testid + '"]');
  }

  function esc(value) {
    return String(value).replace(/[&<>"']/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c];
    });
  }

  function user() {
    var switcher = $("user-switcher");
    return switcher ? switcher.value : null;
  }

  function postJson(path, body) {
    return root.opsloopPostJson(path, body); // channel.js's
  }

  // A hidden pane of the layout: a <tag> with its class, test id, label and inner HTML.
  function addPane(tag, className, testid, label, html) {
    var el = document.createElement(tag);
    el.className = className;
    el.hidden = true;
    el.setAttribute("data-testid", testid);
    el.setAttribute("aria-label", label);
    el.innerHTML = html;
    document.querySelector(".layout").appendChild(el);
    return el;
  }

  function build() {
    var head = $("header");
    var buttons = document.createElement("span");
    buttons.className = "surface-buttons";
    buttons.innerHTML =
      '<button type="button" data-testid="open-assistant">Assistant</button>' +
      '<button type="button" data-testid="open-home">Home</button>';
    head.insertBefore(buttons, head.querySelector(".switcher"));

    var aside = addPane("aside", "pane assistant-pane", "assistant-pane", "Assistant",
      '<div class="pane-head"><span class="pane-title" data-testid="pane-title">Assistant</span>' +
      '<button type="button" class="close" data-testid="close-assistant" aria-label="Close">×</button></div>' +
      '<div class="messages" data-testid="pane-messages" aria-live="polite"></div>' +
      '<div class="pane-prompts" data-testid="pane-prompts"></div>' +
      '<div class="assistant-status" data-testid="pane-status" hidden></div>' +
      '<form class="composer-form" data-testid="pane-composer-form" autocomplete="off">' +
      '<textarea data-testid="pane-composer" rows="2" placeholder="Ask opsloop (Enter sends)"></textarea>' +
      '<button type="submit" data-testid="pane-send">Send</button></form>');
    var home = addPane("section", "pane app-home", "app-home", "App Home",
      '<div class="pane-head"><span class="pane-title">opsloop · Home</span>' +
      '<button type="button" class="close" data-testid="close-home" aria-label="Close">×</button></div>' +
      '<div class="home-view" data-testid="home-view"><p class="dim">Opening…</p></div>');

    $("open-assistant").addEventListener("click", openPane);
    $("open-home").addEventListener("click", openHome);
    $("close-assistant").addEventListener("click", function () { pane.open = false; aside.hidden = true; });
    $("close-home").addEventListener("click", function () { pane.home = false; home.hidden = true; });
    $("pane-composer-form").addEventListener("submit", function (event) {
      event.preventDefault();
      ask($("pane-composer").value);
    });
    $("pane-composer").addEventListener("keydown", function (event) {
      if (event.key === "Enter" && !event.shiftKey) {
        event.preventDefault();
        ask($("pane-composer").value);
      }
    });
    aside.addEventListener("click", function (event) {
      var prompt = event.target.closest('[data-testid="pane-prompt"]');
      if (prompt) ask(prompt.dataset.message || "");
      var button = event.target.closest('[data-testid="button"]');
      if (button) click(button);
    });
    $("user-switcher").addEventListener("change", function () {
      pane.thread = pane.threads[user()] || null;
      if (pane.open && !pane.thread) {
        pane.open = false; // someone without a pane thread: closed until they open one
        $("assistant-pane").hidden = true;
      }
      listen();
      if (pane.home) openHome();
      else if (pane.open) load();
    });
  }

  function listen() {
    if (pane.source && pane.user === user()) return;
    if (pane.source) pane.source.close();
    pane.user = user();
    var source = new EventSource("/ui/stream?user=" + encodeURIComponent(pane.user));
    pane.source = source;
    ["message", "update", "status", "pane", "delete"].forEach(function (kind) {
      source.addEventListener(kind, function (event) {
        var data = JSON.parse(event.data);
        if (kind === "pane" || (data && String(data.channel || "").charAt(0) === "D")) refresh();
      });
    });
  }

  function refresh() {
    if (pane.timer) return;
    pane.timer = setTimeout(function () {
      pane.timer = null;
      load();
    }, 100);
  }

  function openPane() {
    pane.open = true;
    $("assistant-pane").hidden = false;
    listen();
    var who = user();
    if (pane.threads[who]) {
      pane.thread = pane.threads[who];
      load();
      return;
    }
    postJson("/ui/pane/open", { user: who }).then(function (r) {
      if (r.status !== 200) return;
      pane.threads[who] = pane.thread = r.data.thread_ts;
      load();
    });
  }

  function openHome() {
    pane.home = true;
    $("app-home").hidden = false;
    listen();
    postJson("/ui/home/open", { user: user() }).then(load);
  }

  function ask(text) {
    if (!text.trim() || !pane.thread) return;
    postJson("/ui/pane/ask", { user: user(), thread_ts: pane.thread, text: text }).then(function (r) {
      if (r.status === 200) $("pane-composer").value = "";
      load();
    });
  }

  function click(button) {
    var msg = button.closest('[data-testid="pane-message"]');
    if (!msg || button.classList.contains("pending")) return;
    button.classList.add("pending");
    postJson("/ui/click", {
      user: user(),
      channel: msg.dataset.channel,
      message_ts: msg.dataset.ts,
      action_id: button.dataset.actionId,
      value: button.dataset.value,
    }).then(function () { button.classList.remove("pending"); });
  }

  function load() {
    var query = "/ui/pane/state?user=" + encodeURIComponent(user() || "") +
      (pane.thread ? "&thread_ts=" + encodeURIComponent(pane.thread) : "");
    fetch(query).then(function (r) { return r.json(); }).then(show).catch(function () {});
  }

  function messageHtml(m) {
    var who = m.bot_id ? "opsloop" : (render.names[m.user] || m.user);
    var body = render(m.blocks || [], m.text || ""); // no blocks: the text as mrkdwn
    return '<div class="message" data-testid="pane-message" data-ts="' + esc(m.ts) +
      '" data-channel="' + esc(m.channel) + '" data-author="' + (m.bot_id ? "bot" : "person") + '">' +
      '<div class="author">' + esc(who) + "</div>" + '<div class="content">' + body + "</div></div>";
  }

  function show(state) {
    if (pane.open) {
      $("pane-title").textContent = state.title || "Assistant";
      var shown = (state.messages || []).filter(function (m) { return m.ts !== state.thread_ts; });
      var list = $("pane-messages");
      var atEnd = list.scrollHeight - list.scrollTop - list.clientHeight < 40;
      list.innerHTML = shown.map(messageHtml).join("");
      if (atEnd) list.scrollTop = list.scrollHeight;
      var asked = shown.some(function (m) { return !m.bot_id; });
      var prompts = asked ? [] : state.prompts || [];
      $("pane-prompts").innerHTML = prompts.length
        ? '<div class="dim">' + esc(state.prompts_title || "Suggested") + "</div>" +
          prompts.map(function (p) {
            return '<button type="button" data-testid="pane-prompt" data-message="' + esc(p.message) +
              '">' + esc(p.title) + "</button>";
          }).join("")
        : "";
      var status = $("pane-status");
      status.hidden = !state.status;
      status.textContent = state.status ? "opsloop " + state.status : "";
    }
    if (pane.home && state.home) {
      var blocks = state.home.blocks || [];
      // The renderer stops at a message's 50 blocks; a home view holds up to 100.
      var rest = blocks.slice(50, 100);
      $("home-view").innerHTML = render(blocks.slice(0, 50), " ") + (rest.length ? render(rest, " ") : "");
    }
  }

  build();
})(typeof window !== "undefined" ? window : globalThis);
