// An MCP upstream on the official TypeScript SDK 1.x (@modelcontextprotocol/sdk), used only
// by mcpx's tests: the conformance suite's server scenarios for the handshake revisions
// (2024-11-05 .. 2025-11-25), plus the interop matrix's tools (a burst of progress, a
// url-mode elicitation, a roots listing, a resource that changes).
//
//   node sdk1-server.mjs --transport stdio
//   node sdk1-server.mjs --transport http --port 0
//
// Over HTTP it serves stateful Streamable HTTP sessions (one Server per Mcp-Session-Id,
// as StreamableHTTPServerTransport is meant to be used) on 127.0.0.1 only, and prints
// "fixture listening on http://127.0.0.1:PORT/mcp" on stderr once it accepts connections.
// Questions to the client go on the stream of the request that asked (extra.sendRequest).
import http from 'node:http';
import { randomUUID } from 'node:crypto';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import {
  CallToolRequestSchema,
  CompleteRequestSchema,
  CreateMessageResultSchema,
  ElicitResultSchema,
  GetPromptRequestSchema,
  ListPromptsRequestSchema,
  ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListRootsResultSchema,
  ListToolsRequestSchema,
  McpError,
  ReadResourceRequestSchema,
  SetLevelRequestSchema,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';
import * as surface from './fixture-surface.mjs';

const INVALID_PARAMS = -32602;

function buildServer(state) {
  const server = new Server(
    { name: surface.SERVER_NAME, version: '1.0.0' },
    {
      capabilities: {
        tools: { listChanged: true },
        resources: { subscribe: true, listChanged: true },
        prompts: { listChanged: true },
        logging: {},
        completions: {},
      },
    },
  );
  let logLevel = 'debug';
  const subscribed = new Set();

  const ask = async (extra, request) => {
    const schema = {
      'elicitation/create': ElicitResultSchema,
      'sampling/createMessage': CreateMessageResultSchema,
      'roots/list': ListRootsResultSchema,
    }[request.method];
    // As the SDK's own elicitInput does, a form says it is one (2025-11-25 spelling).
    const sent =
      request.method === 'elicitation/create' && request.params.mode === undefined
        ? { ...request, params: { mode: 'form', ...request.params } }
        : request;
    return extra.sendRequest(sent, schema);
  };

  const tools = surface.tools({
    ask,
    clientCapabilities: () => server.getClientCapabilities() ?? {},
    progress: async (extra, progress, total) => {
      const token = extra._meta?.progressToken;
      if (token === undefined) return;
      await extra.sendNotification({
        method: 'notifications/progress',
        params: { progressToken: token, progress, total },
      });
    },
    log: async (extra, level, data) => {
      if (surface.LOG_LEVELS.indexOf(level) < surface.LOG_LEVELS.indexOf(logLevel)) return;
      await extra.sendNotification({
        method: 'notifications/message',
        params: { level, logger: 'conformance', data },
      });
    },
    announce: async (kind) => {
      const send = kind === 'tools' ? server.sendToolListChanged : server.sendPromptListChanged;
      await Promise.resolve(send.call(server)).catch(() => {});
    },
    changeResource: async () => {
      state.watchedVersion += 1;
      for (const uri of subscribed) {
        if (uri === surface.WATCHED_URI) await server.sendResourceUpdated({ uri });
      }
    },
    watchedText: () => surface.watchedText(state.watchedVersion),
    closeStream: async (extra) => {
      if (extra.closeSSEStream) {
        await surface.sleep(50);
        extra.closeSSEStream();
        await surface.sleep(100);
      }
    },
  });

  // The 2026-07-28 diagnostic tools too: a 2025-era server asks with real requests, and
  // mcpx turns them into input_required results for a 2026-07-28 client.
  tools.push(
    ...surface.modernTools({
      askAll: async (extra, requests) => {
        const answers = {};
        for (const [key, request] of Object.entries(requests)) answers[key] = await ask(extra, request);
        return answers;
      },
      stateOf: () => undefined,
      checkState: () => {},
      declared: () => server.getClientCapabilities() ?? {},
      log: async (extra, level, data) => {
        if (surface.LOG_LEVELS.indexOf(level) < surface.LOG_LEVELS.indexOf(logLevel)) return;
        await extra.sendNotification({
          method: 'notifications/message',
          params: { level, logger: 'conformance', data },
        });
      },
    }),
  );

  server.setRequestHandler(ListToolsRequestSchema, async () => ({
    tools: tools.map((tool) => tool.listing),
  }));
  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const tool = tools.find((t) => t.listing.name === request.params.name);
    if (!tool) throw new McpError(INVALID_PARAMS, `Unknown tool: ${request.params.name}`);
    try {
      return await tool.run(request.params.arguments ?? {}, extra);
    } catch (error) {
      if (error instanceof surface.ToolFailure) {
        return { content: [surface.text(error.message)], isError: true };
      }
      throw error;
    }
  });
  server.setRequestHandler(ListResourcesRequestSchema, async () => ({
    resources: surface.RESOURCES,
  }));
  server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({
    resourceTemplates: [surface.TEMPLATE_LISTING],
  }));
  server.setRequestHandler(ReadResourceRequestSchema, async (request) => {
    const contents = surface.read(request.params.uri, state.watchedVersion);
    if (!contents) {
      throw new McpError(INVALID_PARAMS, 'Resource not found', { uri: request.params.uri });
    }
    return { contents };
  });
  server.setRequestHandler(SubscribeRequestSchema, async (request) => {
    subscribed.add(request.params.uri);
    return {};
  });
  server.setRequestHandler(UnsubscribeRequestSchema, async (request) => {
    subscribed.delete(request.params.uri);
    return {};
  });
  server.setRequestHandler(SetLevelRequestSchema, async (request) => {
    logLevel = request.params.level;
    return {};
  });
  server.setRequestHandler(ListPromptsRequestSchema, async () => ({ prompts: surface.PROMPTS }));
  server.setRequestHandler(GetPromptRequestSchema, async (request) => {
    const prompt = surface.getPrompt(request.params.name, request.params.arguments ?? {});
    if (prompt.error) throw new McpError(INVALID_PARAMS, prompt.error);
    return prompt;
  });
  server.setRequestHandler(CompleteRequestSchema, async (request) => ({
    completion: surface.complete(request.params.ref, request.params.argument),
  }));
  return server;
}

