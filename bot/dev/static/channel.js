/* opsloop dev: the page of the local Slack emulator — one channel and a thread pane.
 *
 * Fed by /ui/stream (server-sent events: a snapshot, then every change in order), posting
 * and clicking through /ui/post and /ui/click as the user chosen in the switcher; a modal
 * the bot opens for that user (the snapshot's and the stream's `modal`) goes to modal.js. A first
 * visit shows a hint (what to type, who is who, from /ui/info) until it is dismissed or a
 * message is sent; the browser remembers that (localStorage "opsloop.hint"). Messages are
 * drawn by app.js's renderer (window.opsloopRender), loaded before this script. Its JSON
 * POST is window.opsloopPostJson(path, body) -> Promise of {status, data}, which
 * shortcut.js, alerts.js and assistant.js post with too. No build step, no dependencies. */
(function (root) {
  "use strict";

  // Only on the emulator's page.
  if (typeof document === "undefined" || !document.querySelector('[data-testid="channel"]')) return;

  var render = root.opsloopRender; // app.js
  var esc = render.esc;
  var clock = render.clock;
  var names = render.names; // shared with the renderer: the page fills them from /ui/info
  var channels = render.channels;
  var markdown = render.markdown;
  var displayName = render.displayName;
  var slackUnescape = render.unescape;
  var EMOJI = render.emoji;

  var MAX_EPHEMERALS = 500;
  var MAX_NOTICES = 5;
  var NOTICE_MS = 8000;

  var app = {
    info: null,
    user: null,
    messages: new Map(), // ts -> message (the channel's, as /ui sends them)
    versions: new Map(), // ts -> a counter bumped on every change
    ephemerals: [],
    statuses: new Map(), // thread_ts -> assistant status text
    openThread: null,
    source: null,
    scheduled: false,
    stick: { channel: true, thread: true },
  };

  function $(testid) {
    return document.querySelector('[data-testid="' + testid + '"]');
  }

  function cmpTs(a, b) {
    var pa = String(a).split(".");
    var pb = String(b).split(".");
    var d = parseInt(pa[0], 10) - parseInt(pb[0], 10);
    if (d) return d;
    var ma = (pa[1] || "").padEnd(6, "0");
    var mb = (pb[1] || "").padEnd(6, "0");
    return ma < mb ? -1 : ma > mb ? 1 : 0;
  }

  function isTop(msg) {
    return !msg.thread_ts || msg.thread_ts === msg.ts;
  }

  function hue(id) {
    var h = 0;
    for (var k = 0; k < id.length; k++) h = (h * 31 + id.charCodeAt(k)) % 6;
    return h;
  }

  function roleOf(id) {
    var users = (app.info && app.info.users) || [];
    for (var k = 0; k < users.length; k++) if (users[k].id === id) return users[k].role;
    return "";
  }

  function notice(text, kind) {
    var box = $("notices");
    var el = document.createElement("div");
    el.className = "notice " + (kind || "warn");
    el.setAttribute("data-testid", "notice");
    el.textContent = text;
    box.appendChild(el);
    while (box.children.length > MAX_NOTICES) box.firstChild.remove();
    setTimeout(function () { el.remove(); }, NOTICE_MS);
  }

  function setConnection(state, text) {
    var el = $("connection");
    el.dataset.state = state;
    el.textContent = text;
  }

  // ---- elements ----

  function authorHtml(userId, isBot) {
    if (isBot) {
      return '<span class="author" data-testid="author">' + esc(names.UBOT || "opsloop") +
        '</span><span class="badge">APP</span>';
    }
    var role = roleOf(userId);
    return '<span class="author" data-testid="author">' + esc(displayName(userId)) + "</span>" +
      (role ? '<span class="role">' + esc(role) + "</span>" : "");
  }

  function avatarHtml(userId, isBot) {
    var letter = isBot ? "O" : (displayName(userId) || "?").charAt(0).toUpperCase();
    var cls = isBot ? "av-bot" : "av-" + hue(userId);
    return '<div class="avatar ' + cls + '">' + esc(letter) + "</div>";
  }

  function contentHtml(msg) {
    var extra = root.opsloopTasks; // tasks.js: a chunk stream's task cards, a message's files
    if (extra && msg.stream) return extra.stream(msg) + extra.files(msg);
    if (msg.streamed && (!msg.blocks || !msg.blocks.length)) {
      return '<div class="block markdown">' + markdown(msg.text) + "</div>";
    }
    var attached = root.opsloopShortcut ? root.opsloopShortcut.attachments(msg) : ""; // shortcut.js
    return render(msg.blocks, msg.text) + attached + (extra ? extra.files(msg) : "");
  }

  function replyInfo() {
    var counts = new Map();
    var last = new Map();
    app.messages.forEach(function (m) {
      if (isTop(m)) return;
      counts.set(m.thread_ts, (counts.get(m.thread_ts) || 0) + 1);
      if (!last.has(m.thread_ts) || cmpTs(m.ts, last.get(m.thread_ts)) > 0) last.set(m.thread_ts, m.ts);
    });
    return { counts: counts, last: last };
  }

  function messageEl(msg, where, replies) {
    var el = document.createElement("div");
    var isBot = !!msg.bot_id;
    el.className = "msg" + (isBot ? " bot" : "") + (msg.streaming ? " streaming" : "") +
      (where === "channel" && app.openThread === msg.ts ? " selected" : "");
    el.setAttribute("data-testid", "message");
    el.dataset.ts = msg.ts;
    el.dataset.user = msg.user || "";
    if (msg.thread_ts) el.dataset.threadTs = msg.thread_ts;
    var html = avatarHtml(msg.user || "", isBot) + '<div class="body"><div class="meta">' +
      authorHtml(msg.user || "", isBot) + '<span class="time">' + esc(clock(msg.ts)) + "</span>" +
      (msg.streaming ? '<span class="live" data-testid="streaming">writing…</span>' : "") +
      '</div><div class="content" data-testid="message-content">' + contentHtml(msg) + "</div>";
    var reactions = msg.reactions || [];
    if (reactions.length) {
      html += '<div class="reactions">' + reactions.map(function (r) {
        var face = Object.prototype.hasOwnProperty.call(EMOJI, r.name) ? EMOJI[r.name] : ":" + r.name + ":";
        return '<span class="reaction" data-testid="reaction" data-name="' + esc(r.name) +
          '" title=":' + esc(r.name) + ':">' + esc(face) + ' <span class="count">' +
          esc(r.count || 1) + "</span></span>";
      }).join("") + "</div>";
    }
    if (where === "channel" && replies && replies.counts.get(msg.ts)) {
      var n = replies.counts.get(msg.ts);
      html += '<button type="button" class="replies" data-testid="replies">' + n +
        (n === 1 ? " reply" : " replies") + '</button><span class="last-reply">last at ' +
        esc(clock(replies.last.get(msg.ts))) + "</span>";
    }
    if (root.opsloopShortcut) html += root.opsloopShortcut.menu(msg); // shortcut.js: "⋯"
    el.innerHTML = html + "</div>";
    return el;
  }

  function ephemeralEl(e) {
    var el = document.createElement("div");
    el.className = "msg bot ephemeral";
    el.setAttribute("data-testid", "ephemeral");
    el.dataset.ts = e.ts;
    if (e.thread_ts) el.dataset.threadTs = e.thread_ts;
    el.innerHTML = avatarHtml("UBOT", true) + '<div class="body"><div class="meta">' +
      authorHtml("UBOT", true) + '<span class="time">' + esc(clock(e.ts)) + "</span>" +
      '<span class="only-you" data-testid="ephemeral-label">Only visible to you</span></div>' +
      '<div class="content" data-testid="message-content">' + render(e.blocks, e.text) + "</div></div>";
    return el;
  }

  // Keyed update: unchanged elements stay (and keep their state), changed ones are rebuilt.
  function sync(container, items) {
    var existing = new Map();
    Array.prototype.forEach.call(container.children, function (el) { existing.set(el.dataset.key, el); });
    var wanted = new Set();
    var prev = null;
    items.forEach(function (item) {
      wanted.add(item.key);
      var el = existing.get(item.key);
      if (!el || el.dataset.version !== item.version) {
        var fresh = item.build();
        fresh.dataset.key = item.key;
        fresh.dataset.version = item.version;
        if (el) el.replaceWith(fresh);
        el = fresh;
      }
      var next = prev ? prev.nextSibling : container.firstChild;
      if (next !== el) container.insertBefore(el, next);
      prev = el;
    });
    existing.forEach(function (el, key) { if (!wanted.has(key)) el.remove(); });
  }

  function nearBottom(el) {
    return el.scrollHeight - el.scrollTop - el.clientHeight < 60;
  }

  function renderAll() {
    app.scheduled = false;
    if (!app.info) return;
    var channel = app.info.channel.id;
    var replies = replyInfo();
    var all = Array.from(app.messages.values()).sort(function (a, b) { return cmpTs(a.ts, b.ts); });
    var mine = app.ephemerals.filter(function (e) { return e.user === app.user && e.channel === channel; });

    var top = all.filter(isTop).map(function (m) {
      return {
        ts: m.ts,
        key: "m" + m.ts,
        version: [app.versions.get(m.ts), replies.counts.get(m.ts) || 0, app.openThread === m.ts].join(":"),
        build: function () { return messageEl(m, "channel", replies); },
      };
    });
    mine.filter(function (e) { return !e.thread_ts || !app.messages.has(e.thread_ts); }).forEach(function (e) {
      top.push({ ts: e.ts, key: "e" + e.ts, version: "1", build: function () { return ephemeralEl(e); } });
    });
    top.sort(function (a, b) { return cmpTs(a.ts, b.ts); });
    var list = $("channel-messages");
    var stick = nearBottom(list) || app.stick.channel;
    sync(list, top);
    if (stick) list.scrollTop = list.scrollHeight;
    app.stick.channel = false;

    var pane = $("thread");
    var threadTs = app.openThread;
    // A thread whose parent is not here (yet: the post's answer can beat its stream
    // event) stays chosen and opens once the message arrives.
    if (threadTs && !app.messages.has(threadTs)) threadTs = null;
    pane.hidden = !threadTs;
    document.body.classList.toggle("with-thread", !!threadTs);
    if (threadTs) {
      var items = all.filter(function (m) { return m.ts === threadTs || m.thread_ts === threadTs; }).map(function (m) {
        return {
          ts: m.ts,
          key: "m" + m.ts,
          version: String(app.versions.get(m.ts)),
          build: function () { return messageEl(m, "thread"); },
        };
      });
      mine.filter(function (e) { return e.thread_ts === threadTs; }).forEach(function (e) {
        items.push({ ts: e.ts, key: "e" + e.ts, version: "1", build: function () { return ephemeralEl(e); } });
      });
      items.sort(function (a, b) { return cmpTs(a.ts, b.ts); });
      var threadList = $("thread-messages");
      var stickThread = nearBottom(threadList) || app.stick.thread;
      if (threadList.dataset.thread !== threadTs) {
        threadList.textContent = "";
        threadList.dataset.thread = threadTs;
        stickThread = true;
      }
      sync(threadList, items);
      if (stickThread) threadList.scrollTop = threadList.scrollHeight;
      app.stick.thread = false;
      var status = app.statuses.get(threadTs) || "";
      var statusEl = $("assistant-status");
      statusEl.hidden = !status;
      statusEl.textContent = status ? (names.UBOT || "opsloop") + " " + status : "";
    }
  }

  function schedule() {
    if (app.scheduled) return;
    app.scheduled = true;
    // requestAnimationFrame batches a burst of events; the timer covers hidden tabs.
    var run = function () { if (app.scheduled) renderAll(); };
    if (root.requestAnimationFrame) root.requestAnimationFrame(run);
    setTimeout(run, 100);
  }

  // ---- state from the stream ----

  function bump(ts) {
    app.versions.set(ts, (app.versions.get(ts) || 0) + 1);
  }

  function ours(data) {
    return app.info && data && data.channel === app.info.channel.id;
  }

  function putMessage(msg) {
    if (!ours(msg)) return;
    app.messages.set(msg.ts, msg);
    bump(msg.ts);
  }

  function applySnapshot(state) {
    app.messages = new Map();
    app.versions = new Map();
    (state.messages || []).forEach(putMessage);
    app.ephemerals = (state.ephemerals || []).slice(-MAX_EPHEMERALS);
    app.statuses = new Map();
    (state.statuses || []).forEach(function (s) { if (ours(s)) app.statuses.set(s.thread_ts, s.status); });
    app.stick.channel = app.stick.thread = true;
    if (root.opsloopModal) root.opsloopModal.show(state.modal); // modal.js: this user's modal
    schedule();
  }

  var handlers = {
    snapshot: applySnapshot,
    message: putMessage,
    update: putMessage,
    delete: function (d) {
      if (!ours(d)) return;
      app.messages.delete(d.ts);
      app.versions.delete(d.ts);
    },
    reaction: function (d) {
      var msg = app.messages.get(d.ts);
      if (!ours(d) || !msg) return;
      msg.reactions = (d.reactions || []).map(function (name) {
        return { name: name, users: [d.user], count: 1 };
      });
      bump(d.ts);
    },
    ephemeral: function (e) {
      if (!ours(e) || e.user !== app.user) return;
      app.ephemerals.push(e);
      if (app.ephemerals.length > MAX_EPHEMERALS) app.ephemerals.shift();
      if (e.thread_ts && e.thread_ts !== app.openThread && app.messages.has(e.thread_ts)) {
        notice("opsloop (only visible to you): " + slackUnescape(e.text || ""), "info");
      }
    },
    status: function (s) {
      if (!ours(s)) return;
      if (s.status) app.statuses.set(s.thread_ts, s.status);
      else app.statuses.delete(s.thread_ts);
    },
    modal: function (d) {
      if (root.opsloopModal && d.user === app.user) root.opsloopModal.show(d);
    },
    delivery: function (d) {
      if (d.ok || d.kind !== "event") return;
      var why = d.reason === "http_timeout" ? "no answer within 3 s" : d.reason === "connection_failed"
        ? "the bot is not reachable" : "HTTP " + d.status;
      var next = d.attempt < d.retries ? " — retry " + (d.attempt + 1) + "/" + d.retries + " follows" : " — giving up";
      notice("The bot did not accept the " + d.type + " event (" + why + ")" + next);
    },
  };

  function connect() {
    if (app.source) app.source.close();
    setConnection("connecting", "connecting…");
    var source = new EventSource("/ui/stream?user=" + encodeURIComponent(app.user));
    app.source = source;
    Object.keys(handlers).forEach(function (kind) {
      source.addEventListener(kind, function (event) {
        if (source !== app.source) return;
        handlers[kind](JSON.parse(event.data));
        if (kind === "snapshot") setConnection("live", "live");
        schedule();
      });
    });
    source.onerror = function () {
      if (source === app.source) setConnection("reconnecting", "reconnecting…");
    };
  }

  // ---- actions ----

  function postJson(path, body) {
    return fetch(path, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    }).then(function (response) {
      return response.json().catch(function () { return {}; }).then(function (data) {
        return { status: response.status, data: data };
      });
    });
  }
  root.opsloopPostJson = postJson;

  function send(textarea, threadTs) {
    var text = textarea.value;
    if (!text.trim()) return;
    textarea.disabled = true;
    postJson("/ui/post", { user: app.user, text: text, thread_ts: threadTs || null })
      .then(function (r) {
        if (r.status !== 200) {
          notice("Not sent: " + (r.data.error || "HTTP " + r.status));
          return;
        }
        textarea.value = "";
        hideHint();
        if (!threadTs) {
          app.openThread = r.data.ts; // follow the conversation the message starts
          app.stick.thread = true;
        }
        app.stick.channel = true;
        schedule();
      })
      .catch(function () { notice("Not sent: the emulator is not reachable"); })
      .then(function () {
        textarea.disabled = false;
        textarea.focus();
      });
  }

  function click(buttonEl) {
    var msgEl = buttonEl.closest('[data-testid="message"]');
    if (!msgEl || buttonEl.classList.contains("pending")) return;
    buttonEl.classList.add("pending");
    postJson("/ui/click", {
      user: app.user,
      channel: app.info.channel.id,
      message_ts: msgEl.dataset.ts,
      action_id: buttonEl.dataset.actionId,
      value: buttonEl.dataset.value,
    })
      .then(function (r) {
        if (r.status === 404) notice("That button is no longer there.");
        else if (r.status !== 200) notice("Click refused: " + (r.data.error || "HTTP " + r.status));
        else if (r.data.status === 0) notice("The bot did not answer the click within 3 s.");
        else if (r.data.status < 200 || r.data.status >= 300) notice("The bot answered the click with HTTP " + r.data.status);
      })
      .catch(function () { notice("Click not sent: the emulator is not reachable"); })
      .then(function () { buttonEl.classList.remove("pending"); });
  }

  function wireComposer(formId, textareaId, threadOf) {
    var form = $(formId);
    var textarea = $(textareaId);
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      send(textarea, threadOf());
    });
    textarea.addEventListener("keydown", function (event) {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        send(textarea, threadOf());
      }
    });
  }

  // ---- the first visit's hint ----

  var HINT_KEY = "opsloop.hint";
  var HINT_TEXT = "@opsloop web is slow, look into it";
  var ROLE_WORDS = {
    requester: "asks the bot (start here)",
    approver: "may approve the bot's changes",
    stranger: "may not approve: a click is refused, privately",
  };

  function hintDone() {
    try { return root.localStorage.getItem(HINT_KEY) === "done"; } catch (e) { return false; }
  }

  function hideHint() {
    $("first-hint").hidden = true;
    try { root.localStorage.setItem(HINT_KEY, "done"); } catch (e) { /* storage off */ }
  }

  function showHint(info) {
    if (hintDone()) return;
    $("hint-text").textContent = HINT_TEXT.replace("@opsloop", "@" + info.bot.name);
    var people = $("hint-people");
    people.textContent = "";
    info.users.forEach(function (u) {
      var li = document.createElement("li");
      var who = document.createElement("b");
      who.textContent = u.name;
      li.appendChild(who);
      li.appendChild(document.createTextNode(" (" + u.role + ") " + (ROLE_WORDS[u.role] || "")));
      li.dataset.user = u.id;
      people.appendChild(li);
    });
    $("first-hint").hidden = false;
    $("dismiss-hint").addEventListener("click", hideHint);
    $("hint-text").addEventListener("click", function () {
      var composer = $("composer");
      composer.value = $("hint-text").textContent;
      composer.focus();
    });
  }

  function chooseUser(id) {
    app.user = id;
    document.body.dataset.user = id;
    $("user-switcher").value = id;
    try { root.localStorage.setItem("opsloop.user", id); } catch (e) { /* storage off */ }
    connect();
  }

  function start(info) {
    app.info = info;
    info.users.forEach(function (u) { names[u.id] = u.name; });
    names[info.bot.id] = info.bot.name;
    channels[info.channel.id] = info.channel.name;
    document.title = "#" + info.channel.name + " · opsloop dev";
    $("channel-name").textContent = "#" + info.channel.name;
    $("channel-title").textContent = "#" + info.channel.name;
    $("model-label").textContent = info.model_label;
    $("composer").placeholder = "Message #" + info.channel.name +
      " — type @" + info.bot.name + " to mention the bot (Enter sends, Shift+Enter for a new line)";
    var switcher = $("user-switcher");
    info.users.forEach(function (u) {
      var option = document.createElement("option");
      option.value = u.id;
      option.textContent = u.name + " (" + u.role + ")";
      option.dataset.role = u.role;
      switcher.appendChild(option);
    });
    var query = new URLSearchParams(root.location.search);
    app.openThread = query.get("thread"); // ?thread=TS opens that thread (screenshots, tests)
    var wanted = query.get("user");
    if (!wanted) {
      try { wanted = root.localStorage.getItem("opsloop.user"); } catch (e) { wanted = null; }
    }
    var known = info.users.some(function (u) { return u.id === wanted; });
    chooseUser(known ? wanted : info.users[0].id);
    switcher.addEventListener("change", function () { chooseUser(switcher.value); });

    showHint(info);
    wireComposer("composer-form", "composer", function () { return null; });
    wireComposer("thread-composer-form", "thread-composer", function () { return app.openThread; });
    $("close-thread").addEventListener("click", function () {
      app.openThread = null;
      schedule();
    });
    document.addEventListener("click", function (event) {
      var target = event.target;
      var btn = target.closest('[data-testid="button"]');
      if (btn) {
        click(btn);
        return;
      }
      if (target.closest("a")) return;
      var msgEl = target.closest('[data-testid="channel-messages"] [data-testid="message"]');
      if (msgEl && (target.closest('[data-testid="replies"]') || !root.getSelection().toString())) {
        app.openThread = msgEl.dataset.ts;
        app.stick.thread = true;
        schedule();
        $("thread-composer").focus();
      }
    });
  }

  fetch("/ui/info")
    .then(function (r) { return r.json(); })
    .then(start)
    .catch(function () { setConnection("down", "emulator not reachable"); });
})(typeof window !== "undefined" ? window : globalThis);
