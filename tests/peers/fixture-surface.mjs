// What the TypeScript upstream fixtures offer, independent of the SDK generation serving
// it: the conformance suite's server scenarios (names and payloads as its descriptions
// give them) and the interop matrix's own tools. Each tool's run(args, extra) reaches its
// SDK only through the hooks the fixture passes in (ask, progress, log, ...).
import { deflateSync, crc32 } from 'node:zlib';

export const SERVER_NAME = 'mcp-conformance-test-server';
export const LOG_LEVELS = ['debug', 'info', 'notice', 'warning', 'error', 'critical', 'alert', 'emergency'];
export const WATCHED_URI = 'test://watched-resource';
const STATIC_TEXT_URI = 'test://static-text';
const STATIC_BINARY_URI = 'test://static-binary';
const TEMPLATE_PREFIX = 'test://template/';
const TEMPLATE_SUFFIX = '/data';

export class ToolFailure extends Error {}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
export const text = (value) => ({ type: 'text', text: value });

function png() {
  const chunk = (kind, data) => {
    const length = Buffer.alloc(4);
    length.writeUInt32BE(data.length);
    const crc = Buffer.alloc(4);
    crc.writeUInt32BE(crc32(Buffer.concat([Buffer.from(kind), data])) >>> 0);
    return Buffer.concat([length, Buffer.from(kind), data, crc]);
  };
  const header = Buffer.from([0, 0, 0, 1, 0, 0, 0, 1, 8, 2, 0, 0, 0]);
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk('IHDR', header),
    chunk('IDAT', deflateSync(Buffer.from([0, 0xff, 0, 0]))),
    chunk('IEND', Buffer.alloc(0)),
  ]).toString('base64');
}

function wav() {
  const samples = Buffer.alloc(80, 0x80);
  const header = Buffer.alloc(44);
  header.write('RIFF', 0);
  header.writeUInt32LE(36 + samples.length, 4);
  header.write('WAVEfmt ', 8);
  header.writeUInt32LE(16, 16);
  header.writeUInt16LE(1, 20);
  header.writeUInt16LE(1, 22);
  header.writeUInt32LE(8000, 24);
  header.writeUInt32LE(8000, 28);
  header.writeUInt16LE(1, 32);
  header.writeUInt16LE(8, 34);
  header.write('data', 36);
  header.writeUInt32LE(samples.length, 40);
  return Buffer.concat([header, samples]).toString('base64');
}

const PNG = png();
const WAV = wav();
const image = () => ({ type: 'image', data: PNG, mimeType: 'image/png' });
const embedded = (uri, mimeType, body) => ({ type: 'resource', resource: { uri, mimeType, text: body } });
const noArguments = { type: 'object', properties: {} };
const stringForm = (...names) => ({
  type: 'object',
  properties: Object.fromEntries(names.map((name) => [name, { type: 'string' }])),
  required: names,
});

const CONTACT_FORM = {
  type: 'object',
  properties: {
    username: { type: 'string', description: "User's response" },
    email: { type: 'string', description: "User's email address" },
  },
  required: ['username', 'email'],
};
const DEFAULTS_FORM = {
  type: 'object',
  properties: {
    name: { type: 'string', description: 'User name', default: 'John Doe' },
    age: { type: 'integer', description: 'User age', default: 30 },
    score: { type: 'number', description: 'User score', default: 95.5 },
    status: { type: 'string', description: 'User status', enum: ['active', 'inactive', 'pending'], default: 'active' },
    verified: { type: 'boolean', description: 'Verification status', default: true },
  },
  required: [],
};
const ENUMS_FORM = {
  type: 'object',
  properties: {
    untitledSingle: { type: 'string', enum: ['option1', 'option2', 'option3'] },
    titledSingle: {
      type: 'string',
      oneOf: [
        { const: 'value1', title: 'First Option' },
        { const: 'value2', title: 'Second Option' },
        { const: 'value3', title: 'Third Option' },
      ],
    },
    legacyEnum: { type: 'string', enum: ['opt1', 'opt2', 'opt3'], enumNames: ['Option One', 'Option Two', 'Option Three'] },
    untitledMulti: { type: 'array', items: { type: 'string', enum: ['option1', 'option2', 'option3'] } },
    titledMulti: {
      type: 'array',
      items: {
        anyOf: [
          { const: 'value1', title: 'First Choice' },
          { const: 'value2', title: 'Second Choice' },
          { const: 'value3', title: 'Third Choice' },
        ],
      },
    },
  },
  required: [],
};
const JSON_SCHEMA_2020_12 = {
  $schema: 'https://json-schema.org/draft/2020-12/schema',
  type: 'object',
  $defs: {
    address: {
      $anchor: 'addressDef',
      type: 'object',
      properties: { street: { type: 'string' }, city: { type: 'string' } },
    },
  },
  properties: {
    name: { type: 'string' },
    address: { $ref: '#/$defs/address' },
    contactMethod: { type: 'string', enum: ['phone', 'email'] },
    phone: { type: 'string' },
    email: { type: 'string' },
  },
  allOf: [{ anyOf: [{ required: ['phone'] }, { required: ['email'] }] }],
  if: { properties: { contactMethod: { const: 'phone' } }, required: ['contactMethod'] },
  then: { required: ['phone'] },
  else: { required: ['email'] },
  additionalProperties: false,
};

