// Keeps a dashboard page live without a reload. The server says when what
// the page shows may have changed, as server-sent events ("events": from a
// change stream where the database has one, else every 2 seconds); then
// every element with data-live and an id is fetched again and swapped in.
// Without EventSource, or when it keeps failing, the page polls every 2
// seconds instead. Every second, each <time datetime> says again how far
// it is from now.
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

  // A <details> that the person opened (a stack) stays open when the
  // region around it is read again.
  function keepOpen(el, fresh) {
    var was = el.querySelectorAll("details"), now = fresh.querySelectorAll("details");
    for (var i = 0; i < was.length && i < now.length; i++) now[i].open = was[i].open;
  }

  var busy = false, again = false;
  function refresh() {
    var live = document.querySelectorAll("[data-live][id]");
    if (live.length === 0 || document.hidden) return;
    if (busy) { again = true; return; } // a change during a fetch: fetch once more
    busy = true;
    again = false;
    fetch(location.href, { headers: { "X-Live": "1" }, credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        live.forEach(function (el) {
          var fresh = doc.getElementById(el.id);
          if (fresh) keepOpen(el, fresh);
          if (fresh && fresh.innerHTML !== el.innerHTML) {
            el.innerHTML = fresh.innerHTML;
          }
        });
        document.body.dataset.refreshed = String(Date.now());
        tick();
      })
      .catch(function () { /* the next round tries again */ })
      .then(function () {
        busy = false;
        if (again) refresh();
      });
  }

  // Events while they work; polling when there are none or they keep
  // failing. A hidden page closes its stream (browsers allow few
  // connections to one server) and reads itself again when shown.
  var source = null, failures = 0, polling = false;
  function listen() {
    if (polling || source || document.hidden || !document.querySelector("[data-live][id]")) return;
    if (!window.EventSource) return poll();
    var es = source = new EventSource("events");
    es.addEventListener("change", refresh);
    es.onopen = function () { failures = 0; refresh(); }; // what changed before it opened
    es.onerror = function () {
      if (es.readyState === EventSource.CLOSED || ++failures >= 3) poll();
    };
  }
  function poll() {
    if (source) source.close();
    source = null;
    if (!polling) setInterval(refresh, 2000);
    polling = true;
  }
  document.addEventListener("visibilitychange", function () {
    if (document.hidden) {
      if (source) source.close();
      source = null;
    } else if (polling) {
      refresh();
    } else {
      listen();
    }
  });

  // A destructive button says what it asks; the form may too.
  document.addEventListener("submit", function (e) {
    var by = e.submitter;
    var msg = (by && by.getAttribute("data-confirm")) || e.target.getAttribute("data-confirm");
    if (msg && !window.confirm(msg)) e.preventDefault();
  });
  tick();
  setInterval(tick, 1000);
  listen();
})();
