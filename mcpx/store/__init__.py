"""Where the daemon keeps what must outlive it or be shared: SQLite alone, PostgreSQL in a fleet."""
