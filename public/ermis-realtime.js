// ErmisAI realtime client: the three streams with their polling fallbacks, dependency-free.
//
// Every connection reports one of four statuses: 'connecting' | 'streaming' | 'polling' |
// 'offline'. Unlike the system this replaces, a stream that errors shows 'polling' until it
// is open again (a live badge over a dead stream helps nobody), replayed frames are coalesced
// into one onRefresh, events are de-duplicated by id across reconnects, a planned end of a
// stream (`stream.end`) reconnects at once without leaving 'streaming', and the feed has a
// polling fallback too.
//
// Every frame, and every polled body that stands for one, is checked against its event's schema
// (ermis-realtime-events.js, generated from contracts/schemas): one that does not match — a
// version skew, a corrupting proxy — is dropped, never handed to the page, and reported once per
// event name and connection to `onInvalid(name, data)`, or to the console without one (the
// transport's own `stream.cursor` and `stream.end`: to the console, once per page).

import { isValidEvent } from './ermis-realtime-events.js';

export const NOTIFICATION_EVENTS = ['alert.triggered', 'review.status.changed', 'delivery.failed', 'notification.created'];
export const DEFAULT_FEATURE_FLAGS = Object.freeze({
  rssQueuePipeline: false,
  notificationsRestPolling: false,
  instantAlerts: true,
  alertWebhooks: true,
  aiUsageMetering: true,
});
const NOTIFICATIONS_POLL_MS = 12000;
const FEED_POLL_MS = 4000;
const STORY_FALLBACK_POLL_MS = 8000;
const REFRESH_COALESCE_MS = 250;
const STOP_FOR_GOOD = new Set([401, 403, 404]);
const CLOSED = 2; // EventSource.CLOSED: the server refused the connection; EventSource will not retry
const RETRY_FIRST_MS = 1000;
const RETRY_MAX_MS = 300000;
const SESSION_REFRESH_RETRIES = 3; // 401s tried again after a stream ended with its session's token

function parseJson(raw) {
  try {
    return JSON.parse(raw);
  } catch {
    return undefined;
  }
}

// `check(name, data)`: `data` if it is a valid `name` event, else null, reporting the first
// invalid frame of each event name.
function eventChecker(onInvalid) {
  const reported = new Set();
  return (name, data) => {
    if (isValidEvent(name, data)) return data;
    if (!reported.has(name)) {
      reported.add(name);
      if (onInvalid) onInvalid(name, data);
      else console.warn(`ermis-realtime: dropped a ${name} frame that does not match its schema`, data);
    }
    return null;
  };
}

// A poll timer that can be started and stopped many times, running `tick` now and then every `ms`.
function poller(tick, ms) {
  let timer = null;
  return {
    start() {
      if (timer === null) {
        tick();
        timer = setInterval(tick, ms);
      }
    },
    stop() {
      if (timer !== null) {
        clearInterval(timer);
        timer = null;
      }
    },
    get running() {
      return timer !== null;
    },
  };
}

// Status bookkeeping shared by the three connections.
function statusKeeper(onStatus) {
  let current = null;
  return {
    set(next) {
      if (next !== current) {
        current = next;
        if (onStatus) onStatus(next);
      }
    },
    get value() {
      return current;
    },
  };
}

// One connection per stream per browser: the tabs of an origin share each stream. One tab, elected
// per stream URL, is its leader: it holds the real EventSource and relays every frame (open,
// error, each event with its id) to the other tabs over a BroadcastChannel of the same name. When
// the leader closes or goes away, another tab is elected and reconnects from the last id any
// frame carried (`?lastEventId=`: an EventSource cannot set the header), so no event is lost; the
// clients above de-duplicate by id as they always did. `stream.cursor` frames carry ids too.
// The election is the Web Locks API where the browser has it, else a lease over BroadcastChannel
// (broadcastElection); without BroadcastChannel each tab keeps its own EventSource.
const CURSOR_EVENT = 'stream.cursor';
const RESET_EVENT = 'stream.reset';
const END_EVENT = 'stream.end';
const FEED_EVENT = 'feed.changed';
const STORY_EVENT = 'story.phase';

