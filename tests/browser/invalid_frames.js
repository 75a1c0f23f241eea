// Run in the page by test_realtime_demo.py: frames the server never sends, one of each event that
// does not match its schema, beside valid ones, through the client's EventSourceImpl option.
(async () => {
  const client = await import('/ermis-realtime.js');
  const sources = [];
  class FakeEventSource {
    constructor(url) { this.url = url; this.readyState = 0; this.listeners = {}; sources.push(this); }
    addEventListener(name, listener) { (this.listeners[name] ||= []).push(listener); }
    emit(name, data, lastEventId = '') {
      for (const listener of this.listeners[name] || []) listener({ type: name, data, lastEventId });
    }
    close() { this.readyState = 2; }
  }
  const seen = { events: [], invalid: [], refreshes: 0, feed: [], phases: [], warned: [] };
  const onInvalid = (name, data) => seen.invalid.push([name, data]);
  client.connectNotificationStream({
    EventSourceImpl: FakeEventSource, onInvalid, onEvent: (name, payload) => seen.events.push([name, payload.id]),
    onRefresh: () => { seen.refreshes += 1; },
  });
  client.connectFeedStream({ EventSourceImpl: FakeEventSource, onInvalid, onChange: (_, w) => seen.feed.push(w.draftCount) });
  client.connectStoryStream('s-1', { EventSourceImpl: FakeEventSource, onInvalid, onPhase: (p) => seen.phases.push(p.phase) });
  const [notifications, feed, story] = sources;
  const alert = { id: 'a1', ruleId: null, storyId: 's', title: 't', severity: 'critical', channel: 'in-app', deliveredAt: 'x', initial: false };
  const review = { id: 'r1', storyId: 's', headline: 'h', action: 'approved', tenantScopeId: null, changedAt: 'x', initial: false };
  const delivery = { id: 'd1', deliveryId: 'd', tenant: 't', method: 'webhook', responseCode: 500, endpoint: 'e', createdAt: 'x', initial: false };
  const note = { id: 'n1', title: 't', body: 'b', type: 'system', read: false, createdAt: 'x', initial: false };
  const send = (source, name, data) => source.emit(name, typeof data === 'string' ? data : JSON.stringify(data));
  send(notifications, 'alert.triggered', { ...alert, id: 'a0', severity: 'catastrophic' });
  send(notifications, 'alert.triggered', { ...alert, id: 'a00', channel: 'pager' });
  send(notifications, 'alert.triggered', alert);
  send(notifications, 'review.status.changed', { ...review, id: 'r0', action: 'deleted' });
  send(notifications, 'review.status.changed', review);
  send(notifications, 'delivery.failed', { ...delivery, id: 'd0', responseCode: '500' });
  send(notifications, 'delivery.failed', delivery);
  send(notifications, 'notification.created', { ...note, id: 'n0', extra: true });
  send(notifications, 'notification.created', note);
  send(notifications, 'stream.reset', { reason: 'because' });
  send(notifications, 'stream.reset', '{"reason":"expired"}');
  send(feed, 'feed.changed', { latestUpdatedAt: null, draftCount: '3' });
  send(feed, 'feed.changed', { latestUpdatedAt: null, draftCount: 3 });
  send(story, 'story.phase', { storyId: 's-1', phase: 'p0' });
  send(story, 'story.phase', { storyId: 's-1', phase: 'p1', status: 'review', updatedAt: 'x' });
  // The transport's own control frames: a bad stream.end neither reconnects nor moves the id.
  const Resuming = client.resumingEventSourceClass(FakeEventSource, async () => ({ status: 204, headers: new Headers() }));
  const originalWarn = console.warn;
  console.warn = (message) => seen.warned.push(message);
  const resuming = new Resuming('/api/feed/events');
  const before = sources.length;
  send(resuming.source, 'stream.end', 'not json');
  const afterBadEnd = sources.length;
  resuming.source.emit('stream.cursor', '{"at":1}', 'bad-id');
  const idAfterBadCursor = resuming.lastEventId;
  resuming.source.emit('stream.cursor', '{}', 'good-id');
  send(resuming.source, 'stream.end', {});
  console.warn = originalWarn;
  await new Promise((resolve) => setTimeout(resolve, 400));
  return { ...seen, reconnects: [afterBadEnd - before, sources.length - afterBadEnd], idAfterBadCursor, lastEventId: resuming.lastEventId };
});
