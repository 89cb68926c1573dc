"""What an agent run sees: its isolated cell environment, its secrets, its sandbox."""
