/* opsloop dev: the renderer of the local Slack emulator's page.
 *
 * Pure: data in, HTML strings out, exposed as
 *    window.opsloopRender(blocks, text) -> HTML, with .mrkdwn(text) and .markdown(text),
 *    .names and .channels (ids -> names for mrkdwn's <@U…> and <#C…>; a `markdown` block
 *    shows them literally, as Slack does) and .clock(ts) (24-hour, the viewer's zone, as
 *    <!date^…> tokens are shown); .esc, .displayName, .unescape and .emoji are the pieces
 *    the page (channel.js) shows its own parts with.
 * Every piece of text it outputs is HTML-escaped, links are only http(s)/mailto, and no
 * remote resource is ever loaded (images show their alt text). It may be loaded anywhere
 * (tests load it alone). No build step, no dependencies. */
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
  // For the page (channel.js): the same escaping, names and emoji as every message.
  render.esc = esc;
  render.displayName = displayName;
  render.unescape = slackUnescape;
  render.emoji = EMOJI;
  root.opsloopRender = render;
  if (typeof module !== "undefined" && module.exports) module.exports = render;
})(typeof window !== "undefined" ? window : globalThis);
