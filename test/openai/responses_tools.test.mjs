// Drives the scripted tool-calling servers of tools.test.mjs through the Responses API with
// the official openai npm client: function tools in the Responses form, the reply's calls
// as function_call output items, not streamed and streamed.
//
// Environment: KVASIR_TOOL_SERVERS and KVASIR_TOOLS, as tools.test.mjs
// (internal/server/openai_npm_tools_test.go runs both).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const servers = JSON.parse(process.env.KVASIR_TOOL_SERVERS ?? '[]');
const chatTools = JSON.parse(process.env.KVASIR_TOOLS ?? '[]');
assert.ok(servers.length > 0 && chatTools.length > 0, 'set KVASIR_TOOL_SERVERS and KVASIR_TOOLS');
// The Responses API's function tools are flat: no nested "function" object.
const tools = chatTools.map((t) => ({ type: 'function', ...t.function }));
const input = 'Weather and time in Paris?';

// checkCalls compares function_call items with the family's expected calls.
function checkCalls(items, want) {
  const calls = items.filter((it) => it.type === 'function_call');
  assert.equal(calls.length, want.length, `items ${JSON.stringify(items)}`);
  const ids = new Set();
  calls.forEach((c, i) => {
    assert.ok(c.call_id && !ids.has(c.call_id), `call ${i} call_id ${c.call_id}`);
    ids.add(c.call_id);
    assert.equal(c.name, want[i].name);
    assert.deepEqual(JSON.parse(c.arguments), want[i].arguments);
  });
}

for (const s of servers) {
  const client = new OpenAI({ baseURL: s.baseURL, apiKey: 'none', maxRetries: 0, timeout: 60_000 });

  test(`${s.name}: function_call items, not streamed`, async () => {
    const res = await client.responses.create({ model: s.model, input, tools, max_output_tokens: 600 });
    assert.equal(res.status, 'completed');
    checkCalls(res.output, s.calls);
    assert.equal(res.output_text, s.content);
  });

  test(`${s.name}: function_call items, streamed`, async () => {
    const stream = await client.responses.create({ model: s.model, input, tools, max_output_tokens: 600, stream: true });
    const args = {};
    const done = [];
    let final = null;
    for await (const ev of stream) {
      if (ev.type === 'response.function_call_arguments.delta') args[ev.item_id] = (args[ev.item_id] ?? '') + ev.delta;
      if (ev.type === 'response.function_call_arguments.done') assert.equal(ev.arguments, args[ev.item_id] ?? '');
      if (ev.type === 'response.output_item.done') done.push(ev.item);
      if (ev.type === 'response.completed') final = ev.response;
    }
    checkCalls(done, s.calls);
    checkCalls(final.output, s.calls);
  });
}
