"""GET (SSE, capability ``canEditStories``): a story's pipeline phase. See lib.streams.story."""

from lib.auth.gates import capability
from lib.http.app import function_app
from lib.http.routing import guarded, route
from lib.streams.story import story_events

app = function_app(route("/api/stories/{storyId}/events", GET=guarded(capability("canEditStories"), story_events)))