const elicitation = (message, requestedSchema) => ({
  method: 'elicitation/create',
  params: { message, requestedSchema },
});
const sampling = (prompt, maxTokens) => ({
  method: 'sampling/createMessage',
  params: { messages: [{ role: 'user', content: text(prompt) }], maxTokens },
});
const describe = (answer) => {
  const content = answer.content ?? {};
  const sorted = Object.fromEntries(Object.keys(content).sort().map((key) => [key, content[key]]));
  return `action=${answer.action}, content=${JSON.stringify(sorted)}`;
};
const sampledText = (answer) => {
  const parts = Array.isArray(answer.content) ? answer.content : [answer.content];
  return parts.filter((part) => part?.type === 'text').map((part) => part.text).join('');
};

export const watchedText = (version) =>
  version === 0 ? 'This is the content of the watched resource.' : `This is the content of the watched resource, version ${version}.`;

/** The tools, each { listing, run(args, extra) }, built over the fixture's hooks. */
export function tools(hooks) {
  const result = (...content) => ({ content });
  // A fixture whose SDK checks the client's capabilities itself passes no
  // clientCapabilities hook.
  const needs = (extra, capability) => {
    if (hooks.clientCapabilities && !hooks.clientCapabilities(extra)[capability]) {
      throw new ToolFailure(`The client did not declare the capability: ${capability}`);
    }
  };
  const tool = (name, description, run, inputSchema = noArguments) => ({
    listing: { name, description, inputSchema },
    run,
  });
  return [
    tool('test_simple_text', 'Returns simple text content', async () =>
      result(text('This is a simple text response for testing.'))),
    tool('test_image_content', 'Returns a 1x1 red PNG image', async () => result(image())),
    tool('test_audio_content', 'Returns a short WAV audio clip', async () =>
      result({ type: 'audio', data: WAV, mimeType: 'audio/wav' })),
    tool('test_embedded_resource', 'Returns an embedded text resource', async () =>
      result(embedded('test://embedded-resource', 'text/plain', 'This is an embedded resource content.'))),
    tool('test_multiple_content_types', 'Returns text, image and resource', async () =>
      result(
        text('Multiple content types test:'),
        image(),
        embedded('test://mixed-content-resource', 'application/json', '{"test":"data","value":123}'),
      )),
    tool('test_tool_with_logging', 'Sends three info log messages', async (args, extra) => {
      for (const [index, line] of ['Tool execution started', 'Tool processing data', 'Tool execution completed'].entries()) {
        if (index) await sleep(50);
        await hooks.log(extra, 'info', line);
      }
      return result(text('Tool with logging executed successfully'));
    }),
    // Three reports within a few milliseconds, as most servers send them: a relay that
    // coalesces by time loses the middle one.
    tool('test_tool_with_progress', 'Reports progress 0, 50, 100 of 100 in quick succession', async (args, extra) => {
      for (const done of [0, 50, 100]) await hooks.progress(extra, done, 100);
      return result(text('Tool with progress executed successfully'));
    }),
    tool(
      'progress_burst',
      'Reports progress 1..count of count back to back, then answers',
      async (args, extra) => {
        const count = Number(args.count ?? 3);
        for (let done = 1; done <= count; done += 1) await hooks.progress(extra, done, count);
        return result(text(`Reported ${count} times`));
      },
      { type: 'object', properties: { count: { type: 'integer', minimum: 1, maximum: 100000 } } },
    ),
    tool('test_error_handling', 'Always returns an error result', async () => {
      throw new ToolFailure('This tool intentionally returns an error for testing');
    }),
    tool('test_reconnection', 'Closes its SSE stream before answering', async (args, extra) => {
      await hooks.closeStream(extra);
      return result(text('Reconnection test completed successfully'));
    }),
    tool(
      'test_sampling',
      "Asks the client's model to answer a prompt",
      async (args, extra) => {
        needs(extra, 'sampling');
        const answer = await hooks.ask(extra, sampling(String(args.prompt ?? ''), 100));
        return result(text(`LLM response: ${sampledText(answer)}`));
      },
      stringForm('prompt'),
    ),
    tool(
      'test_elicitation',
      'Asks the user for a username and an email address',
      async (args, extra) => {
        needs(extra, 'elicitation');
        const message = String(args.message ?? 'Please provide your information');
        const answer = await hooks.ask(extra, elicitation(message, CONTACT_FORM));
        return result(text(`User response: ${describe(answer)}`));
      },
      stringForm('message'),
    ),
    tool('test_elicitation_sep1034_defaults', 'Elicits a form whose fields all carry defaults (SEP-1034)', async (args, extra) => {
      needs(extra, 'elicitation');
      const answer = await hooks.ask(extra, elicitation('Please review and update the form fields with defaults', DEFAULTS_FORM));
      return result(text(`Elicitation completed: ${describe(answer)}`));
    }),
    tool('test_elicitation_sep1330_enums', 'Elicits a form with every enum variant (SEP-1330)', async (args, extra) => {
      needs(extra, 'elicitation');
      const answer = await hooks.ask(extra, elicitation('Please choose from each kind of enum field', ENUMS_FORM));
      return result(text(`Elicitation completed: ${describe(answer)}`));
    }),
    tool('elicit_url', 'Asks the user to visit a URL (url-mode elicitation, 2025-11-25)', async (args, extra) => {
      if (hooks.clientCapabilities && !hooks.clientCapabilities(extra).elicitation?.url) {
        throw new ToolFailure('The client did not declare url-mode elicitation');
      }
      const answer = await hooks.ask(extra, {
        method: 'elicitation/create',
        params: {
          mode: 'url',
          message: 'Please sign in',
          url: 'https://example.com/sign-in',
          elicitationId: 'sign-in-1',
        },
      });
      return result(text(`URL elicitation: action=${answer.action}`));
    }),
    tool('list_roots', "Lists the client's roots", async (args, extra) => {
      needs(extra, 'roots');
      const answer = await hooks.ask(extra, { method: 'roots/list', params: {} });
      return result(text(`Client roots: ${answer.roots.map((root) => root.uri).join(', ')}`));
    }),
    tool('change_watched_resource', 'Changes test://watched-resource and tells its subscribers', async () => {
      await hooks.changeResource();
      return result(text('Changed the watched resource'));
    }),
    // The list stays the same: the announcement only lets a client's listen stream (or a
    // 2025-era notification handler) be tested.
    tool('test_trigger_tool_change', 'Announces a tools list change to subscribers', async () => {
      await hooks.announce('tools');
      return result(text('Announced a tools list change'));
    }),
    tool('test_trigger_prompt_change', 'Announces a prompts list change to subscribers', async () => {
      await hooks.announce('prompts');
      return result(text('Announced a prompts list change'));
    }),
    tool('json_schema_2020_12_tool', 'Tool with JSON Schema 2020-12 features', async (args) => {
      const sorted = Object.fromEntries(Object.keys(args).sort().map((key) => [key, args[key]]));
      return result(text(`json_schema_2020_12_tool called with ${JSON.stringify(sorted)}`));
    }, JSON_SCHEMA_2020_12),
  ];
}

