/* pikku_workflows admin: the auto-refresh toggle of live pages and the fork preview.
   No external assets; the pages work without it (the toggle then does nothing). */
(function () {
  "use strict";

  var STORED = "pikku-auto-refresh";
  var SCROLL = "pikku-scroll:" + location.pathname + location.search;

  function busy(toggle) {
    // Never reload under someone's hands: a selection, an open traceback, a field in use.
    if (document.querySelector("#result_list input.action-select:checked")) return true;
    // (The list filters are open details elements too: those are not somebody reading.)
    if (document.querySelector("details[open]:not([data-filter-title])")) return true;
    var selection = window.getSelection && String(window.getSelection());
    if (selection) return true;
    var active = document.activeElement;
    return Boolean(
      active && active !== toggle && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName)
    );
  }

  function autoRefresh() {
    var toggle = document.getElementById("pikku-auto-refresh");
    if (!toggle) return;
    var every = 1000 * (parseFloat(toggle.dataset.everySeconds) || 5);
    var timer = null;
    var saved = sessionStorage.getItem(SCROLL);
    if (saved !== null) {
      sessionStorage.removeItem(SCROLL);
      window.scrollTo(0, parseInt(saved, 10) || 0);
    }
    toggle.checked = localStorage.getItem(STORED) === "on";

    function schedule() {
      clearTimeout(timer);
      if (toggle.checked) timer = setTimeout(refresh, every);
    }
    function refresh() {
      if (busy(toggle)) return schedule();
      sessionStorage.setItem(SCROLL, String(window.scrollY));
      location.reload();
    }
    toggle.addEventListener("change", function () {
      localStorage.setItem(STORED, toggle.checked ? "on" : "off");
      schedule();
    });
    schedule();
  }

  function forkPreview() {
    // The fork page lists the steps that execute again for the chosen step (data-again holds
    // each choice's list, written by the server); keep the list in step with the choice.
    var select = document.querySelector("select[name=from_step]");
    var list = document.getElementById("pikku-fork-again");
    if (!select || !list) return;
    var plans = JSON.parse(list.dataset.again || "{}");
    select.addEventListener("change", function () {
      var keys = plans[select.value] || [];
      list.textContent = "";
      keys.forEach(function (key) {
        var item = document.createElement("li");
        var code = document.createElement("code");
        code.textContent = key;
        item.appendChild(code);
        list.appendChild(item);
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    autoRefresh();
    forkPreview();
  });
})();
