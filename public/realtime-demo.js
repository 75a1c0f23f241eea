import {
  connectFeedStream,
  connectNotificationStream,
  connectStoryStream,
  loadTenantFeatureFlags,
} from './ermis-realtime.js';

const params = new URLSearchParams(location.search);
const $ = (id) => document.querySelector(`[data-testid="${id}"]`);
const badge = (id) => (status) => {
  $(id).textContent = status;
  $(id).dataset.status = status;
};
// ?feedStream=broken stands in for a browser whose EventSource cannot connect.
class BrokenEventSource {
  constructor() {
    setTimeout(() => this.onerror && this.onerror(new Event('error')), 10);
  }
  addEventListener() {}
  close() {}
}

// Without a session every stream and poll answers 401: say how to sign in.
fetch('/api/feature-flags', { credentials: 'same-origin' }).then((response) => {
  $('signed-out').hidden = response.status !== 401;
});
const flags = await loadTenantFeatureFlags();
let refreshes = 0;
connectNotificationStream({
  restPolling: flags.notificationsRestPolling,
  pollIntervalMs: Number(params.get('pollMs') || 12000),
  onStatus: badge('notifications-status'),
  onEvent: (name, payload) => {
    const item = document.createElement('li');
    item.dataset.eventId = payload.id;
    item.textContent = `${name}: ${payload.title || payload.headline || payload.endpoint || payload.id}${payload.initial ? ' (replay)' : ''}`;
    $('notifications-events').prepend(item);
  },
  onRefresh: () => {
    refreshes += 1;
    $('notifications-refreshes').textContent = String(refreshes);
  },
});
connectFeedStream({
  pollIntervalMs: Number(params.get('pollMs') || 4000),
  EventSourceImpl: params.get('feedStream') === 'broken' ? BrokenEventSource : undefined, // undefined: shared across tabs
  onStatus: badge('feed-status'),
  onChange: (_kind, watermark) => {
    $('feed-count').textContent = String(watermark.draftCount);
    $('feed-latest').textContent = watermark.latestUpdatedAt || '–';
  },
});
// The change path, on demand: a connection of this tab's own, read off the wire (an
// EventSource shows neither the response's headers nor which position a frame is at).
const KIND_SLOT = { 'alert.triggered': 2, 'review.status.changed': 3, 'delivery.failed': 4, 'notification.created': 5 };
const INSERTED_AT = {
  'alert.triggered': 'deliveredAt', 'review.status.changed': 'changedAt',
  'delivery.failed': 'createdAt', 'notification.created': 'createdAt',
};
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
function showArrival(kind, position, process, latencyMs) {
  const row = document.createElement('tr');
  for (const [text, numeric] of [[kind, false], [position, true], [process, false], [`${latencyMs} ms`, true]]) {
    const cell = document.createElement('td');
    cell.textContent = text;
    if (numeric) cell.className = 'number';
    row.append(cell);
  }
  $('change-path-events').prepend(row);
}
async function watchTheWire() {
  let lastId = '';
  for (;;) {
    try {
      const resume = lastId ? `?lastEventId=${encodeURIComponent(lastId)}` : '';
      const response = await fetch(`/api/notifications/events${resume}`, { credentials: 'same-origin' });
      if (response.status !== 200 || !response.body) {
        await sleep(5000);
        continue;
      }
      const process = response.headers.get('x-ermis-process') || '?';
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffered = '';
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        const arrived = Date.now();
        const frames = (buffered + value).split('\r\n\r\n');
        buffered = frames.pop();
        for (const frame of frames) {
          const fields = {};
          for (const line of frame.split('\r\n')) {
            const colon = line.indexOf(': ');
            if (colon > 0) fields[line.slice(0, colon)] = line.slice(colon + 2);
          }
          if (fields.id) lastId = fields.id;
          const slot = KIND_SLOT[fields.event];
          if (!slot || !fields.data) continue;
          const payload = JSON.parse(fields.data);
          if (payload.initial) continue;
          const inserted = Date.parse(payload[INSERTED_AT[fields.event]]);
          showArrival(fields.event, fields.id.split('.')[slot], process, Math.max(0, arrived - inserted));
        }
      }
    } catch {
      await sleep(3000);
    }
  }
}
$('watch-wire').addEventListener('click', () => {
  $('watch-wire').disabled = true;
  $('watch-wire').textContent = 'Watching';
  watchTheWire();
});
// The dev server's own route (absent when deployed: 404): one alert for the session's tenant.
fetch('/__dev/test-alert', { credentials: 'same-origin' }).then((response) => {
  $('write-test-alert').hidden = response.status !== 405;
});
$('write-test-alert').addEventListener('click', () =>
  fetch('/__dev/test-alert', { method: 'POST', credentials: 'same-origin' }),
);
const storyId = params.get('story');
if (storyId) {
  $('story-id').textContent = storyId;
  connectStoryStream(storyId, {
    fallbackPollMs: Number(params.get('pollMs') || 8000),
    onStatus: badge('story-status'),
    onPhase: (phase) => {
      $('story-phase').textContent = `${phase.phase} / ${phase.status}`;
    },
  });
}
