/* opsloop dev: the modal a bot opens (views.open), shown as Slack's client shows it.
 *
 *    window.opsloopModal.show(data) -> shows data.view (Slack's view object) with the errors
 *    in data.errors under their inputs, or hides the dialog when data.view is null.
 *
 * channel.js calls it with the stream's `modal` events and the snapshot's `modal` (the
 * server sends each person only their own). The dialog (#modal) holds the title, the
 * blocks (rendered by app.js's window.opsloopRender), each input block as a form control
 * of its element's type, prefilled (`[data-block-id="…"]` holds it), and the submit and
 * close buttons with the view's texts (#modal-submit, #modal-close). Submit posts
 * /ui/view/submit (the emulator sends the signed view_submission and applies the bot's
 * answer): errors appear under their inputs (.modal-error) and the dialog stays; an update
 * or a close arrives as the next `modal` event. Close posts /ui/view/close. A refused answer
 * shows Slack's "We had some trouble connecting" (#modal-banner). No build step. */
(function (root) {
  "use strict";

  var doc = root.document;
  if (!doc || !doc.getElementById("modal")) return;

  var render = root.opsloopRender; // app.js
  var esc = render.esc;
  var shown = null; // the view on screen (Slack's shape)
  var busy = false;

  function $(id) {
    return doc.getElementById(id);
  }

  function user() {
    return doc.body.dataset.user || "";
  }

  function text(obj) {
    return obj && typeof obj.text === "string" ? obj.text : "";
  }

  function optionHtml(o, chosen) {
    return '<option value="' + esc(o.value) + '"' + (chosen ? " selected" : "") + ">" +
      esc(text(o.text)) + "</option>";
  }

  function isChosen(option, chosen) {
    return (chosen || []).some(function (c) { return c && c.value === option.value; });
  }

  function control(block, id) {
    var el = block.element || {};
    var options = Array.isArray(el.options) ? el.options.slice(0, 100) : [];
    var ph = el.placeholder ? ' placeholder="' + esc(text(el.placeholder)) + '"' : "";
    switch (el.type) {
      case "plain_text_input":
        var max = el.max_length ? ' maxlength="' + esc(el.max_length) + '"' : "";
        if (el.multiline) {
          return '<textarea id="' + id + '" rows="3"' + ph + max + ">" + esc(el.initial_value || "") + "</textarea>";
        }
        return '<input id="' + id + '" type="text"' + ph + max + ' value="' + esc(el.initial_value || "") + '">';
      case "number_input":
        return '<input id="' + id + '" type="text" inputmode="' + (el.is_decimal_allowed ? "decimal" : "numeric") +
          '"' + ph + ' value="' + esc(el.initial_value || "") + '">';
      case "static_select":
        return '<select id="' + id + '"><option value="">' + esc(text(el.placeholder) || "Select an option") +
          "</option>" + options.map(function (o) {
            return optionHtml(o, isChosen(o, [el.initial_option]));
          }).join("") + "</select>";
      case "multi_static_select":
        return '<select id="' + id + '" multiple>' + options.map(function (o) {
          return optionHtml(o, isChosen(o, el.initial_options));
        }).join("") + "</select>";
      case "radio_buttons":
      case "checkboxes":
        var kind = el.type === "radio_buttons" ? "radio" : "checkbox";
        var initial = kind === "radio" ? [el.initial_option] : el.initial_options;
        return '<div class="modal-choices" id="' + id + '">' + options.map(function (o) {
          return '<label class="modal-choice"><input type="' + kind + '" name="' + id + '" value="' +
            esc(o.value) + '"' + (isChosen(o, initial) ? " checked" : "") + "> " +
            render.mrkdwn(text(o.text)) + "</label>";
        }).join("") + "</div>";
      default:
        return '<input id="' + id + '" type="text" disabled value="[' + esc(el.type || "element") + ']">';
    }
  }

  function inputHtml(block, k) {
    var id = "modal-input-" + k;
    var optional = block.optional ? ' <span class="dim">(optional)</span>' : "";
    return '<div class="modal-input" data-block-id="' + esc(block.block_id || "") + '" data-type="' +
      esc((block.element || {}).type || "") + '"><label class="modal-label" for="' + id + '">' +
      esc(text(block.label)) + optional + "</label>" + control(block, id) +
      (block.hint ? '<div class="modal-hint">' + esc(text(block.hint)) + "</div>" : "") +
      '<div class="modal-error" data-testid="modal-error" hidden></div></div>';
  }

  function draw(view) {
    shown = view;
    $("modal-title").textContent = text(view.title);
    $("modal-submit").textContent = text(view.submit) || "Submit";
    $("modal-submit").hidden = !view.submit;
    $("modal-close").textContent = text(view.close) || "Cancel";
    $("modal-banner").hidden = true;
    var blocks = Array.isArray(view.blocks) ? view.blocks.slice(0, 100) : [];
    $("modal-body").innerHTML = blocks.map(function (b, k) {
      if (!b || typeof b !== "object") return "";
      return b.type === "input" ? inputHtml(b, k) : render([b], "");
    }).join("");
    $("modal").hidden = false;
    var first = $("modal-body").querySelector("input, select, textarea");
    if (first) first.focus();
  }

  function setErrors(errors) {
    Array.prototype.forEach.call($("modal-body").querySelectorAll(".modal-input"), function (box) {
      var said = errors && Object.prototype.hasOwnProperty.call(errors, box.dataset.blockId)
        ? errors[box.dataset.blockId] : "";
      var el = box.querySelector(".modal-error");
      el.textContent = said;
      el.hidden = !said;
      box.classList.toggle("has-error", !!said);
    });
  }

  function hide() {
    shown = null;
    $("modal").hidden = true;
    $("modal-body").textContent = "";
  }

  // A new view (or a new version of it) is drawn afresh; the same one keeps what was typed.
  function show(data) {
    var view = data && data.view;
    if (!view) return hide();
    if (!shown || shown.id !== view.id || shown.hash !== view.hash) draw(view);
    setErrors(data.errors || {});
  }

  function values() {
    var out = {};
    Array.prototype.forEach.call($("modal-body").querySelectorAll(".modal-input"), function (box) {
      var type = box.dataset.type;
      var value = null;
      if (type === "radio_buttons") {
        var on = box.querySelector("input:checked");
        value = on ? on.value : null;
      } else if (type === "checkboxes") {
        value = Array.prototype.map.call(box.querySelectorAll("input:checked"), function (i) { return i.value; });
      } else if (type === "multi_static_select") {
        value = Array.prototype.map.call(box.querySelector("select").selectedOptions, function (o) { return o.value; });
      } else {
        var field = box.querySelector("input, select, textarea");
        if (!field || field.disabled) return;
        value = field.value === "" ? null : field.value;
      }
      out[box.dataset.blockId] = value;
    });
    return out;
  }

  function banner(message) {
    var el = $("modal-banner");
    el.textContent = message;
    el.hidden = !message;
  }

  function submit() {
    if (!shown || busy) return;
    busy = true;
    $("modal-submit").disabled = true;
    root.opsloopPostJson("/ui/view/submit", { user: user(), view_id: shown.id, values: values() })
      .then(function (r) {
        if (r.status === 404) return hide();
        if (r.status !== 200) return banner("Not sent: " + (r.data.error || "HTTP " + r.status));
        var d = r.data;
        if (d.outcome === "errors" || d.outcome === "client_errors") setErrors(d.errors);
        else if (d.outcome === "refused") banner(d.shown + " (" + d.reason + ")");
      })
      .catch(function () { banner("Not sent: the emulator is not reachable"); })
      .then(function () {
        busy = false;
        $("modal-submit").disabled = false;
      });
  }

  function close() {
    if (!shown) return;
    var id = shown.id;
    hide();
    root.opsloopPostJson("/ui/view/close", { user: user(), view_id: id });
  }

  $("modal-form").addEventListener("submit", function (event) {
    event.preventDefault();
    submit();
  });
  $("modal-close").addEventListener("click", close);
  $("modal-x").addEventListener("click", close);
  doc.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && shown) close();
  });

  root.opsloopModal = { show: show };
})(window);
