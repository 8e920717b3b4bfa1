"""Model clients for the core's ``Client`` protocol: OpenAI-compatible chat completions
and Anthropic Messages, with retries, error classification, the fallback chain and
condensing. Not here: the loop's recovery decisions (``bot.agent``), the scripted model
servers tests talk to (``bot.emulator``); this room imports the core, the settings and
the errors only."""
