"""Hearth's own routes: health and stats, models, the store, hardware, remotes, quantize jobs."""
