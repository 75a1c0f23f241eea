"""GET (capability ``canEditStories``): story detail, the story stream's polling fallback."""

from lib.auth.gates import capability
from lib.http.app import function_app
from lib.http.routing import guarded, route
from lib.streams.story import story_detail

app = function_app(route("/api/stories/{storyId}", GET=guarded(capability("canEditStories"), story_detail)))
