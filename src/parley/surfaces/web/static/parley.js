// A message already on the page is not appended twice. The browser's own reconnect resumes
// with Last-Event-ID, but when htmx's SSE extension opens a new stream (after the old one was
// closed) the stream starts again from the position the page was rendered at.
document.addEventListener("htmx:sseBeforeMessage", function (evt) {
  var message = evt.detail;
  if (message && message.type === "message" && message.lastEventId &&
      document.getElementById("msg-" + message.lastEventId)) {
    evt.preventDefault();
  }
});

// A live page whose stream cannot open (its session holds as many live pages as it may, or the
// hub cannot be reached) keeps what it showed when it loaded, and says so until the stream opens:
// htmx's SSE extension tries again by itself.
var NOT_LIVE = "Not live: this page shows what it showed when it loaded. It goes live again " +
  "by itself once it can (close another live page of this session, or reload).";

document.addEventListener("htmx:sseError", function (evt) {
  var live = evt.target;
  if (!live || !live.querySelector || live.querySelector(":scope > .not-live")) {
    return;
  }
  var note = document.createElement("p");
  note.className = "flash not-live";
  note.setAttribute("role", "status");
  note.textContent = NOT_LIVE;
  live.prepend(note);
});

document.addEventListener("htmx:sseOpen", function (evt) {
  var note = evt.target && evt.target.querySelector && evt.target.querySelector(":scope > .not-live");
  if (note) {
    note.remove();
  }
});
