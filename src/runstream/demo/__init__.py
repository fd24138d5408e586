"""The terminal demo behind ``make demo`` / ``runstream demo``."""
