-- Every message the queue consumers dead-lettered, so operators can see them (the -dlq topics
-- are write-only on the queue service).
CREATE TABLE queue_dead_letters (
    id bigserial PRIMARY KEY,
    topic text NOT NULL,
    original_message_id text NOT NULL,
    delivery_count int NOT NULL,
    error_message text NOT NULL,
    payload jsonb,
    failed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX queue_dead_letters_topic_failed_idx ON queue_dead_letters (topic, failed_at DESC);
