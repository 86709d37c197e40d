/* The Nexus graph viewer: makes Graphviz's SVG of a graph interactive.
 *
 * The page holds the SVG (ids: nodes n<k>, echoes c<k> -- the copies of a constant drawn
 * next to a use --, edges e<k>, blocks cluster_<k>) and a JSON index of what each id
 * stands for (nexus/viz/html.py).  Everything here is plain DOM work on that SVG: pan and
 * zoom through the viewBox, collapse a block under a cover, search by name or op, a
 * panel for the clicked node, and the path of one run.  Nothing is fetched.
 */
(function () {
  "use strict";
  var t0 = performance.now();
  var data = JSON.parse(document.getElementById("nexus-data").textContent);
  var canvas = document.getElementById("canvas");
  var svg = canvas.querySelector("svg");
  var root = svg.querySelector("g.graph") || svg;
  var NS = "http://www.w3.org/2000/svg";
  var $ = function (id) { return document.getElementById(id); };

  // --- the index: edges by node, echoes by node, the block of each drawn id -----------
  var incident = {};   // node or echo id -> edge ids
  var echoesOf = {};   // node id -> its echo ids
  var blockOf = {};    // node or echo id -> cluster id
  Object.keys(data.edges).forEach(function (eid) {
    var e = data.edges[eid];
    (incident[e[0]] = incident[e[0]] || []).push(eid);
    (incident[e[1]] = incident[e[1]] || []).push(eid);
  });
  Object.keys(data.echoes).forEach(function (cid) {
    var nid = data.echoes[cid];
    (echoesOf[nid] = echoesOf[nid] || []).push(cid);
  });
  Object.keys(data.blocks).forEach(function (bid) {
    data.blocks[bid].nodes.forEach(function (id) { blockOf[id] = bid; });
  });
  function original(id) { return data.echoes[id] || id; }
  function label(id) {
    var n = data.nodes[id];
    return n ? "%" + n.name + " (" + n.op + ")" : id;
  }

  // --- pan and zoom: the viewBox is the camera ------------------------------------
  var vb = svg.viewBox.baseVal;
  var full = { x: vb.x, y: vb.y, w: vb.width, h: vb.height };
  var view = { x: full.x, y: full.y, w: full.w, h: full.h };
  svg.removeAttribute("width");
  svg.removeAttribute("height");
  function setView() { svg.setAttribute("viewBox", view.x + " " + view.y + " " + view.w + " " + view.h); }
  function toUser(clientX, clientY) {
    var p = svg.createSVGPoint();
    p.x = clientX; p.y = clientY;
    return p.matrixTransform(svg.getScreenCTM().inverse());
  }
  function fit() { view = { x: full.x, y: full.y, w: full.w, h: full.h }; setView(); }
  canvas.addEventListener("wheel", function (ev) {
    ev.preventDefault();
    var p = toUser(ev.clientX, ev.clientY);
    var f = Math.exp(ev.deltaY * 0.0015);
    view.x = p.x - (p.x - view.x) * f; view.y = p.y - (p.y - view.y) * f;
    view.w *= f; view.h *= f;
    setView();
  }, { passive: false });
  var drag = null;
  canvas.addEventListener("mousedown", function (ev) {
    if (ev.button !== 0) return;
    drag = { start: toUser(ev.clientX, ev.clientY), x: ev.clientX, y: ev.clientY, moved: false };
  });
  window.addEventListener("mousemove", function (ev) {
    if (!drag) return;
    if (Math.abs(ev.clientX - drag.x) + Math.abs(ev.clientY - drag.y) > 3) {
      drag.moved = true;
      canvas.classList.add("dragging");
    }
    if (!drag.moved) return;
    var p = toUser(ev.clientX, ev.clientY);
    view.x -= p.x - drag.start.x; view.y -= p.y - drag.start.y;
    setView();
  });
  var justDragged = false;
  window.addEventListener("mouseup", function () {
    justDragged = !!(drag && drag.moved);
    drag = null;
    canvas.classList.remove("dragging");
  });
  // Bring an element into the middle of the view (zooming in if the view is far out).
  function reveal(el) {
    var r = el.getBoundingClientRect();
    var c = toUser(r.left + r.width / 2, r.top + r.height / 2);
    var w = Math.min(view.w, Math.max(700, full.w / 4)), h = view.h * w / view.w;
    view = { x: c.x - w / 2, y: c.y - h / 2, w: w, h: h };
    setView();
  }

  // --- the panel of a node ---------------------------------------------------------
  var selected = [];
  function clearSelection() {
    selected.forEach(function (el) { el.classList.remove("selected", "linked"); });
    selected = [];
  }
  function mark(id, cls) {
    var el = $(id);
    if (el) { el.classList.add(cls); selected.push(el); }
  }
  function link(id) {
    var a = document.createElement("a");
    a.textContent = label(id);
    a.addEventListener("click", function () { select(id, true); });
    return a;
  }
  function row(table, key, value) {
    var tr = table.insertRow(), k = tr.insertCell(), v = tr.insertCell();
    k.textContent = key;
    if (typeof value === "string") { v.textContent = value; v.className = "mono"; } else { v.appendChild(value); }
  }
  function links(ids) {
    var span = document.createElement("span");
    ids.forEach(function (id, i) {
      if (i) span.appendChild(document.createTextNode(", "));
      span.appendChild(id ? link(id) : document.createTextNode("(not drawn)"));
    });
    return span;
  }
  function select(id, center) {
    var nid = original(id), n = data.nodes[nid];
    if (!n) return;
    clearSelection();
    [nid].concat(echoesOf[nid] || []).forEach(function (x) {
      mark(x, "selected");
      (incident[x] || []).forEach(function (e) { mark(e, "linked"); });
    });
    var box = $("details");
    box.textContent = "";
    var h = document.createElement("h2");
    h.textContent = n.op + " %" + n.name;
    box.appendChild(h);
    var t = document.createElement("table");
    row(t, "op", n.op);
    row(t, "name", "%" + n.name);
    row(t, "block", n.block ? "^" + data.blocks[n.block].name : "-");
    row(t, "type", n.type);
    row(t, "shape", n.shape !== undefined ? n.shape : "-");
    row(t, "device", n.device || "(default)");
    if (n.engine) row(t, "engine", n.engine);
    row(t, "source", n.loc || "(unknown)");
    n.attrs.forEach(function (kv) { row(t, "attr " + kv[0], kv[1]); });
    if (n.ins.length) row(t, "inputs", links(n.ins));
    if (n.deps) row(t, "after", links(n.deps));
    if (n.users) row(t, "users", links(n.users));
    if (data.run) row(t, "ran", String(data.run.nodes[nid] || 0) + " times");
    box.appendChild(t);
    if (center) {
      expand(blockOf[nid]);
      var el = $(nid);
      if (el) reveal(el);
    }
  }

  // --- collapse and expand blocks -------------------------------------------------
  var covers = {};
  function inside(eid, bid) {
    var e = data.edges[eid];
    return blockOf[e[0]] === bid && blockOf[e[1]] === bid;
  }
  function hideBlock(bid, hide) {
    data.blocks[bid].nodes.forEach(function (id) {
      var el = $(id);
      if (el) el.classList.toggle("gone", hide);
      (incident[id] || []).forEach(function (eid) {
        if (inside(eid, bid)) { var e = $(eid); if (e) e.classList.toggle("gone", hide); }
      });
    });
  }
  // Points of a Graphviz path from its "d" (no layout is needed, unlike getBBox, which
  // would make the browser lay out the whole SVG again after every change of a class).
  function points(el) {
    var p = el && el.querySelector("path, polygon");
    if (!p) return [];
    var nums = (p.getAttribute("d") || p.getAttribute("points") || "").match(/-?\d+(\.\d+)?/g) || [];
    var out = [];
    for (var i = 0; i + 1 < nums.length; i += 2) out.push([+nums[i], +nums[i + 1]]);
    return out;
  }
  function box(el) {
    var pts = points(el);
    if (!pts.length) return null;
    var x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
    pts.forEach(function (p) {
      x0 = Math.min(x0, p[0]); x1 = Math.max(x1, p[0]); y0 = Math.min(y0, p[1]); y1 = Math.max(y1, p[1]);
    });
    return { x: x0, y: y0, width: x1 - x0, height: y1 - y0 };
  }
  function collapse(bid) {
    if (!bid || covers[bid]) return;
    var b = box($(bid)), blk = data.blocks[bid];
    if (!b) return;
    hideBlock(bid, true);
    var g = document.createElementNS(NS, "g"), r = document.createElementNS(NS, "rect");
    g.setAttribute("class", "cover");  // the rect is styled, not the group (its text would be stroked)
    g.setAttribute("data-block", bid);
    r.setAttribute("x", b.x); r.setAttribute("y", b.y);
    r.setAttribute("width", b.width); r.setAttribute("height", b.height);
    r.setAttribute("rx", 6); r.setAttribute("class", "cover");
    var k = blk.nodes.length, tip = document.createElementNS(NS, "title");
    tip.textContent = "click to expand ^" + blk.name;
    g.appendChild(tip);
    g.appendChild(r);
    ["^" + blk.name, k + " node" + (k === 1 ? "" : "s")].forEach(function (line, i) {
      var tx = document.createElementNS(NS, "text");
      tx.setAttribute("x", b.x + b.width / 2);
      tx.setAttribute("y", b.y + Math.min(b.height / 2, 18) + 14 * i);
      tx.setAttribute("text-anchor", "middle");
      tx.setAttribute("class", "cover-text");
      tx.textContent = line;
      g.appendChild(tx);
    });
    root.appendChild(g);  // last: above the edges that pass through the block
    covers[bid] = g;
  }
  function expand(bid) {
    if (!bid || !covers[bid]) return;
    covers[bid].remove();
    delete covers[bid];
    hideBlock(bid, false);
  }
  function toggle(bid) { if (covers[bid]) expand(bid); else collapse(bid); }

  // --- search ---------------------------------------------------------------------
  var matches = [], matched = [], at = -1;
  function search(q) {
    matched.forEach(function (el) { el.classList.remove("match"); });
    matched = []; matches = []; at = -1;
    var list = $("results");
    list.textContent = "";
    q = q.trim().toLowerCase().replace(/^%/, "");
    if (!q) { svg.classList.remove("searching"); $("hits").textContent = ""; return; }
    Object.keys(data.nodes).forEach(function (id) {
      var n = data.nodes[id];
      if (n.name.toLowerCase().indexOf(q) >= 0 || n.op.toLowerCase().indexOf(q) >= 0) matches.push(id);
    });
    matches.forEach(function (id) {
      [id].concat(echoesOf[id] || []).forEach(function (x) {
        var el = $(x);
        if (el) { el.classList.add("match"); matched.push(el); }
      });
    });
    svg.classList.add("searching");
    $("hits").textContent = matches.length + " match" + (matches.length === 1 ? "" : "es");
    matches.slice(0, 200).forEach(function (id) {
      var li = document.createElement("li");
      li.appendChild(link(id));
      list.appendChild(li);
    });
  }
  var timer = null;
  $("search").addEventListener("input", function (ev) {
    clearTimeout(timer);
    timer = setTimeout(function () { search(ev.target.value); }, 120);
  });
  $("search").addEventListener("keydown", function (ev) {
    if (ev.key === "Enter") {
      clearTimeout(timer);
      if (!matches.length) search(ev.target.value);
      if (matches.length) { at = (at + 1) % matches.length; select(matches[at], true); }
    } else if (ev.key === "Escape") {
      ev.target.value = "";
      search("");
    }
  });

  // --- the path of one run --------------------------------------------------------
  function countLabel(parent, x, y, text) {
    var t = document.createElementNS(NS, "text");
    t.setAttribute("x", x); t.setAttribute("y", y);
    t.setAttribute("class", "count");
    t.textContent = text;
    parent.appendChild(t);
  }
  function showRun(run) {
    $("run-toggle").hidden = false;
    var info = $("run-info");
    var p = document.createElement("p");
    p.textContent = "Path of one run (python backend)" + (run.result !== null ? ": result " + run.result : "");
    info.appendChild(p);
    if (run.error) {
      var e = document.createElement("p");
      e.className = "error";
      e.textContent = "The run stopped: " + run.error;
      info.appendChild(e);
    }
    Object.keys(run.nodes).forEach(function (id) { var el = $(id); if (el) el.classList.add("hot"); });
    Object.keys(run.edges).forEach(function (eid) {
      var el = $(eid);
      if (!el) return;
      el.classList.add("hot");
      if (data.edges[eid][2] !== "flow") return;  // counts on the control edges between blocks
      // The count goes on the middle of the curve: Graphviz draws cubic Bezier pieces.
      var pts = points(el), pieces = Math.floor((pts.length - 1) / 3);
      if (!pieces) return;
      var i = 3 * Math.floor(pieces / 2), x = 0, y = 0, w = [1, 3, 3, 1];
      for (var j = 0; j < 4; j++) { x += w[j] * pts[i + j][0] / 8; y += w[j] * pts[i + j][1] / 8; }
      countLabel(el, x + 5, y + 4, "\u00d7" + run.edges[eid]);
    });
    Object.keys(run.blocks).forEach(function (bid) {
      var cl = $(bid), t = cl && cl.querySelector("text");
      if (!t) return;
      var span = document.createElementNS(NS, "tspan");
      span.setAttribute("class", "count");
      span.textContent = " \u00d7" + run.blocks[bid];
      t.appendChild(span);
    });
    svg.classList.add("showrun");
    $("show-run").addEventListener("change", function (ev) {
      svg.classList.toggle("showrun", ev.target.checked);
      svg.classList.toggle("hidecounts", !ev.target.checked);
    });
  }

  // --- wiring ---------------------------------------------------------------------
  svg.addEventListener("click", function (ev) {
    if (justDragged) { justDragged = false; return; }
    var cover = ev.target.closest("g.cover");
    if (cover) { expand(cover.getAttribute("data-block")); return; }
    var node = ev.target.closest("g.node");
    if (node) { select(node.id, false); return; }
    var cl = ev.target.closest("g.cluster"), tx = ev.target.closest("text");
    if (cl && tx && tx.parentNode === cl) toggle(cl.id);
  });
  $("collapse-all").addEventListener("click", function () { Object.keys(data.blocks).forEach(collapse); });
  $("expand-all").addEventListener("click", function () { Object.keys(data.blocks).forEach(expand); });
  $("fit").addEventListener("click", fit);
  if (data.run) showRun(data.run);
  // A tall graph opens at its top, its width filling the canvas (the browser then paints
  // only what is in view); "fit" shows all of it.
  var cw = canvas.clientWidth || 800, ch = canvas.clientHeight || 600;
  var scale = Math.min(cw / full.w, 1.5);
  if (full.h * scale > ch * 1.5) view = { x: full.x, y: full.y, w: cw / scale, h: ch / scale };
  setView();

  // For tests and for a person curious about speed: when the page became usable.
  window.nexusViewer = {
    data: data, select: select, collapse: collapse, expand: expand, search: search,
    timings: { scriptMs: performance.now() - t0, readyAt: performance.now() }
  };
  requestAnimationFrame(function () {
    requestAnimationFrame(function () { window.nexusViewer.timings.paintedAt = performance.now(); });
  });
})();
