"""Tool definitions: base types, built-in packs and the declarative tools.yml loader.

Empty for now: the agent core's tool protocol lives in ``bot.agent.tools``; this
package grows the typed tool base, the packs and tools.yml on top of it.
"""
