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
