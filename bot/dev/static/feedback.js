/* The feedback buttons of an answer (Slack's feedback_buttons in a context_actions block).
 *
 *    window.opsloopFeedback.render(block) -> HTML, called by app.js's renderBlock.
 *
 * Each button is an ordinary page button (data-testid="button", its action_id and the
 * chosen button's value), so channel.js's click handler posts it to /ui/click and the emulator
 * sends the bot the block_actions Slack sends. The pressed one stays marked, as in Slack.
 */
(function (root) {
  "use strict";

  var chosen = new Map(); // "<action_id>|<job>" -> "positive" | "negative"

  function esc(value) {
    return String(value == null ? "" : value)
      .replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;").replace(/'/g, "&#39;");
  }

  function groupKey(el) {
    var value = (el.positive_button && el.positive_button.value) || "";
    return (el.action_id || "") + "|" + value.replace(/\|[^|]*$/, "");
  }

  function one(el, button, side, face) {
    button = button || {};
    var label = (button.text && button.text.text) || side;
    var spoken = button.accessibility_label || label;
    var pressed = chosen.get(groupKey(el)) === side;
    return (
      '<button type="button" class="btn feedback-btn' + (pressed ? " chosen" : "") + '"' +
      ' data-testid="button" data-feedback="' + side + '"' +
      ' data-action-id="' + esc(el.action_id) + '"' +
      ' data-value="' + esc(button.value) + '"' +
      ' data-label="' + esc(label) + '"' +
      ' data-group="' + esc(groupKey(el)) + '"' +
      ' aria-pressed="' + (pressed ? "true" : "false") + '"' +
      ' title="' + esc(spoken) + '" aria-label="' + esc(spoken) + '">' +
      face + " " + esc(label) + "</button>"
    );
  }

  function render(block) {
    var elements = Array.isArray(block.elements) ? block.elements.slice(0, 5) : [];
    return '<div class="block context-actions" data-testid="context-actions">' +
      elements.map(function (el) {
        if (!el || el.type !== "feedback_buttons") {
          return '<span class="unsupported">[' + esc((el && el.type) || "element") + "]</span>";
        }
        return '<span class="feedback" data-testid="feedback" role="group" aria-label="Feedback">' +
          one(el, el.positive_button, "positive", "\uD83D\uDC4D") +
          one(el, el.negative_button, "negative", "\uD83D\uDC4E") + "</span>";
      }).join("") + "</div>";
  }

  // Mark the pressed button (before channel.js sends the click; a re-render keeps the mark).
  root.document.addEventListener("click", function (event) {
    var target = event.target;
    var button = target && target.closest ? target.closest("[data-feedback]") : null;
    if (!button) return;
    chosen.set(button.dataset.group, button.dataset.feedback);
    var group = button.closest('[data-testid="feedback"]');
    Array.prototype.forEach.call(group.querySelectorAll("[data-feedback]"), function (other) {
      var on = other === button;
      other.classList.toggle("chosen", on);
      other.setAttribute("aria-pressed", on ? "true" : "false");
    });
  }, true);

  root.opsloopFeedback = { render: render };
})(window);
