/* opsloop dev: task cards of a structured chat stream, and files shared in a message.
 *
 * window.opsloopTasks.stream(msg) -> HTML for a message whose `stream` (the fake Slack's view
 * of a chunk stream: task_display_mode, title, items of text and tasks in order) is set:
 * `timeline` shows each task card where it came, between the text; `plan` groups every
 * card in one plan block under its title, where the first one came. The blocks a stopStream
 * ended it with (feedback buttons) follow. window.opsloopTasks.files(msg) -> HTML of the
 * files a message shares: a download link each, and a Markdown file's content (its
 * `preview`, which the fake Slack fills with the file's opening) rendered as the `markdown`
 * block renders it, so an incident timeline or a long answer reads in the thread. Pure:
 * data in, escaped HTML out; loaded before channel.js, which calls it from contentHtml. */
(function (root) {
  "use strict";

  var MARKS = { pending: "\u25fb\ufe0f", in_progress: "\u23f3", complete: "\u2705", error: "\u26a0\ufe0f" };
  var WORDS = { pending: "pending", in_progress: "running", complete: "done", error: "failed" };

  function esc(value) {
    return String(value == null ? "" : value)
      .replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;").replace(/'/g, "&#39;");
  }

  function status(task) {
    return Object.prototype.hasOwnProperty.call(MARKS, task.status) ? task.status : "pending";
  }

  function card(task) {
    var s = status(task);
    var html = '<div class="task-card ' + s + '" data-testid="task-card" data-task-id="' +
      esc(task.id) + '" data-status="' + s + '"><span class="task-mark" aria-hidden="true">' +
      MARKS[s] + '</span><span class="task-title">' + esc(task.title) + "</span>" +
      '<span class="task-status">' + WORDS[s] + "</span>";
    if (task.details) html += '<div class="task-details">' + esc(task.details) + "</div>";
    if (task.output) html += '<div class="task-output" data-testid="task-output">' + esc(task.output) + "</div>";
    return html + "</div>";
  }

  function text(item) {
    var render = root.opsloopRender;
    return '<div class="block markdown">' + (render ? render.markdown(item.text) : esc(item.text)) + "</div>";
  }

  function stream(msg) {
    var view = msg.stream || {};
    var items = Array.isArray(view.items) ? view.items.slice(0, 400) : [];
    var plan = view.task_display_mode === "plan";
    var html = "";
    var planShown = false;
    items.forEach(function (item) {
      if (!item || typeof item !== "object") return;
      if (item.type === "text") {
        html += text(item);
      } else if (item.type === "task" && !plan) {
        html += card(item);
      } else if (item.type === "task" && !planShown) {
        planShown = true;
        html += '<div class="task-plan" data-testid="task-plan"><div class="task-plan-title">' +
          esc(view.title || "Plan") + "</div>" +
          items.filter(function (i) { return i && i.type === "task"; }).map(card).join("") + "</div>";
      }
    });
    if (Array.isArray(msg.blocks) && msg.blocks.length && root.opsloopRender) {
      html += root.opsloopRender(msg.blocks, "");
    }
    return '<div class="task-stream" data-testid="task-stream">' + html + "</div>";
  }

  function safeHref(url) {
    return /^https?:\/\//i.test(String(url || "")) ? String(url) : "#";
  }

  // CommonMark reads &lt; &gt; &amp; as the characters (the timeline writes Slack's `<…>` so,
  // never a mention): decoded once here, then escaped again by the renderer, shown as text.
  function entities(text) {
    return text.replace(/&(lt|gt|amp);/g, function (_, name) {
      return name === "lt" ? "<" : name === "gt" ? ">" : "&";
    });
  }

  function preview(f) {
    var render = root.opsloopRender;
    if (f.filetype !== "markdown" || typeof f.preview !== "string" || !f.preview || !render) return "";
    var more = f.preview_is_truncated
      ? '<div class="file-more">\u2026 the rest is in the file (' + esc(f.lines_more) + " more lines)</div>"
      : "";
    return '<div class="file-preview block markdown" data-testid="file-preview">' +
      render.markdown(entities(f.preview)) + more + "</div>";
  }

  function files(msg) {
    var list = Array.isArray(msg.files) ? msg.files.slice(0, 10) : [];
    return list.map(function (f) {
      if (!f || typeof f !== "object") return "";
      return '<div class="file-share" data-testid="file" data-name="' + esc(f.name) + '">' +
        '<span class="file-icon" aria-hidden="true">' +
        "\ud83d\udcc4</span> <a data-testid=\"file-link\" href=\"" + esc(safeHref(f.permalink)) +
        '" download="' + esc(f.name) + '" rel="noopener noreferrer">' + esc(f.title || f.name) +
        '</a> <span class="file-size">' + esc(f.name) + " \u00b7 " + esc(f.size) + " bytes</span>" +
        preview(f) + "</div>";
    }).join("");
  }

  root.opsloopTasks = { stream: stream, files: files, card: card };
  if (typeof module !== "undefined" && module.exports) module.exports = root.opsloopTasks;
})(typeof window !== "undefined" ? window : globalThis);
