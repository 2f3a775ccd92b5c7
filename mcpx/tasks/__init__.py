"""Calls that finish later: the task store shared by /v1 task calls and resumable MCP calls."""
