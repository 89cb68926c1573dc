"""The model gateway: one process per daemon between every cell's agent and its model.

It forwards OpenAI- and Anthropic-style calls to the upstream an attempt's grant names, keeps
the upstream's key out of the cell, refuses calls past the attempt's spend caps, and journals
every call (``calls.jsonl``) for the daemon to ingest by offsets. See docs/gateway.md.
"""
