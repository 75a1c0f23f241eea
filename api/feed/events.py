"""GET (SSE, session): the tenant's draft-feed watermark. See lib.streams.feed."""

from lib.auth.gates import SESSION
from lib.http.app import function_app
from lib.http.routing import guarded, route
from lib.streams.feed import feed_events

app = function_app(route("/api/feed/events", GET=guarded(SESSION, feed_events)))
