// Drives a running `kvasir serve` through the Responses API (/v1/responses) with the
// official openai npm client: not streamed, streamed, the stream helper, a conversation
// continued with previous_response_id, and a bad request.
//
// Environment: as openai.test.mjs (KVASIR_BASE_URL, KVASIR_API_KEY, KVASIR_MODEL);
// internal/server/openai_npm_test.go runs it beside that file.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const baseURL = process.env.KVASIR_BASE_URL;
const apiKey = process.env.KVASIR_API_KEY;
const model = process.env.KVASIR_MODEL;
assert.ok(baseURL && apiKey && model, 'set KVASIR_BASE_URL, KVASIR_API_KEY and KVASIR_MODEL');

const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120_000 });
const request = { model, input: 'Say hello.', instructions: 'Be brief.', max_output_tokens: 6, temperature: 0 };

// chatReply is the greedy chat completion of the same conversation.
async function chatReply(messages) {
  const res = await client.chat.completions.create({ model, messages, max_tokens: 6, temperature: 0 });
  return res.choices[0].message.content;
}

test('responses.create, not streamed, equals the chat reply', async () => {
  const res = await client.responses.create(request);
  assert.equal(res.object, 'response');
  assert.match(res.id, /^resp_/);
  assert.ok(['completed', 'incomplete'].includes(res.status), res.status);
  assert.equal(res.output.length, 1);
  const msg = res.output[0];
  assert.equal(msg.type, 'message');
  assert.equal(msg.role, 'assistant');
  assert.equal(msg.content[0].type, 'output_text');
  assert.equal(res.output_text, msg.content[0].text);
  assert.equal(res.output_text, await chatReply([{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Say hello.' }]));
  assert.ok(res.usage.output_tokens >= 1 && res.usage.output_tokens <= 6);
  assert.equal(res.usage.total_tokens, res.usage.input_tokens + res.usage.output_tokens);
  const again = await client.responses.retrieve(res.id);
  assert.equal(again.id, res.id);
  assert.equal(again.output[0].content[0].text, res.output_text);
});

test('responses.create, streamed: the event sequence and deltas', async () => {
  const want = (await client.responses.create(request)).output_text;
  const stream = await client.responses.create({ ...request, stream: true });
  const types = [];
  let text = '';
  let final = null;
  let seq = 0;
  for await (const ev of stream) {
    assert.equal(ev.sequence_number, seq++);
    types.push(ev.type);
    if (ev.type === 'response.output_text.delta') text += ev.delta;
    if (ev.type === 'response.completed') final = ev.response;
  }
  assert.deepEqual(types.slice(0, 4), ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added']);
  assert.deepEqual(types.slice(-4), ['response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.completed']);
  assert.equal(text, want);
  assert.equal(final.output[0].content[0].text, want);
});

test('responses.stream helper assembles the final response', async () => {
  const want = (await client.responses.create(request)).output_text;
  const stream = client.responses.stream(request);
  let deltas = '';
  stream.on('response.output_text.delta', (ev) => { deltas += ev.delta; });
  const final = await stream.finalResponse();
  assert.equal(deltas, want);
  assert.equal(final.output_text, want);
});

test('previous_response_id continues the conversation', async () => {
  const first = await client.responses.create({ model, input: 'Hi', max_output_tokens: 6, temperature: 0 });
  const second = await client.responses.create({ model, input: 'And then?', previous_response_id: first.id, max_output_tokens: 6, temperature: 0 });
  assert.equal(second.previous_response_id, first.id);
  const want = await chatReply([{ role: 'user', content: 'Hi' }, { role: 'assistant', content: first.output_text }, { role: 'user', content: 'And then?' }]);
  assert.equal(second.output_text, want);
});

test('400: an input part the model cannot take, named', async () => {
  await assert.rejects(
    () => client.responses.create({ model, input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'data:,' }] }] }),
    (err) => {
      assert.ok(err instanceof OpenAI.BadRequestError, `got ${err}`);
      assert.equal(err.status, 400);
      assert.equal(err.error.param, 'input[0].content[0].type');
      return true;
    });
});
