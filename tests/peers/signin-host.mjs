// An MCP host on the official TypeScript client SDK v2 (@modelcontextprotocol/client)
// that can show its user a link (URL-mode elicitation), used by mcpx's host sign-in
// tests. It calls one tool through mcpx_call; when it is asked to open a URL it does what
// a person's browser would (GET it, following redirects), answers accept, and prints
// what it saw as one JSON object on stdout.
//
//   node signin-host.mjs --era 2026-07-28 --url http://127.0.0.1:PORT/mcp --server NAME --tool TOOL
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const args = process.argv.slice(2);
const option = (name, fallback) => {
  const at = args.indexOf(name);
  return at >= 0 ? args[at + 1] : fallback;
};
const era = option('--era', '2026-07-28');
const modern = era === '2026-07-28';

const client = new Client(
  { name: 'signin-ts-host', version: '2.0.0' },
  {
    capabilities: { elicitation: { form: {}, url: {} } },
    versionNegotiation: { mode: modern ? { pin: era } : 'legacy' },
    supportedProtocolVersions: modern ? undefined : [era],
  },
);
const asked = [];
const pages = [];
client.setRequestHandler('elicitation/create', async (request) => {
  asked.push(request.params);
  if (request.params.mode === 'url') {
    const page = await fetch(request.params.url, { redirect: 'follow' });
    pages.push({ status: page.status, text: await page.text() });
    return { action: 'accept' };
  }
  return { action: 'decline' };
});

const transport = new StreamableHTTPClientTransport(new URL(option('--url')));
const seen = { asked, pages };
try {
  await client.connect(transport);
  seen.protocolVersion = transport.protocolVersion ?? client.protocolVersion ?? null;
  seen.result = await client.callTool({
    name: 'mcpx_call',
    arguments: { server: option('--server'), tool: option('--tool'), arguments: {} },
  });
} catch (error) {
  seen.error = { message: String(error?.message ?? error), code: error?.code ?? null };
}
process.stdout.write(JSON.stringify(seen) + '\n');
await client.close().catch(() => {});
process.exit(0);
