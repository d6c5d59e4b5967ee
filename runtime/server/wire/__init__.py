"""The four wire formats, each a parser into the one request and a writer of its frames."""
