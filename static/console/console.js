/* Kalena console: draw the server-built Plotly figures embedded in the page.
 *
 * Each <div class="chart" data-figure="ID"> is drawn from <script type="application/json" id="ID">.
 * A chart with data-click-step="STEP_SECONDS" navigates to ?step=N when a point is clicked
 * (x is a date axis whose 1970-01-01 00:00 UTC is the replay's start). When every chart is drawn, <body data-charts="ready">.
 */
(function () {
  "use strict";

  function draw(div) {
    var source = document.getElementById(div.dataset.figure);
    if (!source) { return Promise.resolve(); }
    var figure = JSON.parse(source.textContent);
    var config = {responsive: true, displaylogo: false, modeBarButtonsToRemove: ["lasso2d", "select2d"]};
    return Plotly.newPlot(div, figure.data, figure.layout, config).then(function () {
      div.dataset.rendered = "1";
      var stepS = parseFloat(div.dataset.clickStep);
      if (stepS > 0) {
        div.on("plotly_click", function (event) {
          if (!event.points || !event.points.length) { return; }
          var x = event.points[0].x;
          var ms = typeof x === "number" ? x : Date.parse(String(x).replace(" ", "T") + "Z");
          if (isNaN(ms)) { return; }
          var step = Math.max(0, Math.round(ms / 1000 / stepS));
          var url = new URL(window.location.href);
          url.searchParams.delete("at");
          url.searchParams.set("step", String(step));
          url.hash = "at";
          window.location.assign(url.toString());
        });
      }
    });
  }

  function start() {
    var charts = Array.prototype.slice.call(document.querySelectorAll("div.chart[data-figure]"));
    if (typeof Plotly === "undefined") {
      charts.forEach(function (div) { div.textContent = "The chart library did not load."; });
      document.body.dataset.charts = "failed";
      return;
    }
    Promise.all(charts.map(draw)).then(function () { document.body.dataset.charts = "ready"; },
                                        function () { document.body.dataset.charts = "failed"; });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