// The URL to resume `url` from `lastEventId`, replacing the one a resumed URL already carries.
function withLastEventId(url, lastEventId) {
  if (!lastEventId) return url;
  const [path, query = ''] = url.split('?', 2);
  const params = new URLSearchParams(query);
  params.set('lastEventId', lastEventId);
  return `${path}?${params}`;
}

// An election is `{ close() }`: `onLead()` runs when this tab becomes the leader, `onDemote()`
// when it stops being one without having closed; close() leaves the election (and the lead).
function lockElection(locks, name, onLead) {
  const abort = new AbortController();
  let release = null;
  locks
    .request(name, { signal: abort.signal }, () => {
      if (abort.signal.aborted) return undefined;
      onLead();
      if (abort.signal.aborted) return undefined; // it left while taking the lead: let the lock go
      return new Promise((resolve) => {
        release = resolve; // the lock is held until close()
      });
    })
    .catch(() => {});
  return {
    close() {
      abort.abort();
      if (release) release();
    },
  };
}

const LEASE_MS = 3000; // a leader not heard from for this long is gone (a crashed tab)
const HEARTBEAT_MS = 1000;
const CLAIM_MS = 200; // how long claims are gathered before the lowest id takes the lead

// Where Web Locks is missing: the leader says so every HEARTBEAT_MS and when a tab says hello;
// a tab that hears no leader (at start, after LEASE_MS of silence, or when the leader resigns)
// claims, waits CLAIM_MS for other claims, and leads if its id is the lowest. Two leaders (a
// throttled background tab that missed a beat) settle it the same way: the higher id steps down.
export function broadcastElection(name, onLead, onDemote) {
  const channel = new BroadcastChannel(`ermis-election:${name}`);
  const id = `${Date.now().toString(36).padStart(9, '0')}-${Math.random().toString(36).slice(2)}`;
  let leading = false;
  let heardLeaderAt = 0;
  let claims = null;
  let closed = false;
  // Every timer of the election, so close() can cancel them: one firing after close() would post
  // on the closed channel (InvalidStateError) or make a closed election lead.
  const timers = new Set();
  const later = (run, ms) => {
    const timer = setTimeout(() => {
      timers.delete(timer);
      if (!closed) run();
    }, ms);
    timers.add(timer);
  };
  const post = (message) => {
    if (!closed) channel.postMessage(message);
  };
  const tick = () => {
    if (leading) post({ type: 'leader', id });
    else if (claims === null && Date.now() - heardLeaderAt > LEASE_MS) claim();
  };
  const claim = () => {
    claims = new Set([id]);
    post({ type: 'claim', id });
    later(() => {
      const won = claims !== null && [...claims].sort()[0] === id && Date.now() - heardLeaderAt > CLAIM_MS;
      claims = null;
      if (won && !leading) {
        leading = true;
        post({ type: 'leader', id });
        onLead();
      }
    }, CLAIM_MS);
  };
  channel.onmessage = ({ data }) => {
    if (data.type === 'leader') {
      if (leading && data.id < id) {
        leading = false;
        onDemote();
      }
      if (!leading) heardLeaderAt = Date.now();
    } else if (data.type === 'claim') {
      if (leading) post({ type: 'leader', id });
      else if (claims !== null) claims.add(data.id);
    } else if (data.type === 'hello' && leading) {
      post({ type: 'leader', id });
    } else if (data.type === 'resign' && !leading) {
      heardLeaderAt = 0;
      if (claims === null) claim();
    }
  };
  const heartbeat = setInterval(tick, HEARTBEAT_MS);
  const resign = () => {
    if (leading) post({ type: 'resign', id });
    leading = false;
  };
  globalThis.addEventListener?.('pagehide', resign);
  post({ type: 'hello' });
  later(tick, CLAIM_MS); // a leader answers hello at once; silence means there is none
  return {
    close() {
      if (closed) return;
      clearInterval(heartbeat);
      globalThis.removeEventListener?.('pagehide', resign);
      resign();
      closed = true;
      for (const timer of timers) clearTimeout(timer);
      timers.clear();
      channel.onmessage = null;
      channel.close();
    },
  };
}

