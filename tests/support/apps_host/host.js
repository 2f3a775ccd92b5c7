// A small MCP Apps host for mcpx's browser test (tests/daemon/test_apps_browser.py),
// bundled by esbuild at test time: an MCP client on mcpx's /mcp (Streamable HTTP),
// and @modelcontextprotocol/ext-apps's AppBridge, the host side of an app.
//
// It lists the tools, calls the one the page's config names (or the first that names a
// ui:// resource), reads that resource, renders it in a sandboxed iframe (srcdoc,
// allow-scripts only: the app runs in an opaque origin, as hosts render apps), hands it
// the call's input and result, and forwards the app's own tools/call through mcpx.
// Everything it did is in window.hostLog, for the test to read.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import {
  AppBridge,
  PostMessageTransport,
  RESOURCE_MIME_TYPE,
  getToolUiResourceUri,
} from "@modelcontextprotocol/ext-apps/app-bridge";

const config = JSON.parse(document.getElementById("config").textContent);
const log = { steps: [], calls: [], errors: [], resource: null, done: false };
window.hostLog = log;
const status = document.getElementById("status");

function step(text) {
  log.steps.push(text);
  status.textContent = text;
}

// What the app asks to call, as the host calls it on its connection to mcpx; the
// config's appCalls maps an app's tool name to another call (for a host that reaches
// the app's server through a gateway tool).
function hostCall(client, origin, name, args) {
  const mapped = (config.appCalls || {})[name];
  const request = mapped && origin === "app"
    ? { name: mapped.name, arguments: { ...mapped.arguments, arguments: args || {} } }
    : { name, arguments: args || {} };
  return client.callTool(request).then((result) => {
    log.calls.push({ origin, name, sent: request, result });
    if (origin === "app") step("the app called " + name + " through mcpx");
    return result;
  }, (error) => {
    // Logged (the app's own call fails inside the bridge, out of main's sight), so the
    // test ends at once with the reason rather than waiting for a call that never came.
    log.errors.push(origin + " call of " + name + " failed: " + String(error));
    throw error;
  });
}

async function main() {
  // The config's era: "legacy" (2025-11-25, with a session), or a modern revision the
  // client pins (2026-07-28: stateless, Mcp-Method and Mcp-Name on every POST).
  const options = config.era === "legacy"
    ? {} : { versionNegotiation: { mode: { pin: config.era } } };
  const client = new Client({ name: "mcpx-apps-test-host", version: "1.0.0" }, options);
  const transport = new StreamableHTTPClientTransport(new URL(config.mcp));
  await client.connect(transport);
  log.protocolVersion = client.getNegotiatedProtocolVersion() || null;
  step("connected");
  const { tools } = await client.listTools();
  log.tools = tools.map((tool) => ({ name: tool.name, _meta: tool._meta || null }));
  const tool = config.tool
    ? tools.find((one) => one.name === config.tool)
    : tools.find((one) => getToolUiResourceUri(one));
  if (!tool) throw new Error("no app tool among " + tools.map((t) => t.name).join(", "));
  const args = config.arguments || {};
  step("calling " + tool.name);
  const result = await hostCall(client, "host", tool.name, args);
  const uri = getToolUiResourceUri(tool) || getToolUiResourceUri(result);
  if (!uri) throw new Error(tool.name + " names no ui:// resource, nor does its result");
  step("reading " + uri);
  const read = await client.readResource({ uri });
  const content = read.contents.find((one) => one.uri === uri) || read.contents[0];
  log.resource = { uri, mimeType: content.mimeType, _meta: content._meta || null,
                   length: (content.text || "").length };
  if (content.mimeType !== RESOURCE_MIME_TYPE) {
    throw new Error(uri + " is " + content.mimeType + ", not " + RESOURCE_MIME_TYPE);
  }
  const html = content.text !== undefined ? content.text : atob(content.blob);

  const iframe = document.createElement("iframe");
  iframe.id = "app";
  iframe.setAttribute("sandbox", "allow-scripts");
  iframe.title = tool.name;
  document.getElementById("frame").appendChild(iframe);

  const bridge = new AppBridge(
    null,
    { name: "mcpx-apps-test-host", version: "1.0.0" },
    { serverTools: {}, logging: {} },
    { hostContext: { displayMode: "inline", platform: "web", theme: "light" } },
  );
  bridge.oncalltool = (params) => hostCall(client, "app", params.name, params.arguments);
  bridge.onloggingmessage = () => {};
  bridge.onsizechange = ({ height }) => {
    if (height) iframe.style.height = height + "px";
  };
  bridge.oninitialized = async () => {
    step("app initialized");
    await bridge.sendToolInput({ arguments: args });
    await bridge.sendToolResult(result);
    log.done = true;
    step("app shown");
  };
  await bridge.connect(new PostMessageTransport(iframe.contentWindow, iframe.contentWindow));
  iframe.srcdoc = html;
}

main().catch((error) => {
  log.errors.push(String(error && error.stack ? error.stack : error));
  step("failed: " + error);
});
