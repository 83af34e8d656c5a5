// One live connection per browser (see shared.py). Run as a SharedWorker, this holds the one
// stream of every open page of this browser; where a browser has no SharedWorker (Chrome on
// Android) a page loads this file itself and holds its own (ParleyLiveHub).
"use strict";

function ParleyLiveHub(endpoint) {
  var tabs = {};        // tab id -> {post, urls: [url, ...]}
  var lastIds = {};     // "tab url" -> the last event id it saw (a transcript resumes there)
  var source = null;
  var opened = "";      // the list the open stream carries
  var routes = [];      // index in that list -> {tab, url}
  var timer = null;
  var named = "";       // the open stream's name: a new one ends it first on the hub

  var latest = {};      // shared URL -> {event: the last message}, handed to a tab that opens

  function wanted() {
    var list = [];
    var carried = {};
    Object.keys(tabs).forEach(function (tab) {  // in the order the pages opened
      tabs[tab].urls.forEach(function (url) {
        if (tabs[tab].shared.indexOf(url) < 0) {
          list.push({tab: tab, url: url});
        } else if (!carried[url]) {
          // A stream every page shows alike (the navigation's badge) is carried once for all.
          carried[url] = true;
          list.push({tab: "*", url: url});
        }
      });
    });
    return list;
  }

  function deliver(route, message) {
    message.url = route.url;
    if (route.tab === "*") {
      (latest[route.url] = latest[route.url] || {})[message.e] = message;
      if (message.e === "_open" || message.e === "_notlive") {
        delete latest[route.url][message.e === "_open" ? "_notlive" : "_open"];
      }
      // One page of the browser leads (the first open): it alone acts once for all, as in
      // raising a notification.
      var lead = true;
      Object.keys(tabs).forEach(function (id) {
        if (tabs[id].urls.indexOf(route.url) >= 0) {
          tabs[id].post(Object.assign({}, message, {lead: lead}));
          lead = false;
        }
      });
      return;
    }
    var tab = tabs[route.tab];
    if (tab && tab.urls.indexOf(route.url) >= 0) {
      tab.post(message);
    }
  }

  function catchUp(tab) {
    // A page that opens while a shared stream is carried gets what it last said.
    tabs[tab].shared.forEach(function (url) {
      var last = latest[url] || {};
      Object.keys(last).forEach(function (e) {
        tabs[tab].post(Object.assign({}, last[e], {lead: false}));
      });
    });
  }

  function reopen() {
    timer = null;
    var list = wanted();
    var key = list.map(function (r) { return r.tab + " " + r.url; }).join("\n");
    if (source && key === opened) {
      return;
    }
    if (source) {
      source.close();
      source = null;
    }
    opened = key;
    routes = list;
    if (!list.length) {
      return;
    }
    var query = list.map(function (r) {
      return "u=" + encodeURIComponent(r.url) + "&l=" +
        encodeURIComponent(lastIds[r.tab + " " + r.url] || "");
    }).join("&");
    var previous = named;
    named = Math.random().toString(36).slice(2);
    query += "&name=" + named + (previous ? "&replaces=" + previous : "");
    var mine = new EventSource(endpoint + "?" + query);
    var carried = list;
    source = mine;
    mine.addEventListener("x", function (evt) {
      var m = JSON.parse(evt.data);
      var route = carried[m.s];
      if (!route) {
        return;
      }
      if (m.i) {
        lastIds[route.tab + " " + route.url] = m.i;
      }
      deliver(route, {e: m.e, i: m.i, d: m.d});
    });
    mine.onerror = function () {
      // Signed out, the hub restarting, the network: say so and open again with what each page
      // saw last (the browser's own retry would not know it).
      if (source !== mine) {
        return;
      }
      mine.close();
      source = null;
      opened = "";
      carried.forEach(function (route) { deliver(route, {e: "_notlive"}); });
      schedule(2000);
    };
  }

  function schedule(ms) {
    if (timer !== null) {
      clearTimeout(timer);
    }
    timer = setTimeout(reopen, ms);
  }

  return {
    attach: function (tab, post) {
      tabs[tab] = tabs[tab] || {post: post, urls: [], shared: []};
      tabs[tab].post = post;
    },
    handle: function (tab, msg) {
      if (msg.type === "subscribe" && tabs[tab]) {
        tabs[tab].urls = msg.urls.slice();
        tabs[tab].shared = (msg.shared || []).slice();
        catchUp(tab);
      } else if (msg.type === "drop" && tabs[tab]) {
        tabs[tab].urls = tabs[tab].urls.filter(function (u) { return u !== msg.url; });
      } else if (msg.type === "bye") {
        delete tabs[tab];
        Object.keys(lastIds).forEach(function (k) {
          if (k.indexOf(tab + " ") === 0) {
            delete lastIds[k];
          }
        });
      }
      // Pages opening together (a restored session) share one new stream.
      schedule(30);
    }
  };
}

if (typeof SharedWorkerGlobalScope !== "undefined" && self instanceof SharedWorkerGlobalScope) {
  var hub = ParleyLiveHub(new URL("../live", self.location.href).pathname);
  self.onconnect = function (evt) {
    var port = evt.ports[0];
    port.onmessage = function (e) {
      var msg = e.data || {};
      hub.attach(msg.tab, function (m) { port.postMessage(m); });
      hub.handle(msg.tab, msg);
    };
    port.start();
  };
}