// A planned end is not an outage: a stream that ends as planned (its self-close, a deploy's
// shutdown) sends `stream.end` last. Left alone, an EventSource would report an error, wait the
// `retry`, and the badge would flip to 'polling' with a REST poll fired; instead this closes it
// and opens the next connection at once from the last id seen, so the status stays 'streaming'.
// Only a failed connection (error, non-200) reaches onerror.
//
// A connection the server refused (a non-200 answer: EventSource closes it and never retries)
// is not left closed for good, nor retried at once: a HEAD of the same URL — which claims no
// stream slot — says why. 204, 401, 403 and 404 stay closed (the caller keeps polling); anything
// else (429 `too_many_streams` with its Retry-After, a 5xx) is opened again after the server's
// Retry-After or a jittered backoff doubling from 1 s to 5 min, whichever is longer.
export function resumingEventSourceClass(EventSourceImpl = globalThis.EventSource, fetchImpl = globalThis.fetch) {
  if (typeof EventSourceImpl !== 'function') return EventSourceImpl;
  const check = eventChecker();
  const control = (name, handle) => (event) => {
    const data = check(name, parseJson(event.data));
    if (data) handle(event, data);
  };
  return class ResumingEventSource {
    constructor(url, init) {
      this.url = url;
      this.init = init;
      this.onopen = null;
      this.onerror = null;
      this.lastEventId = '';
      this.listeners = new Map();
      this.source = null;
      this.refusals = 0;
      this.sessionEnded = false; // the last stream ended with its session's token (`stream.end`)
      this.retryTimer = null;
      this.closed = false;
      this.connect(url);
    }

    get readyState() {
      return this.source.readyState;
    }

    connect(url) {
      this.source = new EventSourceImpl(url, this.init);
      this.source.onopen = (event) => {
        this.refusals = 0;
        this.sessionEnded = false;
        if (this.onopen) this.onopen(event);
      };
      this.source.onerror = (event) => {
        if (this.source.readyState === CLOSED) this.retryRefused();
        if (this.onerror) this.onerror(event);
      };
      this.source.addEventListener(
        CURSOR_EVENT,
        control(CURSOR_EVENT, (event) => this.track(event)),
      );
      this.source.addEventListener(
        END_EVENT,
        control(END_EVENT, (event, data) => {
          this.sessionEnded = data.reason === 'token_expired';
          this.source.close();
          this.connect(withLastEventId(this.url, this.lastEventId));
        }),
      );
      for (const [name, listeners] of this.listeners) this.attach(name, listeners);
    }

    track(event) {
      if (event.lastEventId) this.lastEventId = event.lastEventId;
    }

    attach(name, listeners) {
      this.source.addEventListener(name, (event) => {
        this.track(event);
        for (const listener of listeners) listener(event);
      });
    }

    addEventListener(name, listener) {
      if (!this.listeners.has(name)) {
        this.listeners.set(name, []);
        this.attach(name, this.listeners.get(name));
      }
      this.listeners.get(name).push(listener);
    }

    async retryRefused() {
      if (typeof fetchImpl !== 'function' || this.retryTimer !== null) return;
      let response = null;
      try {
        response = await fetchImpl(this.url, { method: 'HEAD', credentials: 'include' });
      } catch {
        // Unreachable: retry after the backoff.
      }
      if (this.closed || (response && (response.status === 204 || this.refusedForGood(response.status)))) return;
      const backoff = Math.min(RETRY_MAX_MS, RETRY_FIRST_MS * 2 ** this.refusals) * (0.5 + Math.random() / 2);
      const retryAfter = response ? Number(response.headers.get('retry-after')) * 1000 || 0 : 0;
      this.refusals += 1;
      this.retryTimer = setTimeout(() => {
        this.retryTimer = null;
        if (!this.closed) this.connect(withLastEventId(this.url, this.lastEventId));
      }, Math.max(backoff, retryAfter));
    }

    // A 401 just after the session's token expired is the page's auth not having refreshed the
    // cookie yet (Clerk refreshes it before expiry, but a throttled tab may be late): tried
    // again a few times before the stream is left to its polling fallback.
    refusedForGood(status) {
      if (status === 401 && this.sessionEnded && this.refusals < SESSION_REFRESH_RETRIES) return false;
      return STOP_FOR_GOOD.has(status);
    }

    close() {
      this.closed = true;
      if (this.retryTimer !== null) clearTimeout(this.retryTimer);
      this.source.close();
    }
  };
}

