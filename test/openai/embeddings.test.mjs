// Drives a kvasir server of an encoder model with the official openai npm client's
// embeddings.create (float and base64), and sends raw rerank and score requests.
//
// Environment: KVASIR_BASE_URL (http://HOST:PORT/v1), KVASIR_MODEL, KVASIR_DIM (the model's
// embedding size). internal/server/openai_npm_embed_test.go starts the server (a
// synthesized BERT) and runs this file with node --test.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const baseURL = process.env.KVASIR_BASE_URL;
const model = process.env.KVASIR_MODEL;
const dim = Number(process.env.KVASIR_DIM);
assert.ok(baseURL && model && dim > 0, 'set KVASIR_BASE_URL, KVASIR_MODEL and KVASIR_DIM');

const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });

const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));

test('embeddings.create, float', async () => {
  const res = await client.embeddings.create({ model, input: ['hello world', 'the quick brown fox'], encoding_format: 'float' });
  assert.equal(res.object, 'list');
  assert.equal(res.model, model);
  assert.equal(res.data.length, 2);
  for (const [i, d] of res.data.entries()) {
    assert.equal(d.object, 'embedding');
    assert.equal(d.index, i);
    assert.equal(d.embedding.length, dim);
    assert.ok(Math.abs(norm(d.embedding) - 1) < 1e-5, 'unit length');
  }
  assert.ok(res.usage.prompt_tokens > 4);
  assert.equal(res.usage.total_tokens, res.usage.prompt_tokens);
});

test('embeddings.create, base64 decodes to the float embedding', async () => {
  const input = 'paris is the capital of france';
  const float = await client.embeddings.create({ model, input, encoding_format: 'float' });
  // JSON carries the shortest text of each float32; Math.fround gives back its value.
  const f32 = float.data[0].embedding.map(Math.fround);
  // The client asks for base64 itself when no format is given and decodes it to numbers.
  const auto = await client.embeddings.create({ model, input });
  assert.equal(auto.data[0].embedding.length, dim);
  for (let i = 0; i < dim; i++) assert.equal(auto.data[0].embedding[i], f32[i]);
  const raw = await client.embeddings.create({ model, input, encoding_format: 'base64' });
  assert.equal(typeof raw.data[0].embedding, 'string');
  const buf = Buffer.from(raw.data[0].embedding, 'base64');
  assert.equal(buf.length, 4 * dim);
  for (let i = 0; i < dim; i++) assert.equal(buf.readFloatLE(4 * i), f32[i]);
});

test('embeddings.create, dimensions and token ids', async () => {
  const res = await client.embeddings.create({ model, input: [[2, 50, 51, 3]], dimensions: 8, encoding_format: 'float' });
  assert.equal(res.data[0].embedding.length, 8);
  assert.ok(Math.abs(norm(res.data[0].embedding) - 1) < 1e-5);
  assert.equal(res.usage.prompt_tokens, 4);
});

test('embeddings.create refuses bad input with a 400', async () => {
  for (const body of [{ input: '' }, { input: 'a', dimensions: dim + 1 }, { input: 'hello '.repeat(1000) }]) {
    await assert.rejects(client.embeddings.create({ model, encoding_format: 'float', ...body }), (err) => {
      assert.ok(err instanceof OpenAI.BadRequestError, `${JSON.stringify(body).slice(0, 60)}: ${err}`);
      assert.ok(err.error.message.length > 0);
      return true;
    });
  }
});

async function post(path, body) {
  const res = await fetch(baseURL + path, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  return { status: res.status, body: await res.json() };
}

test('raw rerank', async () => {
  const documents = ['paris', 'the lazy dog', 'a city on a river'];
  const { status, body } = await post('/rerank', { model, query: 'capital of france', documents, top_n: 2 });
  assert.equal(status, 200);
  assert.equal(body.results.length, 2);
  assert.ok(body.results[0].relevance_score >= body.results[1].relevance_score);
  for (const r of body.results) assert.equal(r.document.text, documents[r.index]);
  assert.ok(body.usage.total_tokens > 0);
});

test('raw score', async () => {
  const { status, body } = await post('/score', { model, text_1: 'capital of france', text_2: ['paris', 'the lazy dog'] });
  assert.equal(status, 200);
  assert.equal(body.object, 'list');
  assert.deepEqual(body.data.map((d) => d.index), [0, 1]);
  for (const d of body.data) assert.ok(d.score >= -1 && d.score <= 1);
  const bad = await post('/score', { model, text_1: ['a', 'b'], text_2: ['c'] });
  assert.equal(bad.status, 400);
  assert.equal(bad.body.error.type, 'invalid_request_error');
});
