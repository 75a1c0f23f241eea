"""GET (session): the tenant's drafts, what the feed re-fetches. See lib.streams.feed."""

from lib.auth.gates import SESSION
from lib.http.app import function_app
from lib.http.routing import guarded, route
from lib.streams.feed import feed_drafts

app = function_app(route("/api/feed", GET=guarded(SESSION, feed_drafts)))
