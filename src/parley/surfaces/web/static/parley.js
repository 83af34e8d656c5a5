// parley's live pages. An element with sse-connect="<stream URL>" is live: each event of that
// stream is swapped into its descendants whose sse-swap names the event (hx-target, hx-swap as
// in htmx), and the event its sse-close names ends it. The streams of every page of this browser
// travel over one connection (live-worker.js, shared.py).
(function () {
  "use strict";

  var NOT_LIVE = "Not live: this page shows what it showed when it loaded. It goes live again " +
    "by itself once it can (close another live page of this session, or reload).";
  var script = document.currentScript;
  var tab = Math.random().toString(36).slice(2) + Date.now().toString(36);
  var roots = {};      // stream URL -> [live element]
  var shown = {};      // "url event" -> the panel HTML shown (a stream opened again resends it)
  var hub = null;

  function names(el) {
    return (el.getAttribute("sse-swap") || "").split(",").map(function (s) { return s.trim(); });
  }

  function liveRoot(el) {
    return el.closest("[sse-connect]");
  }

  function notLive(root, on) {
    var note = root.querySelector(":scope > .not-live");
    if (on && !note) {
      note = document.createElement("p");
      note.className = "flash not-live";
      note.setAttribute("role", "status");
      note.textContent = NOT_LIVE;
      root.prepend(note);
    } else if (!on && note) {
      note.remove();
    }
  }

  // Whether swapping html into target would change nothing the page shows (a stream's first
  // rendering of a panel is usually what the page loaded with).
  function unchanged(target, html, style) {
    if (style === "outerHTML") {
      var holder = document.createElement("template");
      holder.innerHTML = html.trim();
      var root = holder.content.firstElementChild;
      return !!root && holder.content.childElementCount === 1 && root.isEqualNode(target);
    }
    var copy = target.cloneNode(false);
    copy.innerHTML = html;
    return copy.isEqualNode(target);
  }

  function swapInto(root, event, html) {
    var found = [root].concat(Array.prototype.slice.call(root.querySelectorAll("[sse-swap]")));
    found.forEach(function (el) {
      if (!el.hasAttribute("sse-swap") || liveRoot(el) !== root || names(el).indexOf(event) < 0) {
        return;
      }
      var selector = el.getAttribute("hx-target");
      var target = selector ? document.querySelector(selector) : el;
      if (!target) {
        return;
      }
      var style = el.getAttribute("hx-swap") || "innerHTML";
      if (style !== "beforeend" && unchanged(target, html, style)) {
        return;  // what the page shows already: what is typed into its forms stays
      }
      var follow = event === "message" ? Follow.before(target) : null;
      var typed = style === "beforeend" ? null : Typed.keep(target);
      window.htmx.swap(target, html, {swapStyle: style, swapDelay: 0, settleDelay: 0});
      if (typed) {
        Typed.restore(typed);
      }
      if (follow) {
        Follow.after(target, follow);
      }
    });
  }

  function onEvent(m) {
    var list = roots[m.url];
    if (!list) {
      return;
    }
    if (m.e === "_notlive" || m.e === "_open") {
      list.forEach(function (root) {
        notLive(root, m.e === "_notlive");
        root.dataset.live = m.e === "_open" ? "open" : "not-live";
      });
      return;
    }
    if (m.e === "message" && m.i && document.getElementById("msg-" + m.i)) {
      return;  // a message already on the page is not appended twice
    }
    if (m.e !== "message") {
      var key = m.url + " " + m.e;
      if (shown[key] === m.d) {
        return;  // unchanged: what is typed into its forms stays
      }
      shown[key] = m.d;
    }
    list.forEach(function (root) {
      notLive(root, false);
      swapInto(root, m.e, m.d);
    });
    refold();
    if (m.e === "needs" && m.lead) {
      Needs.changed();
    }
    var closing = list.some(function (root) { return root.getAttribute("sse-close") === m.e; });
    if (closing) {
      list.forEach(function (root) { root.dataset.live = "ended"; });
      delete roots[m.url];
      hub.send({type: "drop", tab: tab, url: m.url});
    }
  }

  function connect() {
    if (window.SharedWorker && script) {
      try {
        var worker = new SharedWorker(script.dataset.worker, {name: "parley-live"});
        worker.port.onmessage = function (e) { onEvent(e.data); };
        worker.port.start();
        return {send: function (msg) { worker.port.postMessage(msg); }};
      } catch (err) {
        // fall through: this page holds its own stream
      }
    }
    var own = window.ParleyLiveHub(script.dataset.endpoint);
    return {send: function (msg) { own.attach(tab, onEvent); own.handle(tab, msg); }};
  }

  function subscribe() {
    var urls = Object.keys(roots);
    var shared = urls.filter(function (url) {
      return roots[url].some(function (root) { return root.hasAttribute("data-shared"); });
    });
    hub.send({type: "subscribe", tab: tab, urls: urls, shared: shared});
  }

  // What the reader typed into a panel's forms, and where the focus was, survive the panel
  // being drawn again (its state changed: the forms it offers may be other ones).
  var Typed = {
    keep: function (target) {
      var kept = {values: {}, focus: null};
      target.querySelectorAll("input[id], textarea[id], select[id]").forEach(function (el) {
        if (el.type === "hidden") {
          return;
        }
        kept.values[el.id] = el.type === "checkbox" ? el.checked : el.value;
      });
      var active = document.activeElement;
      if (active && active.id && target.contains(active)) {
        kept.focus = active.id;
      }
      return kept;
    },
    restore: function (kept) {
      Object.keys(kept.values).forEach(function (id) {
        var el = document.getElementById(id);
        if (!el) {
          return;
        }
        if (el.type === "checkbox") {
          el.checked = kept.values[id];
        } else {
          el.value = kept.values[id];
        }
      });
      if (kept.focus && document.getElementById(kept.focus)) {
        document.getElementById(kept.focus).focus();
      }
    }
  };

  // The transcript sticks to its newest message unless the reader scrolled up; then new ones
  // are counted on a button that goes down to them.
  var Follow = {
    atEnd: function (box) {
      return box.scrollHeight - box.scrollTop - box.clientHeight < 40;
    },
    before: function (box) {
      return {stick: Follow.atEnd(box), count: box.children.length};
    },
    after: function (box, was) {
      if (was.stick) {
        box.scrollTop = box.scrollHeight;
        return;
      }
      var added = box.children.length - was.count;
      var button = document.getElementById("new-below");
      if (button && added > 0) {
        var n = Number(button.dataset.count || "0") + added;
        button.dataset.count = String(n);
        button.textContent = n + " new ↓";
        button.hidden = false;
      }
    },
    down: function (box) {
      box.scrollTop = box.scrollHeight;
      var button = document.getElementById("new-below");
      if (button) {
        button.hidden = true;
        button.dataset.count = "0";
      }
    }
  };

  function loadOlder(box, button) {
    if (button.disabled) {
      return;
    }
    var first = box.querySelector("[data-seq]");
    if (!first) {
      return;
    }
    button.disabled = true;
    fetch(button.dataset.older + "?before=" + first.dataset.seq, {credentials: "same-origin"})
      .then(function (r) {
        if (!r.ok) {
          throw new Error("HTTP " + r.status);
        }
        var more = r.headers.get("X-Parley-Older") === "1";
        return r.text().then(function (html) { return {html: html, more: more}; });
      })
      .then(function (got) {
        var height = box.scrollHeight;
        box.insertAdjacentHTML("afterbegin", got.html);
        box.scrollTop += box.scrollHeight - height;  // the reader stays where they were
        button.disabled = false;
        button.hidden = !got.more;
      })
      .catch(function () { button.disabled = false; });
  }

  function transcript() {
    var box = document.getElementById("transcript");
    if (!box) {
      return;
    }
    box.scrollTop = box.scrollHeight;
    var below = document.getElementById("new-below");
    if (below) {
      below.addEventListener("click", function () { Follow.down(box); });
    }
    var older = document.getElementById("load-older");
    if (older) {
      older.addEventListener("click", function () { loadOlder(box, older); });
    }
    box.addEventListener("scroll", function () {
      if (Follow.atEnd(box) && below && !below.hidden) {
        Follow.down(box);
      }
      if (box.scrollTop < 20 && older && !older.hidden) {
        loadOlder(box, older);
      }
    });
  }

  // Ctrl+Enter (Cmd+Enter) sends the form being typed in.
  document.addEventListener("keydown", function (evt) {
    var el = evt.target;
    if (evt.key === "Enter" && (evt.ctrlKey || evt.metaKey) && el && el.form &&
        el.tagName === "TEXTAREA") {
      evt.preventDefault();
      el.form.requestSubmit();
    }
  });

  // A worker tree folds under a parent, and stays folded when the live tree is drawn again.
  var folded = {};

  function fold(item, on) {
    var toggle = item.querySelector(":scope > button.fold");
    item.classList.toggle("folded", on);
    if (toggle) {
      toggle.setAttribute("aria-expanded", on ? "false" : "true");
      toggle.textContent = on ? "▸" : "▾";
    }
  }

  function refold() {
    Object.keys(folded).forEach(function (id) {
      var item = document.querySelector('.tree li[data-worker="' + CSS.escape(id) + '"]');
      if (item) {
        fold(item, true);
      }
    });
  }

  document.addEventListener("click", function (evt) {
    var toggle = evt.target.closest && evt.target.closest("button.fold");
    if (toggle) {
      var item = toggle.closest("li");
      var on = !item.classList.contains("folded");
      fold(item, on);
      if (on) {
        folded[item.dataset.worker] = true;
      } else {
        delete folded[item.dataset.worker];
      }
    }
  });

  // Needs you: the badge is drawn live; with the person's leave (asked for by the button, never
  // on load) each new thing raises one browser notification, from the one page of the browser
  // that leads the shared stream (what it notified is remembered for the next page to lead).
  var Needs = {
    SEEN: "parley-needs-notified",
    items: function () {
      var badge = document.getElementById("needs");
      var raw = badge ? badge.getAttribute("data-needs") || "" : "";
      return raw ? raw.split("\n").map(function (line) {
        var bar = line.indexOf("|");
        return {key: line.slice(0, bar), text: line.slice(bar + 1)};
      }) : [];
    },
    seen: function () {
      try {
        return JSON.parse(localStorage.getItem(Needs.SEEN) || "[]");
      } catch (err) {
        return [];
      }
    },
    changed: function () {
      var items = Needs.items();
      var seen = Needs.seen();
      var keys = items.map(function (n) { return n.key; });
      var allowed = window.Notification && Notification.permission === "granted";
      if (allowed) {
        items.forEach(function (n) {
          if (seen.indexOf(n.key) < 0) {
            new Notification("parley: needs you", {body: n.text, tag: n.key});
          }
        });
      }
      // Remember what is shown now (notified or not): leave given later notifies only news.
      try {
        localStorage.setItem(Needs.SEEN, JSON.stringify(keys));
      } catch (err) {
        // storage refused: a later change may notify again, which is harmless
      }
    },
    offer: function () {
      var ask = document.querySelector("button.notify-ask");
      if (!ask || !window.Notification || Notification.permission !== "default") {
        return;
      }
      ask.hidden = false;
      ask.addEventListener("click", function () {
        Notification.requestPermission().then(function () { ask.hidden = true; });
      });
    }
  };

  function start() {
    Needs.offer();
    transcript();
    document.querySelectorAll("[sse-connect]").forEach(function (el) {
      var url = el.getAttribute("sse-connect");
      (roots[url] = roots[url] || []).push(el);
    });
    if (!Object.keys(roots).length) {
      return;
    }
    hub = connect();
    subscribe();
    window.addEventListener("pagehide", function () { hub.send({type: "bye", tab: tab}); });
    window.addEventListener("pageshow", function (evt) {
      if (evt.persisted) {
        subscribe();  // back from the back-forward cache
      }
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
