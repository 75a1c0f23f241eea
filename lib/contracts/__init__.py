"""Wire contracts shared by the server that emits events and the clients that read them."""
