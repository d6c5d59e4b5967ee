"""Wire-neutral generation: one request in, one reply pipeline out; tools, structured output, constraints."""
