"""opsloop: a Slack chat-ops bot running an approval-gated agent loop per incident thread."""

__version__ = "0.1.0"
