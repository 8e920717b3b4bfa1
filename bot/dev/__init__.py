"""The local development mode: a Slack emulator with its web page (``opsloop dev``)."""
