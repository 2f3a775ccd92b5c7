"""
Scripts: C{mcpx_exec} runs one program that makes many tool calls (docs/exec.md).

L{mcpx.scripts.worker} runs the program in a sandboxed interpreter, in a process of its
own; L{mcpx.scripts.runner} drives that process from the daemon's reactor and makes the
calls it asks for through the pool; L{mcpx.scripts.stubs} shows the tools to a model as
Python; L{mcpx.scripts.artifacts} keeps what a run writes.
"""