// Who is signed in, for the shared streams: the `sub` of the `__session` cookie's token (Clerk's
// frontend keeps it readable by the page), or null when there is none the page can read.
export function sessionKeyFromCookie() {
  const cookie = (globalThis.document?.cookie || '').split('; ').find((item) => item.startsWith('__session='));
  const payload = cookie?.slice('__session='.length).split('.')[1];
  if (!payload) return null;
  try {
    const claims = JSON.parse(atob(payload.replace(/-/g, '+').replace(/_/g, '/')));
    return typeof claims.sub === 'string' ? claims.sub : null;
  } catch {
    return null;
  }
}

const SESSION_CHECK_MS = 1000;

// The shared streams belong to one user: the election and the relay are named after the signed-in
// user (`sessionKey()`), so tabs of two users never share one. A tab checks the user before it
// relays or delivers any frame, and every SESSION_CHECK_MS: when it changed (a sign-out and
// another user's sign-in, in any tab: the cookie is the browser's), it drops the stream it led,
// leaves the old election and joins the new user's, from no last id. A user the page cannot
// read keeps the stream to its own tab.
export function sharedEventSourceClass(EventSourceImpl = resumingEventSourceClass(), sessionKey = sessionKeyFromCookie) {
  const locks = globalThis.navigator && globalThis.navigator.locks;
  if (typeof EventSourceImpl !== 'function' || typeof BroadcastChannel !== 'function') {
    return EventSourceImpl;
  }
  const elect = locks
    ? (name, onLead) => lockElection(locks, name, onLead)
    : (name, onLead, onDemote) => broadcastElection(name, onLead, onDemote);
  const tabOnly = `tab-${Math.random().toString(36).slice(2)}`; // no readable user: no sharing
  return class SharedEventSource {
    constructor(url) {
      this.url = url;
      this.onopen = null;
      this.onerror = null;
      this.lastEventId = '';
      this.listeners = new Map();
      this.source = null;
      this.closed = false;
      this.join(sessionKey());
      this.sessionTimer = setInterval(() => this.sameUser(), SESSION_CHECK_MS);
      this.addEventListener(CURSOR_EVENT, () => {});
    }

    join(user) {
      this.user = user;
      const name = `ermis-sse:${user ?? tabOnly}:${this.url}`;
      this.channel = new BroadcastChannel(name);
      this.channel.onmessage = (message) => this.fromChannel(message.data);
      this.election = elect(
        name,
        () => this.lead(),
        () => this.stepDown(),
      );
      this.channel.postMessage({ type: 'hello' });
    }

    leave() {
      this.stepDown();
      this.election.close();
      this.channel.close();
    }

    // Whether the signed-in user is still the one this tab joined as; if not, it moves over.
    sameUser() {
      const user = sessionKey();
      if (user === this.user) return true;
      this.leave();
      this.lastEventId = '';
      this.join(user);
      return false;
    }

    get isLeader() {
      return this.source !== null;
    }

    addEventListener(name, listener) {
      if (!this.listeners.has(name)) {
        this.listeners.set(name, []);
        if (this.source) this.relay(name);
      }
      this.listeners.get(name).push(listener);
    }

    lead() {
      if (this.closed || !this.sameUser()) return; // closed, or elected for a user this tab no longer has
      this.source = new EventSourceImpl(withLastEventId(this.url, this.lastEventId), { withCredentials: true });
      this.source.onopen = () => this.publish({ type: 'open' });
      this.source.onerror = () => this.publish({ type: 'error' });
      for (const name of this.listeners.keys()) this.relay(name);
    }

    stepDown() {
      if (this.source) this.source.close();
      this.source = null;
    }

    relay(name) {
      const source = this.source;
      source.addEventListener(name, (event) => {
        if (source === this.source && this.sameUser()) {
          this.publish({ type: 'event', name, data: event.data, lastEventId: event.lastEventId });
        }
      });
    }

    publish(message) {
      if (this.closed) return; // a frame of a source closing with us: its channel is closed
      this.deliver(message);
      this.channel.postMessage(message);
    }

    fromChannel(message) {
      if (!this.sameUser()) return; // sent to the user this tab no longer has
      if (message.type === 'hello') {
        // A new tab: tell it whether the stream is open now.
        if (this.source && this.source.readyState === 1) this.channel.postMessage({ type: 'open' });
        return;
      }
      if (!this.isLeader) this.deliver(message);
    }

    deliver(message) {
      if (message.type === 'open') {
        if (this.onopen) this.onopen(new Event('open'));
      } else if (message.type === 'error') {
        if (this.onerror) this.onerror(new Event('error'));
      } else if (message.type === 'event') {
        if (message.lastEventId) this.lastEventId = message.lastEventId;
        for (const listener of this.listeners.get(message.name) || []) {
          listener({ type: message.name, data: message.data, lastEventId: message.lastEventId });
        }
      }
    }

    close() {
      if (this.closed) return;
      this.closed = true;
      clearInterval(this.sessionTimer);
      this.leave();
    }
  };
}

