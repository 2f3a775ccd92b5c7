// An MCP host on the official TypeScript SDK 1.x (@modelcontextprotocol/sdk) that drives
// 2025-11-25 tasks, used only by mcpx's fleet suite. It opens one legacy session (the
// initialize handshake at 2025-11-25) to --url with a bearer token, then takes one JSON
// command a line on stdin and prints one JSON line on stdout for each:
//
//   {"op": "start", "name": TOOL, "arguments": {...}, "ttl": MS}  -> {"ok": CreateTaskResult}
//   {"op": "get" | "result" | "cancel", "taskId": ID}                -> {"ok": result}
//   {"op": "list"}                                                   -> {"ok": every task, all pages}
//   {"op": "session"}                                                -> {"ok": its Mcp-Session-Id}
//
// A request the server refuses prints {"error": {"code", "message", "data"}}. Each request
// goes through the SDK's own Client.request, validated by the SDK's result schemas, and
// carries _meta["dev.mcpx/session"] = --session when given, so hosts on several daemons
// count as one caller. The end of stdin closes the session and exits.
//
//   node tasks1-host.mjs --url http://127.0.0.1:PORT/mcp --token TOKEN --session NAME
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  CallToolResultSchema,
  CancelTaskResultSchema,
  CreateTaskResultSchema,
  GetTaskResultSchema,
  ListTasksResultSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { createInterface } from 'node:readline';

const args = process.argv.slice(2);
const option = (name, fallback) => {
  const at = args.indexOf(name);
  return at >= 0 ? args[at + 1] : fallback;
};
const session = option('--session');
const meta = session === undefined ? {} : { _meta: { 'dev.mcpx/session': session } };

const client = new Client({ name: 'fleet-tasks-host', version: '1.0.0' }, { capabilities: {} });
const transport = new StreamableHTTPClientTransport(new URL(option('--url')), {
  requestInit: { headers: { Authorization: `Bearer ${option('--token')}` } },
});
await client.connect(transport);

// A task's call may take long: the SDK's default of 60 s per request is not the test's.
const options = { timeout: 600_000 };

async function run(command) {
  switch (command.op) {
    case 'start':
      return client.request(
        {
          method: 'tools/call',
          params: {
            name: command.name,
            arguments: command.arguments,
            task: { ttl: command.ttl ?? 60_000 },
            ...meta,
          },
        },
        CreateTaskResultSchema,
        options,
      );
    case 'get':
      return client.request({ method: 'tasks/get', params: { taskId: command.taskId, ...meta } }, GetTaskResultSchema, options);
    case 'result':
      return client.request(
        { method: 'tasks/result', params: { taskId: command.taskId, ...meta } },
        CallToolResultSchema,
        options,
      );
    case 'cancel':
      return client.request(
        { method: 'tasks/cancel', params: { taskId: command.taskId, ...meta } },
        CancelTaskResultSchema,
        options,
      );
    case 'list': {
      const tasks = [];
      let cursor;
      do {
        const page = await client.request(
          { method: 'tasks/list', params: { ...(cursor ? { cursor } : {}), ...meta } },
          ListTasksResultSchema,
          options,
        );
        tasks.push(...page.tasks);
        cursor = page.nextCursor;
      } while (cursor);
      return { tasks };
    }
    case 'session':
      return transport.sessionId;
    default:
      throw new Error(`unknown op ${command.op}`);
  }
}

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  let out;
  try {
    out = { ok: await run(JSON.parse(line)) };
  } catch (error) {
    out = { error: { code: error.code ?? null, message: String(error.message ?? error), data: error.data ?? null } };
  }
  process.stdout.write(JSON.stringify(out) + '\n');
}
await client.close();
