"""The RSS queue pipeline on Vercel Queues: topics, signed messages, publishing, consumers.

Model: a producer signs a message (``signing``) and publishes it to a topic (``publish``) —
through the ``vercel-queue`` SDK when the project is provisioned, or to the in-process
handler in local development. Vercel pushes each message to the consumer function bound to
the topic in ``vercel.json``; the consumer wrapper (``consumer``) verifies the signature,
runs the handler once per batch, retries with backoff, and on the last attempt writes the
message to the topic's ``-dlq`` sibling before acknowledging it.
"""
