"""``opsloop eval``: incident cases run through the bot's own agent, tools and approval
rules against real backends with a fault injected, graded deterministically.

- ``case.py``: the case format (``cases/NAME/case.yml``), loaded and checked;
- ``backends/``: the backends a case starts on loopback (one per kind, shared by the
  cases of a run) and the faults each injects and heals;
- ``runner.py``: one case, end to end: the opening through the same jobs side the bot
  runs (Redis, ``agent.run``, tools, limits, the approver policy), the cards answered as
  the case scripts them, what happened observed;
- ``checks.py``: the deterministic checks over what happened;
- ``judge.py``: the optional rubric score from a second model;
- ``report.py``: the JSON report, the table, the comparison of two reports.

``cases/`` ships with the package; ``--cases DIR`` runs a team's own.
"""
