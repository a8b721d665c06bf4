"""Chat: conversations, routing and the chat UI."""
