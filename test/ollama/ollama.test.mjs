// Drives a running `kvasir serve` with the official ollama npm client, and checks that a
// browser-style cross-origin fetch passes the CORS preflight.
//
// Environment: KVASIR_HOST (http://HOST:PORT), KVASIR_API_KEY, KVASIR_MODEL.
// internal/server/ollama_npm_test.go starts the server and runs this file with node --test.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Ollama } from 'ollama';

const host = process.env.KVASIR_HOST;
const apiKey = process.env.KVASIR_API_KEY;
const model = process.env.KVASIR_MODEL;
assert.ok(host && apiKey && model, 'set KVASIR_HOST, KVASIR_API_KEY and KVASIR_MODEL');

const ollama = new Ollama({ host, headers: { Authorization: `Bearer ${apiKey}` } });
const options = { num_predict: 8, temperature: 0, top_k: 40, top_p: 0.95, seed: 7, repeat_penalty: 1.0 };

test('list reports the served model', async () => {
  const res = await ollama.list();
  assert.deepEqual(res.models.map((m) => m.name), [model]);
  assert.ok(res.models[0].size > 0);
  assert.equal(typeof res.models[0].details.family, 'string');
});

test('show and version', async () => {
  const show = await ollama.show({ model });
  assert.equal(typeof show.template, 'string');
  assert.ok(show.model_info['general.architecture']);
  const v = await ollama.version();
  assert.equal(typeof v.version, 'string');
});

test('generate, whole and streamed, agree', async () => {
  const whole = await ollama.generate({ model, prompt: 'Once upon a time', options });
  assert.equal(whole.done, true);
  assert.ok(['stop', 'length'].includes(whole.done_reason), whole.done_reason);
  assert.ok(whole.eval_count > 0 && whole.eval_count <= 8, `eval_count ${whole.eval_count}`);
  assert.ok(whole.prompt_eval_count > 0);
  assert.ok(whole.total_duration > 0 && whole.eval_duration >= 0);

  let text = '';
  let last = null;
  let parts = 0;
  for await (const part of await ollama.generate({ model, prompt: 'Once upon a time', options, stream: true })) {
    text += part.response;
    parts++;
    last = part;
  }
  assert.ok(parts >= 2, `${parts} parts`);
  assert.equal(last.done, true);
  assert.equal(last.eval_count, whole.eval_count);
  assert.equal(text, whole.response);
});

test('chat, streamed', async () => {
  const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Say hello.' }];
  let text = '';
  let last = null;
  for await (const part of await ollama.chat({ model, messages, options, stream: true })) {
    assert.equal(part.message.role, 'assistant');
    text += part.message.content;
    last = part;
  }
  assert.equal(last.done, true);
  assert.ok(['stop', 'length'].includes(last.done_reason));
  const whole = await ollama.chat({ model, messages, options });
  assert.equal(whole.message.content, text);
});

test('an unknown model, and embeddings of a generative model, fail in ollama\'s shape', async () => {
  await assert.rejects(ollama.generate({ model: 'no-such-model', prompt: 'x' }), (err) => {
    assert.equal(err.status_code, 404);
    assert.match(err.error, /not found/);
    return true;
  });
  await assert.rejects(ollama.embed({ model, input: 'x' }), (err) => {
    assert.equal(err.status_code, 400);
    assert.match(err.error, /generative model/);
    return true;
  });
});

test('a browser-origin fetch passes the CORS preflight', async () => {
  const origin = 'http://localhost:5173';
  const pre = await fetch(`${host}/api/chat`, {
    method: 'OPTIONS',
    headers: { Origin: origin, 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'authorization, content-type' },
  });
  assert.equal(pre.status, 204);
  assert.equal(pre.headers.get('access-control-allow-origin'), origin);
  assert.match(pre.headers.get('access-control-allow-methods'), /POST/);
  assert.equal(pre.headers.get('access-control-allow-headers'), 'authorization, content-type');
  const res = await fetch(`${host}/api/chat`, {
    method: 'POST',
    headers: { Origin: origin, 'Content-Type': 'application/json', Authorization: `Bearer ${apiKey}` },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], stream: false, options: { num_predict: 3 } }),
  });
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('access-control-allow-origin'), origin);
  const body = await res.json();
  assert.equal(body.done, true);
});
