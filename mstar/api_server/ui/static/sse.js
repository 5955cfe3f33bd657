// Reading a server-sent-event stream (what /v1/chat/completions sends with "stream": true).
"use strict";

// Calls onEvent(object) for each "data:" event of the response's body, in order, until
// "data: [DONE]" or the end of the body. Events are separated by a blank line.
async function readEvents(response, onEvent) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffered = "";
  for (;;) {
    const { value, done } = await reader.read();
    buffered += decoder.decode(value || new Uint8Array(), { stream: !done });
    buffered = buffered.replace(/\r\n/g, "\n");
    let end;
    while ((end = buffered.indexOf("\n\n")) >= 0) {
      const data = eventData(buffered.slice(0, end));
      buffered = buffered.slice(end + 2);
      if (data === "[DONE]") return;
      if (data !== null) onEvent(JSON.parse(data));
    }
    if (done) return;
  }
}

// The joined "data:" lines of one event (null when it has none: a comment or a keep-alive).
function eventData(block) {
  const lines = block.split("\n").filter((line) => line.startsWith("data:"));
  if (!lines.length) return null;
  return lines.map((line) => line.slice(5).replace(/^ /, "")).join("\n");
}
