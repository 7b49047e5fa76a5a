// Drives kvasir servers on a random model, one per tool-call parser, with the official
// openai npm client: tool_choice "required" and a named function, not streamed and
// streamed. The server's built-in grammar holds the reply to calls in the parser's syntax,
// so every reply must end in tool_calls whose arguments are instances of the tools'
// schemas.
//
// Environment: KVASIR_REQUIRED_SERVERS, a JSON list of {name, baseURL, model}.
// internal/server/openai_npm_tools_test.go starts the servers and runs this file.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const servers = JSON.parse(process.env.KVASIR_REQUIRED_SERVERS ?? '[]');
assert.ok(servers.length > 0, 'set KVASIR_REQUIRED_SERVERS');
const messages = [{ role: 'user', content: 'Weather in Paris?' }];
const tools = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      parameters: {
        type: 'object',
        properties: { city: { type: 'string', enum: ['Paris', 'Oslo'] }, days: { type: 'integer', minimum: 1, maximum: 7 } },
        required: ['city', 'days'],
      },
    },
  },
  { type: 'function', function: { name: 'get_time' } },
];

// checkArgs checks one call against the tools' schemas.
function checkArgs(name, text) {
  const args = JSON.parse(text);
  if (name === 'get_time') {
    assert.deepEqual(args, {});
    return;
  }
  assert.equal(name, 'get_weather');
  assert.deepEqual(Object.keys(args).sort(), ['city', 'days'], text);
  assert.ok(['Paris', 'Oslo'].includes(args.city), text);
  assert.ok(Number.isInteger(args.days) && args.days >= 1 && args.days <= 7, text);
}

const choices = [
  ['required', 'required'],
  ['named', { type: 'function', function: { name: 'get_weather' } }],
];

for (const s of servers) {
  const client = new OpenAI({ baseURL: s.baseURL, apiKey: 'none', maxRetries: 0, timeout: 120_000 });
  for (const [label, toolChoice] of choices) {
    const body = { model: s.model, messages, tools, tool_choice: toolChoice, temperature: 1, max_tokens: 1500 };

    test(`${s.name}: tool_choice ${label}, not streamed`, async () => {
      const res = await client.chat.completions.create(body);
      const choice = res.choices[0];
      assert.equal(choice.finish_reason, 'tool_calls');
      assert.ok(choice.message.tool_calls.length > 0);
      for (const c of choice.message.tool_calls) {
        assert.equal(c.type, 'function');
        if (label === 'named') assert.equal(c.function.name, 'get_weather');
        checkArgs(c.function.name, c.function.arguments);
      }
    });

    test(`${s.name}: tool_choice ${label}, streamed`, async () => {
      const stream = await client.chat.completions.create({ ...body, stream: true });
      const calls = [];
      let finish = null;
      for await (const chunk of stream) {
        const choice = chunk.choices[0];
        if (!choice) continue;
        for (const tc of choice.delta.tool_calls ?? []) {
          if (tc.index === calls.length) {
            assert.ok(tc.id && tc.function?.name, `call ${tc.index} starts with its id and name`);
            calls.push({ name: tc.function.name, arguments: tc.function.arguments ?? '' });
          } else {
            assert.equal(tc.index, calls.length - 1, 'pieces continue the last call');
            calls[tc.index].arguments += tc.function?.arguments ?? '';
          }
        }
        if (choice.finish_reason) finish = choice.finish_reason;
      }
      assert.equal(finish, 'tool_calls');
      assert.ok(calls.length > 0);
      for (const c of calls) {
        if (label === 'named') assert.equal(c.name, 'get_weather');
        checkArgs(c.name, c.arguments);
      }
    });
  }
}
