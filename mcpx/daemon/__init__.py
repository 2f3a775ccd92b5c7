"""The daemon: one HTTP server, the service tree, and its assembly."""
