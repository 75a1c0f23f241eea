"""What crosses a language boundary, written once; everything else is derived from it and checked
against it.

- ``json_stringify``: ECMAScript's ``JSON.stringify``, the queue signature's byte form.
- ``queue_messages``: the message each queue topic carries, and the dead letter.
- ``stream_events``: the data of each server-sent event, the streams' control events included.
- ``schemas``: the committed JSON Schemas (``contracts/schemas``) generated from those models.
"""
