/* alkstore dashboard: live refresh and in-place actions. Hand-written, no build step.
 *
 * Every second (while the tab is visible) the page's live part is fetched
 * again (same URL, header X-Alkstore-Live: 1) and swapped in; checked boxes
 * stay checked.  Forms with data-action are sent with fetch and the live
 * part refreshes at once; without this script they post and redirect back.
 */
(function () {
  "use strict";
  var live = document.getElementById("live");
  var flash = document.getElementById("flash");
  if (!live) return;
  var period = parseInt(live.getAttribute("data-refresh"), 10) || 1000;
  var timer = null;
  var busy = false;

  function checkedIds() {
    var ids = {};
    var boxes = document.querySelectorAll('input[type=checkbox][name=id]:checked');
    for (var i = 0; i < boxes.length; i++) ids[boxes[i].value] = true;
    return ids;
  }

  function kept() {
    var values = {};
    var inputs = live.querySelectorAll("input[data-keep]");
    for (var i = 0; i < inputs.length; i++) values[inputs[i].getAttribute("data-keep")] = inputs[i].value;
    return values;
  }

  function restore(ids, values) {
    var boxes = live.querySelectorAll('input[type=checkbox][name=id]');
    for (var i = 0; i < boxes.length; i++) if (ids[boxes[i].value]) boxes[i].checked = true;
    var inputs = live.querySelectorAll("input[data-keep]");
    for (var j = 0; j < inputs.length; j++) {
      var key = inputs[j].getAttribute("data-keep");
      if (key in values) inputs[j].value = values[key];
    }
  }

  function typing() {
    var el = document.activeElement;
    return el && live.contains(el) && (el.tagName === "INPUT" && el.type !== "checkbox");
  }

  function refresh() {
    if (busy || typing()) return Promise.resolve();  // never swap a field being typed in
    busy = true;
    return fetch(window.location.href, {
      headers: { "X-Alkstore-Live": "1" }, credentials: "same-origin", cache: "no-store"
    }).then(function (r) {
      if (!r.ok) throw new Error("HTTP " + r.status);
      return r.text();
    }).then(function (html) {
      var ids = checkedIds(), values = kept();
      live.innerHTML = html;
      restore(ids, values);
      live.removeAttribute("data-stale");
    }).catch(function () {
      live.setAttribute("data-stale", "1");
    }).then(function () { busy = false; });
  }

  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(function () {
      (document.hidden ? Promise.resolve() : refresh()).then(schedule);
    }, period);
  }

  function say(text, bad) {
    if (!flash) return;
    var p = document.createElement("p");
    p.className = bad ? "flash error" : "flash";
    p.textContent = text;  // text, never HTML
    flash.innerHTML = "";
    flash.appendChild(p);
  }

  document.addEventListener("submit", function (event) {
    var form = event.target;
    var submitter = event.submitter || null;
    if (!form.hasAttribute("data-action")) return;
    var ask = (submitter && submitter.getAttribute("data-confirm")) || form.getAttribute("data-confirm");
    if (ask && !window.confirm(ask)) { event.preventDefault(); return; }
    if (!window.fetch || !window.FormData) return;  // plain post, redirected back
    event.preventDefault();
    var action = (submitter && submitter.getAttribute("formaction")) || form.getAttribute("action");
    var body = new URLSearchParams(new FormData(form));
    fetch(action, {
      method: "POST", body: body, credentials: "same-origin",
      headers: { "X-Alkstore-Live": "1" }
    }).then(function (r) {
      return r.text().then(function (text) { say(text, !r.ok); });
    }).catch(function (e) { say("request failed: " + e, true); })
      .then(refresh);
  });

  document.addEventListener("change", function (event) {
    var all = event.target;
    if (!all.hasAttribute || !all.hasAttribute("data-select-all")) return;
    var boxes = live.querySelectorAll('input[type=checkbox][name=id]');
    for (var i = 0; i < boxes.length; i++) boxes[i].checked = all.checked;
  });

  schedule();
})();