const SharedEventSource = sharedEventSourceClass();

// Opens the EventSource: open stops the polling fallback, an error starts it (unless the
// connection was stopped for good).
function openStream(EventSourceImpl, url, polling, status) {
  status.set('connecting');
  const source = new EventSourceImpl(url, { withCredentials: true });
  source.onopen = () => {
    polling.stop();
    status.set('streaming');
  };
  source.onerror = () => {
    if (status.value === 'offline') return;
    polling.start();
    status.set('polling');
  };
  return source;
}

// What every connect function returns.
function handle(status, polling, closeSource, extraClose = () => {}) {
  return {
    get status() {
      return status.value;
    },
    close() {
      polling.stop();
      extraClose();
      closeSource();
      status.set('offline');
    },
  };
}

export function connectNotificationStream(options = {}) {
  const {
    url = '/api/notifications/events',
    events = NOTIFICATION_EVENTS,
    restPolling = false,
    enabled = true,
    pollIntervalMs = NOTIFICATIONS_POLL_MS,
    skipInitialReplay = false,
    onEvent,
    onRefresh,
    onStatus,
    onInvalid,
    EventSourceImpl = SharedEventSource,
  } = options;
  const status = statusKeeper(onStatus);
  const check = eventChecker(onInvalid);
  const seen = new Set();
  let refreshTimer = null;
  const refreshSoon = () => {
    // One refresh per burst: a replay of 40 frames costs one re-fetch, not 40.
    if (!onRefresh || refreshTimer !== null) return;
    refreshTimer = setTimeout(() => {
      refreshTimer = null;
      onRefresh();
    }, REFRESH_COALESCE_MS);
  };
  const polling = poller(() => onRefresh && onRefresh(), pollIntervalMs);
  let source = null;

  if (!enabled) {
    status.set('offline');
  } else if (restPolling || typeof EventSourceImpl !== 'function') {
    status.set('polling');
    polling.start();
  } else {
    source = openStream(EventSourceImpl, url, polling, status);
    for (const name of events) {
      source.addEventListener(name, (message) => {
        const payload = check(name, parseJson(message.data));
        if (!payload) return;
        const key = `${name}:${payload.id}`;
        if (seen.has(key)) return;
        seen.add(key);
        if (payload.initial && skipInitialReplay) return;
        if (onEvent) onEvent(name, payload);
        refreshSoon();
      });
    }
    // The server could not resume from our last id (history gone, another database, an id from
    // before an upgrade): what we hold may have gaps, so re-read the snapshot the poll reads.
    source.addEventListener(RESET_EVENT, (message) => check(RESET_EVENT, parseJson(message.data)) && onRefresh && onRefresh());
  }
  return handle(
    status,
    polling,
    () => source && source.close(),
    () => refreshTimer !== null && clearTimeout(refreshTimer),
  );
}

