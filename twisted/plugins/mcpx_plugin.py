from twisted.application.service import ServiceMaker

mcpx = ServiceMaker("mcpx", "mcpx.daemon.tap", "The mcpx MCP gateway daemon.", "mcpx")
