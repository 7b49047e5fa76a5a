// Drives kvasir servers whose replies are scripted, one per tool-calling family, with the
// official openai npm client: tools in the request, tool_calls parsed from the reply, not
// streamed and streamed.
//
// Environment: KVASIR_TOOL_SERVERS, a JSON list of {name, baseURL, model, content,
// reasoning, calls: [{name, arguments}]}, and KVASIR_TOOLS, the tools to send.
// internal/server/openai_npm_tools_test.go starts the servers and runs this file.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const servers = JSON.parse(process.env.KVASIR_TOOL_SERVERS ?? '[]');
const tools = JSON.parse(process.env.KVASIR_TOOLS ?? '[]');
assert.ok(servers.length > 0 && tools.length > 0, 'set KVASIR_TOOL_SERVERS and KVASIR_TOOLS');
const messages = [{ role: 'user', content: 'Weather and time in Paris?' }];

// checkCalls compares tool calls with the family's expected calls.
function checkCalls(calls, want) {
  assert.equal(calls.length, want.length, `calls ${JSON.stringify(calls)}`);
  const ids = new Set();
  calls.forEach((c, i) => {
    assert.equal(c.type, 'function');
    assert.ok(typeof c.id === 'string' && c.id.length > 0 && !ids.has(c.id), `call ${i} id ${c.id}`);
    ids.add(c.id);
    assert.equal(c.function.name, want[i].name);
    assert.deepEqual(JSON.parse(c.function.arguments), want[i].arguments);
  });
}

for (const s of servers) {
  const client = new OpenAI({ baseURL: s.baseURL, apiKey: 'none', maxRetries: 0, timeout: 60_000 });

  test(`${s.name}: tool_calls, not streamed`, async () => {
    const res = await client.chat.completions.create({ model: s.model, messages, tools, max_tokens: 600 });
    const choice = res.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls');
    assert.equal(choice.message.role, 'assistant');
    assert.equal(choice.message.content ?? '', s.content);
    assert.equal(choice.message.reasoning_content ?? '', s.reasoning);
    checkCalls(choice.message.tool_calls, s.calls);
  });

  test(`${s.name}: tool_calls, streamed`, async () => {
    const stream = await client.chat.completions.create({ model: s.model, messages, tools, max_tokens: 600, stream: true });
    const calls = [];
    let content = '';
    let reasoning = '';
    let finish = null;
    for await (const chunk of stream) {
      const choice = chunk.choices[0];
      if (!choice) continue;
      content += choice.delta.content ?? '';
      reasoning += choice.delta.reasoning_content ?? '';
      for (const tc of choice.delta.tool_calls ?? []) {
        if (tc.index === calls.length) {
          assert.ok(tc.id && tc.function?.name, `call ${tc.index} starts with its id and name`);
          calls.push({ id: tc.id, type: tc.type, function: { name: tc.function.name, arguments: tc.function.arguments ?? '' } });
        } else {
          assert.equal(tc.index, calls.length - 1, 'pieces continue the last call');
          calls[tc.index].function.arguments += tc.function?.arguments ?? '';
        }
      }
      if (choice.finish_reason) finish = choice.finish_reason;
    }
    assert.equal(finish, 'tool_calls');
    assert.equal(content, s.content);
    assert.equal(reasoning, s.reasoning);
    checkCalls(calls, s.calls);
  });
}
