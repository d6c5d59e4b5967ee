"""Which models are resident, loading them, and what they can do."""
