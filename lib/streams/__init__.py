"""Server-sent-event streams (spec: realtime streams), resumable by position, at fleet scale.

A change flows one way through the modules:

1. a row is written; its table's trigger logs it in the stream log, position ``NULL``
   (``lib.platform.activity``, migrations 0012/0013/0016) — the writer does nothing else: no
   ``pg_notify``, no lock that another writer takes;
2. ``positioner`` — positions what has committed, in rounds that never overlap (one advisory
   lock), so within a channel nothing becomes visible below a position a reader has passed and
   no open transaction anywhere holds a stream back;
3. ``detector`` — one process of the deployment at a time (a lease) runs the rounds every few
   milliseconds and publishes which channels advanced on ``bus`` (Redis pub/sub, a channel per
   stream-log channel that only the processes whose streams watch it follow; in-process without
   Redis), at most once per window per channel (``coalescing``), with the channel's new rows
   read once and shaped (``events``, ``tails``): Postgres sees one reader however many stream
   processes run;
4. ``listener`` — the process's one subscription: which audience changed, coalesced, the rows
   told (``tails``: a change's read is answered from them, not from Postgres), and the read
   each waiting stream will need, started ahead of waking it;
5. ``watch`` — one stream's wait (push, safety net, polling, keep-alive, self-close) and the
   loop it reads on; ``shared_reads`` — one read per audience, shared by its streams;
6. the reads: ``notification_reads`` (the stream log by position), ``lib.platform.editorial``
   (the feed watermark and a story's draft);
7. each stream's frames: ``notifications`` (cursor = ``positions``), ``feed``, ``story``;
8. ``sse`` — frame bytes and the response that writes them; ``limits`` — the caps on open
   streams.

Why after commit and not at it: positions drawn in the writer's commit made every writer of a
channel wait for the others, and ``pg_notify`` made every notifying commit in the database wait
for every other (its commit-time lock), more so with each listening process. Measured in
``benchmarks/write_tax.py``; the alternatives considered are in its docstring.
"""
