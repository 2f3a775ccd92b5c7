// An MCP upstream on the official TypeScript SDK v2 (@modelcontextprotocol/server), used
// only by mcpx's tests: the same surface as sdk1-server.mjs (fixture-surface.mjs), served
// at 2026-07-28 and, through the SDK's own fallback, to 2025-era clients.
//
//   node sdk2-server.mjs --transport stdio
//   node sdk2-server.mjs --transport http --port 0
//
// Questions are written once, the v2 way: a tool returns inputRequired(...) and reads the
// answers from the retried request's inputResponses. At 2026-07-28 the client does the
// round trip; toward a 2025-era client the SDK's legacy shim sends real server-to-client
// requests and re-enters the handler. Over HTTP (createMcpHandler, 127.0.0.1 only, Host
// and Origin checked) it prints "fixture listening on http://127.0.0.1:PORT/mcp" on
// stderr once it accepts connections.
import http from 'node:http';
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import {
  Server,
  createMcpHandler,
  inputRequired,
  localhostAllowedHostnames,
  localhostAllowedOrigins,
  hostHeaderValidationResponse,
  originValidationResponse,
  ProtocolError,
} from '@modelcontextprotocol/server';
import { serveStdio } from '@modelcontextprotocol/server/stdio';
import { toWebRequest } from '@modelcontextprotocol/node';
import * as surface from './fixture-surface.mjs';

const INVALID_PARAMS = -32602;
const QUESTION = 'q';

/** Raised by the ask hook when the answer is not in the retried request yet. */
class NeedInput extends Error {
  constructor(result) {
    super('input required');
    this.result = result;
  }
}

function embedded(request) {
  const { method, params } = request;
  if (method === 'elicitation/create' && params.mode === 'url') {
    return inputRequired.elicitUrl({ message: params.message, url: params.url });
  }
  if (method === 'elicitation/create') return inputRequired.elicit(params);
  if (method === 'sampling/createMessage') return inputRequired.createMessage(params);
  return inputRequired.listRoots();
}

const state = { watchedVersion: 0 };
// Over HTTP every request has a server of its own: changes reach subscriptions/listen
// streams through the handler's event bus instead.
let notifier;

// requestState is signed with a key of this process, so a tampered one is refused.
const KEY = randomBytes(32);
const mac = (payload) => createHmac('sha256', KEY).update(payload).digest('base64url');
const sign = (payload) => `${Buffer.from(payload).toString('base64url')}.${mac(payload)}`;
function unsign(token) {
  const [body, tag] = String(token).split('.');
  const payload = Buffer.from(body ?? '', 'base64url').toString('utf8');
  const expected = Buffer.from(mac(payload));
  const given = Buffer.from(tag ?? '');
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) return undefined;
  return payload;
}
const verifyState = (token) => {
  if (unsign(token) === undefined) {
    throw new ProtocolError(INVALID_PARAMS, 'requestState was not minted by this server');
  }
};

/**
 * The answers to every question in requests (key -> {method, params}), or a NeedInput
 * carrying them all (and state, signed) while any is missing.
 */
