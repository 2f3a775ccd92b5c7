// An MCP host on the official TypeScript client SDK v2 (@modelcontextprotocol/client),
// used only by mcpx's interop matrix. It connects to mcpx, answers the questions an
// upstream asks through it (elicitation, sampling, roots) the way a user and a model
// would, runs the matrix's steps and prints what it saw as one JSON object on stdout.
//
//   node client2-host.mjs --era 2025-11-25 --url http://127.0.0.1:PORT/mcp
//   node client2-host.mjs --era 2026-07-28 --command /path/mcpx --args '["serve"]'
//   node client2-host.mjs --era 2026-07-28 --command … --watch mcpx://server/uri
//
// --watch makes it a resource watcher instead: it subscribes to the URI (on a
// subscriptions/listen stream at 2026-07-28, with resources/subscribe before), then
// prints one JSON line per thing it sees ({"event": "watching", "honoured": [...]},
// {"event": "updated", "uri": ...}, {"event": "ended", "how": ...}) and takes one
// command a line on stdin: "unwatch" (close the stream, or resources/unsubscribe)
// and "close" (or the end of stdin) to disconnect and exit.
//
// --era pins the revision: a 2025 one is the only version the initialize handshake
// offers; 2026-07-28 is pinned through server/discover.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';

const args = process.argv.slice(2);
const option = (name, fallback) => {
  const at = args.indexOf(name);
  return at >= 0 ? args[at + 1] : fallback;
};
const era = option('--era', '2025-11-25');
const steps = JSON.parse(option('--steps', '{}'));
const modern = era === '2026-07-28';

// A user's answer to a form: the name and address asked for, and a plausible value for
// every other required field.
function fill(schema) {
  const content = {};
  const required = new Set(schema?.required ?? []);
  for (const [name, field] of Object.entries(schema?.properties ?? {})) {
    if (name === 'username') content[name] = 'ada';
    else if (name === 'email') content[name] = 'ada@example.com';
    else if (!required.has(name)) continue;
    else if (field.enum) content[name] = field.enum[0];
    else if (field.type === 'boolean') content[name] = true;
    else if (field.type === 'integer' || field.type === 'number') content[name] = field.default ?? field.minimum ?? 1;
    else content[name] = field.default ?? 'ada';
  }
  return content;
}

export const ANSWERS = {
  sampling: { role: 'assistant', content: { type: 'text', text: 'Paris' }, model: 'interop-model' },
  roots: { roots: [{ uri: 'file:///interop', name: 'interop' }] },
};

const client = new Client(
  { name: 'interop-ts-host', version: '2.0.0' },
  {
    capabilities: { elicitation: { form: {} }, sampling: {}, roots: {} },
    versionNegotiation: { mode: modern ? { pin: era } : 'legacy' },
    supportedProtocolVersions: modern ? undefined : [era],
  },
);
const asked = [];
client.setRequestHandler('elicitation/create', async (request) => {
  asked.push(request.params);
  return { action: 'accept', content: fill(request.params.requestedSchema) };
});
client.setRequestHandler('sampling/createMessage', async (request) => {
  asked.push(request.params);
  return ANSWERS.sampling;
});
client.setRequestHandler('roots/list', async () => ANSWERS.roots);

const transport = option('--url')
  ? new StreamableHTTPClientTransport(new URL(option('--url')))
  : new StdioClientTransport({
      command: option('--command'),
      args: JSON.parse(option('--args', '[]')),
      env: { ...process.env },
      stderr: 'ignore',
    });

const say = (line) => process.stdout.write(JSON.stringify(line) + '\n');

// The watcher (--watch): it runs instead of the steps, and reports as it goes.
async function watch(uri) {
  client.setNotificationHandler('notifications/resources/updated', (notification) => {
    say({ event: 'updated', uri: notification.params.uri });
  });
  await client.connect(transport);
  let subscription = null;
  if (modern) {
    subscription = await client.listen({ resourceSubscriptions: [uri] });
    subscription.closed.then((how) => say({ event: 'ended', how }));
    say({ event: 'watching', honoured: subscription.honoredFilter.resourceSubscriptions ?? [] });
  } else {
    await client.subscribeResource({ uri });
    say({ event: 'watching', honoured: [uri] });
  }
  const { createInterface } = await import('node:readline');
  for await (const line of createInterface({ input: process.stdin })) {
    const command = line.trim();
    if (command === 'unwatch') {
      if (subscription) await subscription.close();
      else await client.unsubscribeResource({ uri });
      say({ event: 'unwatched' });
    } else if (command === 'close') {
      break;
    }
  }
}

if (option('--watch')) {
  try {
    await watch(option('--watch'));
  } catch (error) {
    say({ event: 'error', error: String(error?.message ?? error) });
  } finally {
    await client.close().catch(() => {});
    process.exit(0);
  }
}

const seen = { era, steps: {} };
const texts = (result) => (result.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('');
async function step(name, run) {
  try {
    seen.steps[name] = { ok: true, ...(await run()) };
  } catch (error) {
    seen.steps[name] = { ok: false, error: String(error?.message ?? error) };
  }
}

try {
  await client.connect(transport);
  seen.protocolVersion = transport.protocolVersion ?? client.protocolVersion ?? null;
  await step('tools', async () => ({ names: (await client.listTools()).tools.map((t) => t.name).sort() }));
  if (steps.progress) {
    await step('progress', async () => {
      const reports = [];
      const result = await client.callTool(
        { name: steps.progress, arguments: steps.arguments?.progress ?? {} },
        { onprogress: (p) => reports.push([p.progress, p.total ?? null]) },
      );
      return { reports, text: texts(result), isError: Boolean(result.isError) };
    });
  }
  for (const kind of ['elicitation', 'sampling', 'roots']) {
    if (!steps[kind]) continue;
    await step(kind, async () => {
      const result = await client.callTool({ name: steps[kind], arguments: steps.arguments?.[kind] ?? {} });
      return { text: texts(result), isError: Boolean(result.isError) };
    });
  }
  if (steps.resource) {
    await step('resource', async () => {
      const read = await client.readResource({ uri: steps.resource });
      return { text: read.contents.map((c) => c.text ?? '').join('') };
    });
  }
} catch (error) {
  seen.error = String(error?.message ?? error);
} finally {
  seen.asked = asked;
  process.stdout.write(JSON.stringify(seen) + '\n');
  await client.close().catch(() => {});
  process.exit(0);
}
