"""Model clients for the core's ``Client`` protocol: OpenAI-compatible chat completions
and Anthropic Messages, with retries, error classification and the fallback chain."""