function askAll(ctx, requests, payload) {
  const given = ctx.mcpReq.inputResponses ?? {};
  const answers = {};
  for (const key of Object.keys(requests)) {
    if (given[key] !== undefined) answers[key] = given[key];
  }
  if (Object.keys(answers).length === Object.keys(requests).length) return answers;
  const inputRequests = Object.fromEntries(
    Object.entries(requests).map(([key, request]) => [key, embedded(request)]),
  );
  const spec = { inputRequests };
  if (payload !== undefined) spec.requestState = sign(payload);
  throw new NeedInput(inputRequired(spec));
}
const stateOf = (ctx) => {
  const token = ctx.mcpReq.requestState();
  return token === undefined ? undefined : unsign(token);
};
function buildServer() {
  const server = new Server(
    { name: surface.SERVER_NAME, version: '2.0.0' },
    {
      capabilities: {
        tools: { listChanged: true },
        resources: { subscribe: true, listChanged: true },
        prompts: { listChanged: true },
        logging: {},
        completions: {},
      },
      requestState: { verify: verifyState },
    },
  );
  const declared = (ctx) =>
    ctx.mcpReq.envelope?.['io.modelcontextprotocol/clientCapabilities'] ??
    ctx.mcpReq.envelope?.clientCapabilities ??
    server.getClientCapabilities() ??
    {};
  const tools = surface.tools({
    ask: async (ctx, request) => {
      const answer = ctx.mcpReq.inputResponses?.[QUESTION];
      if (answer !== undefined) return answer;
      throw new NeedInput(inputRequired({ inputRequests: { [QUESTION]: embedded(request) } }));
    },
    progress: async (ctx, progress, total) => {
      const token = ctx.mcpReq._meta?.progressToken;
      if (token === undefined) return;
      await ctx.mcpReq.notify({
        method: 'notifications/progress',
        params: { progressToken: token, progress, total },
      });
    },
    log: async (ctx, level, data) => {
      await ctx.mcpReq.log(level, data, 'conformance');
    },
    announce: async (kind) => {
      if (notifier) {
        if (kind === 'tools') notifier.toolsChanged();
        else notifier.promptsChanged();
        return;
      }
      const send = kind === 'tools' ? server.sendToolListChanged : server.sendPromptListChanged;
      await Promise.resolve(send.call(server)).catch(() => {});
    },
    changeResource: async () => {
      state.watchedVersion += 1;
      if (notifier) notifier.resourceUpdated(surface.WATCHED_URI);
      else await server.sendResourceUpdated({ uri: surface.WATCHED_URI }).catch(() => {});
    },
    closeStream: async (ctx) => {
      if (ctx.http?.closeSSE) {
        await surface.sleep(50);
        ctx.http.closeSSE();
        await surface.sleep(100);
      }
    },
  });

  tools.push(
    ...surface.modernTools({
      askAll,
      stateOf,
      declared,
      checkState: (ctx, expected) => {
        if (ctx.mcpReq.requestState() !== undefined && stateOf(ctx) !== expected) {
          throw new ProtocolError(INVALID_PARAMS, 'requestState missing or not ours');
        }
      },
      log: (ctx, level, data) => ctx.mcpReq.log(level, data, 'conformance'),
    }),
  );
  server.setRequestHandler('tools/list', async () => ({ tools: tools.map((tool) => tool.listing) }));
  server.setRequestHandler('tools/call', async (request, ctx) => {
    const tool = tools.find((t) => t.listing.name === request.params.name);
    if (!tool) throw new ProtocolError(INVALID_PARAMS, `Unknown tool: ${request.params.name}`);
    try {
      return await tool.run(request.params.arguments ?? {}, ctx);
    } catch (error) {
      if (error instanceof NeedInput) return error.result;
      if (error instanceof surface.ToolFailure) {
        return { content: [surface.text(error.message)], isError: true };
      }
      throw error;
    }
  });
  server.setRequestHandler('resources/list', async () => ({ resources: surface.RESOURCES }));
  server.setRequestHandler('resources/templates/list', async () => ({
    resourceTemplates: [surface.TEMPLATE_LISTING],
  }));
  server.setRequestHandler('resources/read', async (request) => {
    const contents = surface.read(request.params.uri, state.watchedVersion);
    if (!contents) throw new ProtocolError(INVALID_PARAMS, 'Resource not found', { uri: request.params.uri });
    return { contents };
  });
  server.setRequestHandler('resources/subscribe', async () => ({}));
  server.setRequestHandler('resources/unsubscribe', async () => ({}));
  const asking = { name: 'test_input_required_result_prompt', description: 'A prompt that first asks the user for context' };
  server.setRequestHandler('prompts/list', async () => ({ prompts: [...surface.PROMPTS, asking] }));
  server.setRequestHandler('prompts/get', async (request, ctx) => {
    if (request.params.name === asking.name) {
      try {
        const answers = askAll(ctx, { user_context: surface.form('What context should the prompt use?', 'context') });
        const context = surface.accepted(answers.user_context).context ?? 'no context';
        return {
          description: asking.description,
          messages: [{ role: 'user', content: surface.text(`Answer with this context in mind: ${context}`) }],
        };
      } catch (error) {
        if (error instanceof NeedInput) return error.result;
        throw error;
      }
    }
    const prompt = surface.getPrompt(request.params.name, request.params.arguments ?? {});
    if (prompt.error) throw new ProtocolError(INVALID_PARAMS, prompt.error);
    return prompt;
  });
  server.setRequestHandler('completion/complete', async (request) => ({
    completion: surface.complete(request.params.ref, request.params.argument),
  }));
  return server;
}

async function runHttp(wanted) {
  const handler = createMcpHandler(() => buildServer());
  notifier = handler.notify;
  const listener = http.createServer(async (req, res) => {
    try {
      const request = await toWebRequest(req);
      const rejected =
        hostHeaderValidationResponse(request, localhostAllowedHostnames()) ??
        originValidationResponse(request, localhostAllowedOrigins());
      const response = rejected ?? (await handler.fetch(request));
      res.writeHead(response.status, Object.fromEntries(response.headers));
      if (response.body) {
        for await (const chunk of response.body) res.write(chunk);
      }
      res.end();
    } catch (error) {
      if (!res.headersSent) res.writeHead(500);
      res.end(String(error));
    }
  });
  listener.listen(wanted, '127.0.0.1', () => {
    process.stderr.write(`fixture listening on http://127.0.0.1:${listener.address().port}/mcp\n`);
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
  serveStdio(() => buildServer());
}
