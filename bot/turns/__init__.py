"""One place that runs a thread's turn: lease, job state, AgentConfig, resume, ending."""
