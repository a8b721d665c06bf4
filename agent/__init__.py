"""The agent: LLM providers, tools, the ReAct loop and run lifecycle."""