export const RESOURCES = [
  { uri: STATIC_TEXT_URI, name: 'static-text', description: 'A static text resource', mimeType: 'text/plain' },
  { uri: STATIC_BINARY_URI, name: 'static-binary', description: 'A static binary resource (a PNG image)', mimeType: 'image/png' },
  { uri: WATCHED_URI, name: 'watched-resource', description: 'A resource clients can subscribe to', mimeType: 'text/plain' },
];
export const TEMPLATE_LISTING = {
  uriTemplate: 'test://template/{id}/data',
  name: 'template-data',
  description: 'JSON data for any id',
  mimeType: 'application/json',
};

/** The contents of uri, or undefined for a URI this fixture does not have. */
export function read(uri, watchedVersion) {
  if (uri === STATIC_TEXT_URI) return [{ uri, mimeType: 'text/plain', text: 'This is the content of the static text resource.' }];
  if (uri === STATIC_BINARY_URI) return [{ uri, mimeType: 'image/png', blob: PNG }];
  if (uri === WATCHED_URI) return [{ uri, mimeType: 'text/plain', text: watchedText(watchedVersion) }];
  if (uri.startsWith(TEMPLATE_PREFIX) && uri.endsWith(TEMPLATE_SUFFIX)) {
    const id = uri.slice(TEMPLATE_PREFIX.length, -TEMPLATE_SUFFIX.length);
    if (id && !id.includes('/')) {
      const body = JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` });
      return [{ uri, mimeType: 'application/json', text: body }];
    }
  }
  return undefined;
}

const argument = (name, description) => ({ name, description, required: true });
export const PROMPTS = [
  { name: 'test_simple_prompt', description: 'A simple prompt without arguments' },
  {
    name: 'test_prompt_with_arguments',
    description: 'A prompt with two required arguments',
    arguments: [argument('arg1', 'First test argument'), argument('arg2', 'Second test argument')],
  },
  {
    name: 'test_prompt_with_embedded_resource',
    description: 'A prompt embedding a resource',
    arguments: [argument('resourceUri', 'URI of the resource to embed')],
  },
  { name: 'test_prompt_with_image', description: 'A prompt with image content' },
];

/** A prompts/get result, or { error } naming what is wrong with the request. */
export function getPrompt(name, args) {
  const prompt = PROMPTS.find((p) => p.name === name);
  if (!prompt) return { error: `Unknown prompt: ${name}` };
  const absent = (prompt.arguments ?? []).map((a) => a.name).filter((a) => !(a in args));
  if (absent.length) return { error: `Missing required arguments: ${absent.join(', ')}` };
  const user = (content) => ({ role: 'user', content });
  let messages;
  if (name === 'test_simple_prompt') {
    messages = [user(text('This is a simple prompt for testing.'))];
  } else if (name === 'test_prompt_with_arguments') {
    messages = [user(text(`Prompt with arguments: arg1='${args.arg1}', arg2='${args.arg2}'`))];
  } else if (name === 'test_prompt_with_embedded_resource') {
    messages = [
      user(embedded(args.resourceUri, 'text/plain', 'Embedded resource content for testing.')),
      user(text('Please process the embedded resource above.')),
    ];
  } else {
    messages = [user(image()), user(text('Please analyze the image above.'))];
  }
  return { description: prompt.description, messages };
}

export function complete(ref, argument) {
  const values =
    ref?.type === 'ref/prompt' && ref.name === 'test_prompt_with_arguments'
      ? ['paris', 'park', 'party'].filter((word) => word.startsWith(argument.value))
      : [];
  return { values, total: values.length, hasMore: false };
}

/** The last few thousand SSE events, so a closed stream can be resumed (SEP-1699). */
export class MemoryEventStore {
  constructor(capacity = 4096) {
    this.events = [];
    this.capacity = capacity;
    this.next = 0;
  }
  async storeEvent(streamId, message) {
    this.next += 1;
    const eventId = `${streamId}_${this.next}`;
    this.events.push({ eventId, streamId, message });
    if (this.events.length > this.capacity) this.events.shift();
    return eventId;
  }
  async getStreamIdForEventId(eventId) {
    return this.events.find((event) => event.eventId === eventId)?.streamId;
  }
  async replayEventsAfter(lastEventId, { send }) {
    const at = this.events.findIndex((event) => event.eventId === lastEventId);
    if (at < 0) return '';
    const { streamId } = this.events[at];
    for (const event of this.events.slice(at + 1)) {
      if (event.streamId === streamId && event.message) await send(event.eventId, event.message);
    }
    return streamId;
  }
}

export const form = (message, ...names) => ({
  method: 'elicitation/create',
  params: {
    message,
    requestedSchema: {
      type: 'object',
      properties: Object.fromEntries(names.map((name) => [name, { type: 'string' }])),
      required: names,
    },
  },
});
const sample = (prompt, maxTokens) => ({
  method: 'sampling/createMessage',
  params: { messages: [{ role: 'user', content: text(prompt) }], maxTokens },
});
const roots = { method: 'roots/list', params: {} };
export const accepted = (answer) => (answer?.action === 'accept' ? answer.content ?? {} : {});
const sampled = (answer) => {
  const parts = Array.isArray(answer?.content) ? answer.content : [answer?.content];
  return parts.filter((part) => part?.type === 'text').map((part) => part.text).join('');
};
const rootList = (answer) => (answer?.roots ?? []).map((root) => root.uri).join(', ');
const said = (value) => ({ content: [text(value)] });

/**
 * The conformance suite's 2026-07-28 diagnostic tools. hooks.askAll(ctx, requests, state)
 * returns the answers to every question (key -> {method, params}) or raises what the
 * fixture's SDK needs to ask them; state is the requestState to carry, if any.
 */
export function modernTools(hooks) {
  const tool = (name, description, run) => ({
    listing: { name, description, inputSchema: { type: 'object', properties: {} } },
    run: (args, ctx) => run(ctx, name),
  });
  const greet = async (ctx) => {
    const answers = await hooks.askAll(ctx, { user_name: form('What is your name?', 'name') });
    return said(`Hello, ${accepted(answers.user_name).name ?? 'stranger'}!`);
  };
  const confirm = async (ctx, name) => {
    const expected = `awaiting-confirmation:${name}`;
    const answers = await hooks.askAll(
      ctx,
      { confirm: { method: 'elicitation/create', params: { message: 'Please confirm', requestedSchema: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] } } } },
      expected,
    );
    hooks.checkState(ctx, expected);
    return said(`state-ok: confirmed=${JSON.stringify(accepted(answers.confirm).ok)}`);
  };
  return [
    tool('test_missing_capability', 'Needs the sampling capability, which the client must declare', async (ctx) =>
      said(`Sampled: ${sampled((await hooks.askAll(ctx, { sampling: sample('Say something', 20) })).sampling)}`)),
    tool('test_input_required_result_elicitation', "Asks the user's name through an input_required result", greet),
    tool('test_streaming_elicitation', 'Asks the user for a name; the answer stream holds only the question', greet),
    tool('test_input_required_result_sampling', "Asks the client's model through an input_required result", async (ctx) =>
      said(`Sampling answer: ${sampled((await hooks.askAll(ctx, { capital_question: sample('What is the capital of France?', 100) })).capital_question)}`)),
    tool('test_input_required_result_list_roots', "Asks for the client's roots through an input_required result", async (ctx) =>
      said(`Client roots: ${rootList((await hooks.askAll(ctx, { client_roots: roots })).client_roots)}`)),
    tool('test_input_required_result_request_state', 'Asks for a confirmation and checks the echoed requestState', confirm),
    tool('test_input_required_result_tampered_state', 'Asks for a confirmation; a tampered requestState is refused', confirm),
    tool('test_input_required_result_multiple_inputs', 'Asks for a name, a sample and the roots in one round', async (ctx) => {
      const answers = await hooks.askAll(
        ctx,
        { user_name: form('What is your name?', 'name'), greeting: sample('Generate a greeting', 50), client_roots: roots },
        'awaiting-all-three',
      );
      return said(`name=${accepted(answers.user_name).name ?? 'stranger'}; greeting=${sampled(answers.greeting)}; roots=${rootList(answers.client_roots)}`);
    }),
    tool('test_input_required_result_multi_round', 'Asks two questions in two rounds', async (ctx) => {
      const state = hooks.stateOf(ctx) ?? '';
      let name;
      if (state.startsWith('step2:')) {
        name = JSON.parse(state.slice('step2:'.length));
      } else {
        name = accepted((await hooks.askAll(ctx, { step1: form('Step 1: What is your name?', 'name') }, 'step1')).step1).name ?? 'stranger';
      }
      const second = await hooks.askAll(ctx, { step2: form('Step 2: What is your favorite color?', 'color') }, `step2:${JSON.stringify(name)}`);
      return said(`${name} likes ${accepted(second.step2).color ?? 'no colour'}`);
    }),
    tool('test_input_required_result_capabilities', 'Asks only through the capabilities the client declared', async (ctx) => {
      const caps = hooks.declared(ctx);
      const possible = { elicitation: form('What is your name?', 'name'), sampling: sample('Say hello', 20), roots };
      const questions = Object.fromEntries(Object.entries(possible).filter(([key]) => caps[key]));
      if (!Object.keys(questions).length) return said('The client declared no capability to ask through');
      return said(`Answered: ${Object.keys(await hooks.askAll(ctx, questions)).sort().join(', ')}`);
    }),
    tool('test_logging_tool', 'Logs at info, which reaches only a request that asked for logs', async (ctx) => {
      for (const line of ['Tool execution started', 'Tool processing data', 'Tool execution completed']) {
        await hooks.log(ctx, 'info', line);
      }
      return said('Tool with logging executed successfully');
    }),
  ];
}

