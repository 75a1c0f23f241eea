// ermis-realtime.js's resuming EventSource (public/ermis-realtime.js), on npm's `eventsource`,
// against a stream the server refuses (429 past its cap): prints one JSON line per connection
// attempt, per HEAD it sends to learn why, and when a connection opens; runs until SIGTERM.
//
//   node refused_stream_client.mjs <node_modules dir> <project root> <stream url> <session token>
import { createRequire } from 'node:module';

const [modules, root, url, token] = process.argv.slice(2);
const { EventSource } = createRequire(`${modules}/`)('eventsource');
const { resumingEventSourceClass } = await import(`${root}/public/ermis-realtime.js`);
const say = (line) => process.stdout.write(`${JSON.stringify({ ...line, t: Date.now() })}\n`);

const withSession = (init = {}) => ({ ...init, headers: { ...init.headers, Cookie: `__session=${token}` } });
class SignedInEventSource extends EventSource {
  constructor(target, init) {
    super(target, {
      ...init,
      fetch: async (input, options) => {
        const response = await fetch(input, withSession(options));
        say({ attempt: response.status });
        return response;
      },
    });
  }
}
const probe = async (input, options) => {
  const response = await fetch(input, withSession(options));
  say({ head: response.status, retryAfter: response.headers.get('retry-after') });
  return response;
};
const Resuming = resumingEventSourceClass(SignedInEventSource, probe);
const source = new Resuming(url);
source.onopen = () => say({ open: true });
process.on('SIGTERM', () => {
  source.close();
  process.exit(0);
});
