/* opsloop dev: the page of the local Slack emulator.
 *
 * Two halves:
 *  - the renderer (pure: data in, HTML strings out), exposed as
 *    window.opsloopRender(blocks, text) -> HTML, with .mrkdwn(text) and .markdown(text),
 *    .names and .channels (ids -> names for mrkdwn's <@U…> and <#C…>; a `markdown` block
 *    shows them literally, as Slack does) and .clock(ts) (24-hour, the viewer's zone, as
 *    <!date^…> tokens are shown);
 *    every piece of text it outputs is HTML-escaped, links are only http(s)/mailto, and no
 *    remote resource is ever loaded (images show their alt text);
 *  - the page: one channel and a thread pane, fed by /ui/stream (server-sent events: a
 *    snapshot, then every change in order), posting and clicking through /ui/post and
 *    /ui/click as the user chosen in the switcher. A first visit shows a hint (what to
 *    type, who is who, from /ui/info) until it is dismissed or a message is sent; the
 *    browser remembers that (localStorage "opsloop.hint"). Its JSON POST is
 *    window.opsloopPostJson(path, body) -> Promise of {status, data}, which shortcut.js and
 *    assistant.js post with too.
 * No build step, no dependencies. */
(function (root) {
  "use strict";

  // ---------------------------------------------------------------- rendering

  var EMOJI = {
    white_check_mark: "\u2705",
    heavy_check_mark: "\u2714\ufe0f",
    x: "\u274c",
    hourglass_flowing_sand: "\u23f3",
    hourglass: "\u231b",
    raised_hand: "\u270b",
    no_entry: "\u26d4",
    no_entry_sign: "\ud83d\udeab",
    octagonal_sign: "\ud83d\uded1",
    warning: "\u26a0\ufe0f",
    eyes: "\ud83d\udc40",
    speech_balloon: "\ud83d\udcac",
    rotating_light: "\ud83d\udea8",
    fire: "\ud83d\udd25",
    tada: "\ud83c\udf89",
    wrench: "\ud83d\udd27",
    thumbsup: "\ud83d\udc4d",
    "+1": "\ud83d\udc4d",
    robot_face: "\ud83e\udd16",
    information_source: "\u2139\ufe0f",
  };

  // User id -> display name, for <@U…> mentions; channel id -> name, for <#C…>; the page
  // fills both from /ui/info. Only mrkdwn reads them: a `markdown` block has no mentions.
  var names = { UBOT: "opsloop" };
  var channels = {};

  var OPEN = "\u0001";
  var CLOSE = "\u0002";

  function esc(value) {
    return String(value == null ? "" : value)
      .replace(/&/g, "&amp;")
      .replace(/</g, "&lt;")
      .replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;")
      .replace(/'/g, "&#39;");
  }

  function slackUnescape(text) {
    return text.replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&amp;/g, "&");
  }

  // Input text may not carry our placeholder markers.
  function clean(text) {
    return String(text == null ? "" : text).replace(/[\u0001\u0002]/g, "");
  }

  function safeUrl(url) {
    var u = String(url || "").trim();
    if (!/^(https?:\/\/|mailto:)/i.test(u) || /[\s\u0000-\u001f\u007f]/.test(u)) return null;
    return u;
  }

  function link(href, inner) {
    return '<a href="' + esc(href) + '" target="_blank" rel="noopener noreferrer">' + inner + "</a>";
  }

  function emojify(html) {
    return html.replace(/:([a-z0-9_+-]+):/g, function (whole, name) {
      return Object.prototype.hasOwnProperty.call(EMOJI, name)
        ? '<span class="emoji" title=":' + name + ':">' + EMOJI[name] + "</span>"
        : whole;
    });
  }

  // Placeholders: finished HTML is set aside while the surrounding text is escaped and
  // formatted, then put back.
  function Slots() {
    var items = [];
    return {
      hold: function (html) {
        items.push(html);
        return OPEN + (items.length - 1) + CLOSE;
      },
      restore: function (html) {
        return html.replace(/\u0001(\d+)\u0002/g, function (_, k) {
          return items[+k] || "";
        });
      },
    };
  }

  function displayName(id) {
    return Object.prototype.hasOwnProperty.call(names, id) ? names[id] : id;
  }

  // One <…> token of Slack mrkdwn: mentions, channels, specials, links.
  function token(inner) {
    var bar = inner.indexOf("|");
    var head = bar < 0 ? inner : inner.slice(0, bar);
    var label = bar < 0 ? "" : slackUnescape(inner.slice(bar + 1));
    if (head.charAt(0) === "@") {
      var id = head.slice(1);
      var shown = Object.prototype.hasOwnProperty.call(names, id) ? names[id] : label || id;
      return '<span class="mention" data-user="' + esc(id) + '">@' + esc(shown) + "</span>";
    }
    if (head.charAt(0) === "#") {
      var cid = head.slice(1);
      var channel = Object.prototype.hasOwnProperty.call(channels, cid) ? channels[cid] : label || cid;
      return '<span class="mention">#' + esc(channel) + "</span>";
    }
    if (head.slice(0, 6) === "!date^") return slackDate(head.slice(6), label);
    if (head.charAt(0) === "!") {
      var special = head.slice(1);
      if (/^(here|channel|everyone)$/.test(special)) {
        return '<span class="mention">@' + esc(special) + "</span>";
      }
      return '<span class="mention">' + esc(label || special) + "</span>";
    }
    var url = slackUnescape(head);
    var href = safeUrl(url);
    if (!href) return esc("<" + slackUnescape(inner) + ">");
    return link(href, esc(label || url));
  }

  // ---- times, as Slack shows them: the viewer's zone, a 24-hour clock ----

  var MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
    "September", "October", "November", "December"];
  var DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];

  function pad(n) {
    return (n < 10 ? "0" : "") + n;
  }

  function ordinal(n) {
    var tens = n % 100;
    var suffix = tens >= 11 && tens <= 13 ? "th" : ["th", "st", "nd", "rd"][n % 10] || "th";
    return n + suffix;
  }

  function clock(ts, withSeconds) {
    var d = new Date(parseFloat(ts) * 1000);
    if (isNaN(d.getTime())) return "";
    var hm = pad(d.getHours()) + ":" + pad(d.getMinutes());
    return withSeconds === false ? hm : hm + ":" + pad(d.getSeconds());
  }

  function dayWord(d) {
    var today = new Date();
    var start = function (x) { return new Date(x.getFullYear(), x.getMonth(), x.getDate()).getTime(); };
    var days = Math.round((start(d) - start(today)) / 86400000);
    return days === 0 ? "Today" : days === -1 ? "Yesterday" : days === 1 ? "Tomorrow" : null;
  }

  // <!date^TS^FORMAT[^LINK]|FALLBACK>: Slack's date formatting tokens.
  function slackDate(spec, fallback) {
    var parts = spec.split("^");
    var seconds = /^\d{1,12}$/.test(parts[0]) ? parseInt(parts[0], 10) : NaN;
    var d = new Date(seconds * 1000);
    if (isNaN(d.getTime()) || parts.length < 2) return esc(fallback || "");
    var short = MONTHS[d.getMonth()].slice(0, 3) + " " + d.getDate() + ", " + d.getFullYear();
    var long = MONTHS[d.getMonth()] + " " + ordinal(d.getDate()) + ", " + d.getFullYear();
    var tokens = {
      date_num: d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()),
      date: long,
      date_short: short,
      date_long: DAYS[d.getDay()] + ", " + long,
      time: clock(seconds, false),
      time_secs: clock(seconds),
    };
    ["date", "date_short", "date_long"].forEach(function (k) {
      tokens[k + "_pretty"] = dayWord(d) || tokens[k];
    });
    var shown = parts[1].replace(/\{([a-z_]+)\}/g, function (whole, k) {
      return Object.prototype.hasOwnProperty.call(tokens, k) ? tokens[k] : whole;
    });
    var href = parts.length > 2 ? safeUrl(slackUnescape(parts.slice(2).join("^"))) : null;
    return href ? link(href, esc(shown)) : '<span class="date">' + esc(shown) + "</span>";
  }

  // Slack's mrkdwn (text as Slack holds it: &, <, > escaped as entities).
  function mrkdwn(text) {
    var slots = Slots();
    var s = clean(text);
    s = s.replace(/```\n?([\s\S]*?)\n?```/g, function (_, code) {
      return slots.hold('<pre class="code-block">' + esc(slackUnescape(code)) + "</pre>");
    });
    s = s.replace(/`([^`\n]+)`/g, function (_, code) {
      return slots.hold("<code>" + esc(slackUnescape(code)) + "</code>");
    });
    s = s.replace(/<([^<>\n]+)>/g, function (_, inner) {
      return slots.hold(token(inner));
    });
    var html = esc(slackUnescape(s));
    html = html.replace(/(^|[^\w*])\*(?=\S)([^*\n]*?\S)\*(?![\w*])/g, "$1<b>$2</b>");
    html = html.replace(/(^|[^\w_])_(?=\S)([^_\n]*?\S)_(?![\w_])/g, "$1<i>$2</i>");
    html = html.replace(/(^|[^\w~])~(?=\S)([^~\n]*?\S)~(?![\w~])/g, "$1<s>$2</s>");
    html = html.replace(/(^|\n)&gt; ?([^\n]*)/g, '$1<span class="quote">$2</span>');
    html = emojify(html);
    html = html.replace(/\n/g, "<br>");
    return slots.restore(html);
  }

  // ---- standard Markdown (the `markdown` block and streamed text) ----

  // A link target: no spaces, parentheses only balanced one level deep.
  var URL_PART = "((?:[^()\\s]|\\([^()\\s]*\\))*)";
  var INLINE = new RegExp(
    [
      "(`+)([^`]|[^`][\\s\\S]*?[^`])\\1(?!`)", // 1, 2: code span
      "\\\\([\\\\`*_{}\\[\\]()#+\\-.!~|<>])", // 3: backslash escape
      "!\\[([^\\]\\n]*)\\]\\(\\s*" + URL_PART + '(?:\\s+"[^"\\n]*")?\\s*\\)', // 4, 5: image
      "\\[([^\\]\\n]+)\\]\\(\\s*" + URL_PART + '(?:\\s+"[^"\\n]*")?\\s*\\)', // 6, 7: link
      "<((?:https?:\\/\\/|mailto:)[^>\\s]+)>", // 8: autolink
      "(https?:\\/\\/[^\\s<>]*[^\\s<>.,:;!?'\")\\]*_~])", // 9: bare URL
    ].join("|"),
    "g"
  );

  function inlineMd(text, insideLink) {
    var slots = Slots();
    var s = String(text).replace(INLINE, function (m, ticks, code, escaped, alt, imgUrl, label, url, auto, bare) {
      if (ticks) return slots.hold("<code>" + esc(code.replace(/^ ([\s\S]*) $/, "$1")) + "</code>");
      if (escaped) return slots.hold(esc(escaped));
      if (imgUrl !== undefined) {
        return slots.hold('<span class="img-alt">[image' + (alt ? ": " + esc(alt) : "") + "]</span>");
      }
      if (label !== undefined) {
        var inner = inlineMd(label, true);
        var target = safeUrl(url);
        return slots.hold(target && !insideLink ? link(target, inner) : inner);
      }
      var raw = auto || bare;
      var href = safeUrl(raw);
      return slots.hold(href && !insideLink ? link(href, esc(raw)) : esc(raw));
    });
    var html = esc(s);
    html = html.replace(/\*\*\*(?=\S)([\s\S]*?\S)\*\*\*/g, "<strong><em>$1</em></strong>");
    html = html.replace(/\*\*(?=\S)([\s\S]*?\S)\*\*/g, "<strong>$1</strong>");
    html = html.replace(/(^|[^\w])__(?=\S)([\s\S]*?\S)__(?!\w)/g, "$1<strong>$2</strong>");
    html = html.replace(/~~(?=\S)([\s\S]*?\S)~~/g, "<del>$1</del>");
    html = html.replace(/\*(?=\S)([^*]*?\S)\*/g, "<em>$1</em>");
    html = html.replace(/(^|[^\w])_(?=\S)([^_]*?\S)_(?!\w)/g, "$1<em>$2</em>");
    html = emojify(html);
    html = html.replace(/\n/g, "<br>");
    return slots.restore(html);
  }

  var FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)[^`]*$/;
  var HEADING = /^ {0,3}(#{1,6})(?:\s+(.*?))?\s*#*\s*$/;
  var RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
  var QUOTE = /^ {0,3}>/;
  var ITEM = /^( {0,12})([-*+]|\d{1,9}[.)])(?:\s+(.*))?$/;
  var TABLE_RULE = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;
  var MAX_DEPTH = 8;

  function blank(line) {
    return /^\s*$/.test(line);
  }

  function indentOf(line) {
    return line.match(/^ */)[0].length;
  }

  function cells(line) {
    var s = line.trim();
    if (s.charAt(0) === "|") s = s.slice(1);
    if (s.slice(-1) === "|" && s.slice(-2) !== "\\|") s = s.slice(0, -1);
    return s.split(/(?<!\\)\|/).map(function (c) {
      return c.trim().replace(/\\\|/g, "|");
    });
  }

  function tableStarts(lines, i) {
    return (
      i + 1 < lines.length &&
      lines[i].indexOf("|") >= 0 &&
      TABLE_RULE.test(lines[i + 1]) &&
      lines[i + 1].indexOf("-") >= 0 &&
      (lines[i + 1].indexOf("|") >= 0 || cells(lines[i]).length > 1)
    );
  }

  function startsBlock(lines, i) {
    var line = lines[i];
    return (
      FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) ||
      ITEM.test(line) || tableStarts(lines, i)
    );
  }

  function table(lines, i) {
    var head = cells(lines[i]);
    var aligns = cells(lines[i + 1]).map(function (c) {
      if (/^:-+:$/.test(c)) return "center";
      if (/-:$/.test(c)) return "right";
      if (/^:-/.test(c)) return "left";
      return "";
    });
    var cell = function (tag, text, k) {
      var cls = aligns[k] ? ' class="al-' + aligns[k] + '"' : "";
      return "<" + tag + cls + ">" + inlineMd(text || "") + "</" + tag + ">";
    };
    var html = '<div class="table-wrap"><table><thead><tr>';
    html += head.map(function (c, k) { return cell("th", c, k); }).join("");
    html += "</tr></thead><tbody>";
    i += 2;
    while (i < lines.length && !blank(lines[i]) && lines[i].indexOf("|") >= 0) {
      var row = cells(lines[i]);
      html += "<tr>" + head.map(function (_, k) { return cell("td", row[k], k); }).join("") + "</tr>";
      i++;
    }
    return { html: html + "</tbody></table></div>", next: i };
  }

  function list(lines, i, depth) {
    var first = ITEM.exec(lines[i]);
    var indent = first[1].length;
    var ordered = /\d/.test(first[2]);
    var items = [];
    while (i < lines.length) {
      var m = ITEM.exec(lines[i]);
      if (!m || m[1].length !== indent || /\d/.test(m[2]) !== ordered || RULE.test(lines[i])) break;
      var body = [m[3] || ""];
      var contentIndent = m[1].length + m[2].length + 1;
      i++;
      while (i < lines.length) {
        var line = lines[i];
        if (blank(line)) {
          if (i + 1 < lines.length && !blank(lines[i + 1]) && indentOf(lines[i + 1]) > indent) {
            body.push("");
            i++;
            continue;
          }
          break;
        }
        var sub = ITEM.exec(line);
        if (sub && sub[1].length <= indent) break;
        if (!sub && indentOf(line) <= indent && startsBlock(lines, i)) break;
        body.push(line.slice(Math.min(indentOf(line), contentIndent)));
        i++;
      }
      items.push(body);
    }
    var start = ordered ? parseInt(first[2], 10) : 1;
    var open = ordered ? "<ol" + (start !== 1 ? ' start="' + start + '"' : "") + ">" : "<ul>";
    var html = items.map(function (body) {
      var task = /^\[([ xX])\]\s+/.exec(body[0]);
      var box = "";
      if (task) {
        body = [body[0].slice(task[0].length)].concat(body.slice(1));
        box = '<span class="task">' + (task[1] === " " ? "\u2610" : "\u2611") + "</span> ";
      }
      return "<li>" + box + blocks(body, depth + 1) + "</li>";
    }).join("");
    return { html: open + html + (ordered ? "</ol>" : "</ul>"), next: i };
  }

  function blocks(lines, depth) {
    if (depth > MAX_DEPTH) return "<p>" + inlineMd(lines.join("\n")) + "</p>";
    var out = "";
    var i = 0;
    var m;
    while (i < lines.length) {
      var line = lines[i];
      if (blank(line)) {
        i++;
        continue;
      }
      if ((m = FENCE.exec(line))) {
        var marker = m[1];
        var lang = m[2];
        var code = [];
        i++;
        while (i < lines.length) {
          var close = /^ {0,3}(`{3,}|~{3,})\s*$/.exec(lines[i]);
          if (close && close[1].charAt(0) === marker.charAt(0) && close[1].length >= marker.length) break;
          code.push(lines[i]);
          i++;
        }
        i++;
        var langAttr = lang ? ' data-lang="' + esc(lang) + '"' : "";
        out += '<pre class="code-block"><code' + langAttr + ">" + esc(code.join("\n")) + "</code></pre>";
        continue;
      }
      if ((m = HEADING.exec(line))) {
        var n = m[1].length;
        out += "<h" + n + ">" + inlineMd(m[2] || "") + "</h" + n + ">";
        i++;
        continue;
      }
      if (RULE.test(line)) {
        out += "<hr>";
        i++;
        continue;
      }
      if (tableStarts(lines, i)) {
        var t = table(lines, i);
        out += t.html;
        i = t.next;
        continue;
      }
      if (QUOTE.test(line)) {
        var quoted = [];
        while (i < lines.length && QUOTE.test(lines[i])) {
          quoted.push(lines[i].replace(/^ {0,3}> ?/, ""));
          i++;
        }
        out += "<blockquote>" + blocks(quoted, depth + 1) + "</blockquote>";
        continue;
      }
      if (ITEM.test(line)) {
        var l = list(lines, i, depth);
        if (l.next > i) {
          out += l.html;
          i = l.next;
          continue;
        }
      }
      var para = [line];
      i++;
      while (i < lines.length && !blank(lines[i]) && !startsBlock(lines, i)) {
        para.push(lines[i]);
        i++;
      }
      out += "<p>" + inlineMd(para.join("\n")) + "</p>";
    }
    return out;
  }

  function markdown(text) {
    return blocks(clean(text).replace(/\r\n?/g, "\n").split("\n"), 0);
  }

  // ---- Block Kit ----

  function plain(text, withEmoji) {
    var html = esc(text);
    return (withEmoji === false ? html : emojify(html)).replace(/\n/g, "<br>");
  }

  function textObject(obj) {
    if (!obj || typeof obj !== "object") return "";
    var text = clean(obj.text);
    return obj.type === "mrkdwn" ? mrkdwn(text) : plain(text, obj.emoji);
  }

  function button(el, blockId) {
    var label = clean(el.text && el.text.text);
    var style = el.style === "primary" || el.style === "danger" ? " btn-" + el.style : "";
    return (
      '<button type="button" class="btn' + style + '" data-testid="button"' +
      ' data-action-id="' + esc(el.action_id || "") + '"' +
      ' data-value="' + esc(el.value == null ? "" : el.value) + '"' +
      ' data-block-id="' + esc(blockId || "") + '"' +
      ' data-label="' + esc(label) + '">' + plain(label) + "</button>"
    );
  }

  function renderBlock(block, text) {
    var id = block.block_id ? ' data-block-id="' + esc(block.block_id) + '"' : "";
    var elements = Array.isArray(block.elements) ? block.elements : [];
    switch (block.type) {
      case "section": {
        var html = '<div class="block section"' + id + '><div class="section-body">';
        if (block.text) html += '<div class="section-text">' + textObject(block.text) + "</div>";
        if (Array.isArray(block.fields) && block.fields.length) {
          html += '<div class="fields">' + block.fields.map(function (f) {
            return '<div class="field">' + textObject(f) + "</div>";
          }).join("") + "</div>";
        }
        html += "</div>";
        var acc = block.accessory;
        if (acc && acc.type === "button") html += '<div class="accessory">' + button(acc, block.block_id) + "</div>";
        return html + "</div>";
      }
      case "context":
        return '<div class="block context"' + id + ">" + elements.map(function (e) {
          if (e && e.type === "image") return '<span class="ctx-item img-alt">' + esc(e.alt_text || "image") + "</span>";
          return '<span class="ctx-item">' + textObject(e) + "</span>";
        }).join("") + "</div>";
      case "actions":
        return '<div class="block actions"' + id + ">" + elements.map(function (e) {
          if (e && e.type === "button") return button(e, block.block_id);
          return '<span class="unsupported">[' + esc((e && e.type) || "element") + "]</span>";
        }).join("") + "</div>";
      case "context_actions": // feedback.js: the answer's feedback buttons
        if (root.opsloopFeedback) return root.opsloopFeedback.render(block);
        return '<div class="block unsupported"' + id + ">Unsupported block: context_actions</div>";
      case "divider":
        return '<hr class="block divider"' + id + ">";
      case "header":
        return '<div class="block header"' + id + ">" + textObject(block.text) + "</div>";
      case "markdown":
        return '<div class="block markdown"' + id + ">" + markdown(block.text) + "</div>";
      case "image":
        return '<div class="block img-alt"' + id + ">[image: " + esc(block.alt_text || "") + "]</div>";
      case "rich_text":
        return '<div class="block rich-text"' + id + ">" + mrkdwn(text) + "</div>";
      default:
        return '<div class="block unsupported"' + id + ">Unsupported block: " + esc(block.type) + "</div>";
    }
  }

  // A message's HTML: its blocks, or its text (mrkdwn) when it has none.
  function render(blockList, text) {
    var list = Array.isArray(blockList)
      ? blockList.filter(function (b) { return b && typeof b === "object"; }).slice(0, 50)
      : [];
    if (!list.length) return '<div class="mrkdwn">' + mrkdwn(text) + "</div>";
    var seenRich = false;
    return list.map(function (b) {
      if (b.type === "rich_text") {
        if (seenRich) return "";
        seenRich = true;
      }
      return renderBlock(b, text);
    }).join("");
  }

  render.mrkdwn = mrkdwn;
  render.markdown = markdown;
  render.names = names;
  render.channels = channels;
  render.clock = clock;
  root.opsloopRender = render;
  if (typeof module !== "undefined" && module.exports) module.exports = render;

  // ---------------------------------------------------------------- the page

  // Only on the emulator's page (the renderer alone may be loaded anywhere, e.g. in tests).
  if (typeof document === "undefined" || !document.querySelector('[data-testid="channel"]')) return;

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
