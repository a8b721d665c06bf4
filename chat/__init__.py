"""Conversations and their messages (what the agent remembers, what the chat shows)."""
