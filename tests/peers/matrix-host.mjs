// A host of the cross-implementation matrix (tests/upstream/test_host_matrix.py) on the
// TypeScript SDK 1.x Client: walks every target of a plan and prints what it saw as one
// JSON document, like tests/upstream/scripts/matrix_host.py does for the Python hosts.
//
//   node matrix-host.mjs PACKAGE PLAN.json
//
// PLAN.json is {"lanes": [[target, ...], ...]}, each target as matrix_host.py has it.
// PACKAGE is the SDK to load: @modelcontextprotocol/sdk (1.32.2) or
// @modelcontextprotocol/sdk-1.13 (1.13.3, an npm alias of package.json). The host answers
// an elicitation with every property asked, lists one root and answers sampling with a fixed text.
import { readFileSync } from 'node:fs';

const [pkg, planFile] = process.argv.slice(2);
const { Client } = await import(`${pkg}/client/index.js`);
const { StdioClientTransport } = await import(`${pkg}/client/stdio.js`);
const { StreamableHTTPClientTransport } = await import(`${pkg}/client/streamableHttp.js`);
const types = await import(`${pkg}/types.js`);

const ROOT = { uri: 'file:///tmp/matrix-root', name: 'matrix root' };

// An accepted elicitation's content, as matrix_host.py's answer(): every property asked.
function answer(params) {
  const properties = params?.requestedSchema?.properties ?? { name: { type: 'string' } };
  const content = {};
  for (const [name, prop] of Object.entries(properties)) {
    const choices = prop.enum ?? (prop.oneOf ?? []).filter((c) => 'const' in c).map((c) => c.const);
    if (prop.type === 'array') {
      const items = prop.items ?? {};
      content[name] = (items.enum ?? (items.anyOf ?? []).map((c) => c.const)).slice(0, 1);
    } else if (choices.length) content[name] = choices[0];
    else if (prop.type === 'number' || prop.type === 'integer') content[name] = 1;
    else if (prop.type === 'boolean') content[name] = true;
    else if (prop.format === 'email') content[name] = 'ada@example.com';
    else content[name] = 'Ada';
  }
  return content;
}
const STEP_TIMEOUT = 30000;

function outcome(error) {
  if (error && typeof error.code === 'number') {
    // McpError prefixes its message with "MCP error <code>: "; the wire's message is the rest.
    const message = String(error.message).replace(/^MCP error -?\d+: /, '');
    return { error: { code: error.code, message } };
  }
  return { failed: String(error && error.stack ? error.message : error).slice(0, 300) };
}

function bounded(promise) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error('timed out')), STEP_TIMEOUT);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

async function step(client, s) {
  const options = { timeout: STEP_TIMEOUT };
  switch (s.op) {
    case 'tools': return (await client.listTools(undefined, options)).tools;
    case 'prompts': return (await client.listPrompts(undefined, options)).prompts;
    case 'resources': return (await client.listResources(undefined, options)).resources;
    case 'templates': return (await client.listResourceTemplates(undefined, options)).resourceTemplates;
    case 'call': return await client.callTool({ name: s.name, arguments: s.arguments }, undefined, options);
    case 'prompt': return await client.getPrompt({ name: s.name, arguments: s.arguments }, options);
    case 'read': return await client.readResource({ uri: s.uri }, options);
    default: throw new Error(`unknown op ${s.op}`);
  }
}

async function run(target) {
  const client = new Client(
    { name: 'matrix-host', version: '1.0.0' },
    { capabilities: { elicitation: {}, roots: { listChanged: true }, sampling: {} } },
  );
  if (types.ElicitRequestSchema) {
    client.setRequestHandler(types.ElicitRequestSchema, async (request) => ({ action: 'accept', content: answer(request.params) }));
  }
  client.setRequestHandler(types.ListRootsRequestSchema, async () => ({ roots: [ROOT] }));
  client.setRequestHandler(types.CreateMessageRequestSchema, async () => ({
    role: 'assistant', content: { type: 'text', text: 'sampled by the matrix host' }, model: 'matrix',
  }));
  const transport = target.url
    ? new StreamableHTTPClientTransport(new URL(target.url))
    : new StdioClientTransport({ ...target.stdio, stderr: 'ignore' });
  await bounded(client.connect(transport));
  const steps = {};
  try {
    for (const s of target.steps) {
      try {
        steps[s.key] = JSON.parse(JSON.stringify(await bounded(step(client, s))));
      } catch (error) {
        steps[s.key] = outcome(error);
      }
    }
    const version = transport.protocolVersion ?? client._negotiatedProtocolVersion ?? null;
    return { version, steps };
  } finally {
    await client.close();
  }
}

// The targets of a lane one after the other, the lanes side by side (as matrix_host.py).
const plan = JSON.parse(readFileSync(planFile, 'utf-8'));
const found = {};
await Promise.all(plan.lanes.map(async (lane) => {
  for (const target of lane) {
    try {
      found[target.id] = await run(target);
    } catch (error) {
      found[target.id] = outcome(error);
    }
  }
}));
const seen = {};
for (const target of plan.lanes.flat()) seen[target.id] = found[target.id];
// Exit once the whole document is written (a pipe takes it in 64 KB pieces); exiting is
// needed, as an SDK may leave a handle open.
process.stdout.write(JSON.stringify(seen), () => process.exit(0));
