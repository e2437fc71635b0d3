"""PostgreSQL test support: a throw-away server and the fixtures built on it."""
