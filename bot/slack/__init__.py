"""The Slack edge: the bolt app, Web API client use and, for tests and dev mode, a fake Slack."""
