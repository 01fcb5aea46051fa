// Keeps a dashboard page live without a reload: every element with
// data-live and an id is fetched again every 2 seconds and swapped in,
// and every <time datetime> says again how far it is from now.
(function () {
  "use strict";

  function relative(t, now) {
    var d = Math.round((t - now) / 1000), future = d > 0, s;
    if (!future) d = -d;
    if (d < 1) return "now";
    if (d < 60) s = d + " s";
    else if (d < 3600) s = Math.floor(d / 60) + " min";
    else if (d < 48 * 3600) s = Math.floor(d / 3600) + " h";
    else s = Math.floor(d / 86400) + " days";
    return future ? "in " + s : s + " ago";
  }

  function tick() {
    var now = Date.now();
    document.querySelectorAll("time[datetime]").forEach(function (el) {
      el.textContent = relative(Date.parse(el.getAttribute("datetime")), now);
    });
  }

  var busy = false;
  function refresh() {
    var live = document.querySelectorAll("[data-live][id]");
    if (busy || live.length === 0 || document.hidden) return;
    busy = true;
    fetch(location.href, { headers: { "X-Live": "1" }, credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        live.forEach(function (el) {
          var fresh = doc.getElementById(el.id);
          if (fresh && fresh.innerHTML !== el.innerHTML) {
            el.innerHTML = fresh.innerHTML;
          }
        });
        document.body.dataset.refreshed = String(Date.now());
        tick();
      })
      .catch(function () { /* the next round tries again */ })
      .then(function () { busy = false; });
  }

  document.addEventListener("submit", function (e) {
    var msg = e.target.getAttribute("data-confirm");
    if (msg && !window.confirm(msg)) e.preventDefault();
  });
  tick();
  setInterval(tick, 1000);
  setInterval(refresh, 2000);
})();
