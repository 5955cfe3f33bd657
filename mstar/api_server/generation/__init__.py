"""From a validated request to engine outputs: prompt tokens, sub-requests, and the messaging to the
engine processes."""
