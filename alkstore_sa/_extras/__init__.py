"""Optional parts: the embedded server, instrumentation hooks, migrate(), the health server."""
