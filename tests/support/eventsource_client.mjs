// A standard EventSource client (npm's `eventsource`, pinned by scripts/_ensure_node_tools.sh) on
// the notification stream, its connection cut at random: each response's body is passed through
// until a random number of bytes — often in the middle of a frame — and then fails as a network
// change would, so the client reconnects on its own, with its own Last-Event-ID, after the
// server's `retry`. Prints one JSON line per event it dispatches, and `{"open": n}` per connection.
//
//   node eventsource_client.mjs <node_modules dir> <stream url> <session token> <max bytes per connection>
import { createRequire } from 'node:module';

const [modules, url, token, maxBytes] = process.argv.slice(2);
const { EventSource } = createRequire(`${modules}/`)('eventsource');
const EVENTS = ['alert.triggered', 'review.status.changed', 'delivery.failed', 'notification.created', 'stream.reset'];

// The body of `response`, failing after `budget` bytes (the bytes before the cut are delivered).
function cutAfter(response, budget) {
  const reader = response.body.getReader();
  let left = budget;
  const body = new ReadableStream({
    async pull(controller) {
      const { done, value } = await reader.read();
      if (done) return controller.close();
      if (value.length < left) {
        left -= value.length;
        return controller.enqueue(value);
      }
      controller.enqueue(value.slice(0, left));
      await reader.cancel();
      controller.error(new TypeError('network changed'));
    },
    cancel: () => reader.cancel(),
  });
  return new Response(body, { status: response.status, headers: response.headers });
}

let connections = 0;
const source = new EventSource(url, {
  fetch: async (input, init) => {
    const response = await fetch(input, { ...init, headers: { ...init.headers, Cookie: `__session=${token}` } });
    connections += 1;
    process.stdout.write(`${JSON.stringify({ open: connections, lastEventId: init.headers['Last-Event-ID'] ?? null, t: Date.now() })}\n`);
    return cutAfter(response, Math.floor(Math.random() * Number(maxBytes)));
  },
});
for (const name of EVENTS) {
  source.addEventListener(name, (event) => {
    const payload = JSON.parse(event.data);
    process.stdout.write(`${JSON.stringify({ event: name, id: payload.id ?? null, initial: payload.initial ?? null })}\n`);
  });
}
source.addEventListener('error', (event) => process.stdout.write(`${JSON.stringify({ error: String(event.message), t: Date.now() })}\n`));
process.on('SIGTERM', () => {
  source.close();
  process.exit(0);
});
