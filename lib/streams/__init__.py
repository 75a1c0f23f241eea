"""Server-sent-event streams (spec: realtime streams), pushed by Postgres, resumable by position.

A change flows one way through the modules:

1. a row is written; its table's triggers log it in the stream log with a position assigned
   at commit (``lib.platform.activity``, migrations 0012/0013) and notify its audience;
2. ``listener`` — the process's ``LISTEN`` connection: which audience changed, coalesced, and
   the read each waiting stream will need, started ahead of waking it;
3. ``watch`` — one stream's wait (push, safety net, polling, keep-alive, self-close) and the
   loop it reads on; ``shared_reads`` — one read per audience, shared by its streams;
4. the reads: ``notification_reads`` (the stream log by position), ``lib.platform.editorial``
   (the feed watermark and a story's draft);
5. each stream's frames: ``notifications`` (cursor = ``positions``), ``feed``, ``story``;
6. ``sse`` — frame bytes and the response that writes them.
"""