async function runStdio() {
  const server = buildServer({ watchedVersion: 0 });
  await server.connect(new StdioServerTransport());
}

const LOOPBACK_HOSTS = (port) => ['127.0.0.1', 'localhost', '[::1]'].map((host) => `${host}:${port}`);
const LOOPBACK_ORIGINS = (port) => LOOPBACK_HOSTS(port).map((host) => `http://${host}`);

async function runHttp(wanted) {
  let port = wanted;
  const sessions = new Map();
  const state = { watchedVersion: 0 };
  const listener = http.createServer(async (req, res) => {
    if (!req.url.startsWith('/mcp')) {
      res.writeHead(404).end();
      return;
    }
    let body;
    if (req.method === 'POST') {
      const chunks = [];
      for await (const chunk of req) chunks.push(chunk);
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch {
        res.writeHead(400, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error' } }));
        return;
      }
    }
    const sessionId = req.headers['mcp-session-id'];
    let transport = sessionId ? sessions.get(sessionId) : undefined;
    if (!transport) {
      const opening = req.method === 'POST' && !Array.isArray(body) && body?.method === 'initialize';
      if (!opening) {
        res.writeHead(sessionId ? 404 : 400, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32000, message: sessionId ? 'Session not found' : 'Bad Request: no session' } }));
        return;
      }
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        eventStore: new surface.MemoryEventStore(),
        retryInterval: 500,
        enableDnsRebindingProtection: true,
        allowedHosts: LOOPBACK_HOSTS(port),
        allowedOrigins: LOOPBACK_ORIGINS(port),
        onsessioninitialized: (id) => sessions.set(id, transport),
      });
      transport.onclose = () => {
        if (transport.sessionId) sessions.delete(transport.sessionId);
      };
      await buildServer(state).connect(transport);
    }
    await transport.handleRequest(req, res, body);
  });
  listener.listen(port, '127.0.0.1', () => {
    const bound = listener.address().port;
    port = bound;
    process.stderr.write(`fixture listening on http://127.0.0.1:${bound}/mcp\n`);
  });
}

const args = process.argv.slice(2);
const option = (name, fallback) => {
  const at = args.indexOf(name);
  return at >= 0 ? args[at + 1] : fallback;
};
if (option('--transport', 'stdio') === 'http') {
  await runHttp(Number(option('--port', '0')));
} else {
  await runStdio();
}
