"""GET (SSE, capability ``canEditStories``): a story's pipeline phase. Placeholder until issue #6 lands."""

from lib.auth.gates import capability
from lib.http.app import function_app
from lib.http.planned import planned
from lib.http.routing import guarded, route

app = function_app(route("/api/stories/{storyId}/events", GET=guarded(capability("canEditStories"), planned(6))))
