"""The bundle on AWS (issue 12): the same ``api/`` apps and queue consumers on Lambda, SQS and
EventBridge Scheduler.

- ``http``: an ``api/`` file's ``app`` behind Mangum (API Gateway HTTP API v2 events).
- ``sqs``: an SQS event (a batch of records) run through the topic's ``QueueConsumer`` — the same
  verify, claim, handler, telemetry and dead-letter record as on Vercel — answering
  ``batchItemFailures`` and setting each retry's backoff with ``ChangeMessageVisibility``.
- ``scheduler``: an EventBridge Scheduler invocation running a cron job's scheduled GET.
- ``secrets``: the function's secrets, read by reference (``ERMIS_SECRET_ARN``, one Secrets
  Manager secret) into the environment once per cold start.
- ``entry``: the one Lambda handler every function uses; ``ERMIS_AWS_ENTRYPOINT`` names the
  ``api/`` file it serves, and the event's shape says which of the three it is.

The CloudFormation template is ``lib.ops.aws_template`` (``scripts/aws-template``).
"""
