/* Kalena console: live node chart. The page's chart (drawn by console.js) is extended with every
 * ledger point the server publishes for this node over ws(s)://HOST/ws/nodes/ID/ (docs/design.md §1).
 * Trace order, as kalena_web/console/live_figures.py draws them: cpu capacity, limits, requests,
 * reservations, usage (Σ), production usage (usage − batch usage), batch throttled; then ram
 * capacity, limits, requests, reservations, usage (Σ), production usage. A value the point lacks
 * (null: unconstrained, or not measured) is a gap.
 * Reconnects with a growing delay; <div data-live-status> says what the socket is doing.
 */
(function () {
  "use strict";
  var KEYS = ["capacity", "limits", "requests", "reservations", "usage", "prod_usage"];
  var DIMS = [[0, 1000], [1, 1073741824]];  // cpu mcpu → cores, ram bytes → GiB

  function status(text) {
    var el = document.querySelector("[data-live-status]");
    if (el) { el.textContent = text; }
  }

  function value(point, key, index, scale) {
    if (key === "prod_usage") {  // production = Σ usage − batch usage
      var batch = point.batch_usage ? point.batch_usage[index] : null;
      var total = point.usage[index];
      return batch === null || batch === undefined || total === null ? NaN : (total - batch) / scale;
    }
    var v = point[key][index];
    return v === null ? NaN : v / scale;
  }

  function extend(div, point) {
    var xs = [], ys = [], idx = [], trace = 0;
    DIMS.forEach(function (dim, panel) {
      KEYS.forEach(function (key) {
        xs.push([point.t * 1000]);  // epoch ms, as the page's history (a plain array)
        ys.push([value(point, key, dim[0], dim[1])]);
        idx.push(trace++);
      });
      if (panel === 0) {  // cpu: the batch pods' throttling rate, mcpu → cores
        var throttled = point.batch_throttled;
        xs.push([point.t * 1000]);
        ys.push([throttled === null || throttled === undefined ? NaN : throttled / dim[1]]);
        idx.push(trace++);
      }
    });
    Plotly.extendTraces(div, {x: xs, y: ys}, idx, 2000);
    div.dataset.livePoints = String((parseInt(div.dataset.livePoints || "0", 10) + 1));
  }

  function connect(div, delay) {
    var scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    var socket = new WebSocket(scheme + window.location.host + "/ws/nodes/" + div.dataset.liveNode + "/");
    socket.onopen = function () { status("live: receiving updates"); delay = 1000; };
    socket.onmessage = function (event) {
      var point = JSON.parse(event.data);
      if (div.dataset.rendered === "1") { extend(div, point); }
      var stale = document.querySelector("[data-live-stale]");
      if (stale) { stale.hidden = !point.stale; }
    };
    socket.onclose = function () {
      status("live: disconnected, retrying in " + Math.round(delay / 1000) + " s");
      window.setTimeout(function () { connect(div, Math.min(delay * 2, 30000)); }, delay);
    };
  }

  function start() {
    var div = document.querySelector("div.chart[data-live-node]");
    if (div && typeof WebSocket !== "undefined") { connect(div, 1000); }
  }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", start); } else { start(); }
})();