export function connectFeedStream(options = {}) {
  const {
    url = '/api/feed/events',
    fallbackUrl = '/api/feed',
    pollIntervalMs = FEED_POLL_MS,
    onChange,
    onStatus,
    onInvalid,
    EventSourceImpl = SharedEventSource,
  } = options;
  const status = statusKeeper(onStatus);
  const check = eventChecker(onInvalid);
  // The feed changed when its position moved (every committed write moves it, in commit order:
  // the frame's id, /api/feed's `position`) or its watermark did; the watermark alone stays put
  // when a write that started earlier commits later.
  let lastVersion = null;
  const moved = (position, watermark) => {
    const version = `${position}|${JSON.stringify(watermark)}`;
    if (version === lastVersion) return false;
    lastVersion = version;
    return true;
  };
  const polling = poller(async () => {
    try {
      const response = await fetch(fallbackUrl, { credentials: 'same-origin' });
      if (STOP_FOR_GOOD.has(response.status)) {
        polling.stop();
        status.set('offline');
        return;
      }
      const body = response.ok ? await response.json() : null;
      if (body && body.watermark === null) {
        // No tenant scope (the stream's 204): nothing will ever change here, so stop asking.
        polling.stop();
        status.set('offline');
        return;
      }
      const watermark = body && check(FEED_EVENT, body.watermark);
      if (watermark && moved(body.position, watermark) && onChange) onChange('UPDATE', watermark);
    } catch {
      // Offline for now; the next tick tries again.
    }
  }, pollIntervalMs);
  let source = null;
  if (typeof EventSourceImpl !== 'function') {
    status.set('polling');
    polling.start();
  } else {
    // A failed stream, or a 204 (no tenant scope: EventSource stops for good), falls back to polling.
    source = openStream(EventSourceImpl, url, polling, status);
    source.addEventListener(FEED_EVENT, (message) => {
      const watermark = check(FEED_EVENT, parseJson(message.data));
      if (watermark && moved(message.lastEventId, watermark) && onChange) onChange('UPDATE', watermark);
    });
  }
  return handle(status, polling, () => source && source.close());
}

export function connectStoryStream(storyId, options = {}) {
  const {
    fallbackPollMs = STORY_FALLBACK_POLL_MS,
    onPhase,
    onStatus,
    onInvalid,
    EventSourceImpl = SharedEventSource,
  } = options;
  const check = eventChecker(onInvalid);
  const base = `/api/stories/${encodeURIComponent(storyId)}`;
  const status = statusKeeper(onStatus);
  let lastPhase = null;
  let source = null;
  const deliver = (phase) => {
    const key = phase ? `${phase.phase}|${phase.status}` : null;
    if (phase && key !== lastPhase) {
      lastPhase = key;
      if (onPhase) onPhase(phase);
    }
  };
  const polling = poller(async () => {
    try {
      const response = await fetch(base, { credentials: 'same-origin' });
      if (STOP_FOR_GOOD.has(response.status)) {
        // Gone, or not ours: stop for good, stream and poll alike.
        polling.stop();
        if (source) source.close();
        status.set('offline');
        return;
      }
      if (response.ok) deliver(check(STORY_EVENT, (await response.json()).phase));
    } catch {
      // Offline for now; the next tick tries again.
    }
  }, fallbackPollMs);
  if (typeof EventSourceImpl !== 'function') {
    status.set('polling');
    polling.start();
  } else {
    source = openStream(EventSourceImpl, `${base}/events`, polling, status);
    source.addEventListener(STORY_EVENT, (message) => deliver(check(STORY_EVENT, parseJson(message.data))));
  }
  return handle(status, polling, () => source && source.close());
}

export async function loadTenantFeatureFlags(url = '/api/feature-flags') {
  try {
    const response = await fetch(url, { credentials: 'same-origin' });
    if (!response.ok) return { ...DEFAULT_FEATURE_FLAGS };
    const body = await response.json();
    return { ...DEFAULT_FEATURE_FLAGS, ...(body && body.flags) };
  } catch {
    // As the spec's client does: keep the defaults when flags cannot be read.
    return { ...DEFAULT_FEATURE_FLAGS };
  }
}
