"""Request handlers for the routes that are neither crons, queue consumers nor streams."""
