"""Team knowledge: the runbooks folder as searchable sections, and the incident timeline's
values. Files in, text out: nothing here talks to Redis, Slack or the network."""
