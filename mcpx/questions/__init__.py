"""Questions upstream servers ask: the broker, its durable store, and the relay to callers."""
