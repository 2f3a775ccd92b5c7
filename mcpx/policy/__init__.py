"""
The guard rails between a caller and the pool: tool inputs and outputs held against
their schemas, a tool policy with confirmation, and sampling under the user's control.

Every entry point (C{/mcp} in gateway and pass-through modes, C{mcpx serve}, C{/v1/call},
C{mcpx call}, scripts) reaches upstream tools through the daemon's pool, so the policy
sits there: L{mcpx.policy.guard.GuardedPool} wraps the pool the entry points are given.
"""
