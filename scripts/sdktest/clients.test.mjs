// The clients the ecosystem ships, unchanged, through the gateway: npm
// openai's AzureOpenAI class (api key and Entra token provider), the
// default base64 embeddings, the Responses API, and streams carrying
// keepalive comments. Run by TestSDKNode with the same environment as
// sdk.test.mjs (GATEWAY_URL ends in /v1; the gateway's keepalive interval
// is short, so a slow first token brings comments).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI, { AzureOpenAI } from 'openai';

const baseURL = process.env.GATEWAY_URL;
const token = process.env.TOKEN;
const tokens = Number(process.env.EXPECT_TOKENS || '8');
if (!baseURL || !token) {
  throw new Error('set GATEWAY_URL and TOKEN (see sdk.test.mjs)');
}
const endpoint = baseURL.replace(/\/v1$/, '');
const want = ' tok'.repeat(tokens);
const messages = [{ role: 'user', content: 'hi' }];
const client = () => new OpenAI({ baseURL, apiKey: token, maxRetries: 0, timeout: 30_000 });
const azureClients = {
  apiKey: () => new AzureOpenAI({ endpoint, apiKey: token, apiVersion: '2024-10-21', maxRetries: 0 }),
  azureADTokenProvider: () => new AzureOpenAI({
    endpoint, azureADTokenProvider: async () => token, apiVersion: '2024-10-21', maxRetries: 0,
  }),
};

for (const [name, make] of Object.entries(azureClients)) {
  test(`AzureOpenAI (${name}): chat`, async () => {
    const res = await make().chat.completions.create({ model: 'llama', messages });
    assert.equal(res.choices[0].message.content, want);
  });
  test(`AzureOpenAI (${name}): stream`, async () => {
    const stream = await make().chat.completions.create({ model: 'llama', messages, stream: true });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
    assert.equal(text, want);
  });
  test(`AzureOpenAI (${name}): a deployment the tenant may not use is a 404`, async () => {
    await assert.rejects(make().chat.completions.create({ model: 'o4-mini', messages }), (e) => {
      assert.ok(e instanceof OpenAI.NotFoundError, `got ${e?.constructor?.name}: ${e}`);
      return true;
    });
  });
}

test('AzureOpenAI: a bad api-version is a 400', async () => {
  const c = new AzureOpenAI({ endpoint, apiKey: token, apiVersion: 'latest', maxRetries: 0 });
  await assert.rejects(c.chat.completions.create({ model: 'llama', messages }), (e) => {
    assert.ok(e instanceof OpenAI.BadRequestError, `got ${e?.constructor?.name}: ${e}`);
    assert.equal(e.code, 'invalid_api_version');
    return true;
  });
});

test('embeddings: the default base64 decodes to the float vectors', async () => {
  for (const c of [client(), azureClients.apiKey()]) {
    const b64 = await c.embeddings.create({ model: 'llama', input: ['hello', 'world'] });
    const floats = await c.embeddings.create({ model: 'llama', input: ['hello', 'world'], encoding_format: 'float' });
    assert.equal(b64.data.length, 2);
    for (let i = 0; i < 2; i++) {
      const a = b64.data[i].embedding, b = floats.data[i].embedding;
      assert.ok(a.length > 2, `vector of ${a.length}`);
      assert.equal(a.length, b.length);
      for (let j = 0; j < a.length; j++) assert.ok(Math.abs(a[j] - b[j]) < 1e-6, `[${i}][${j}] ${a[j]} vs ${b[j]}`);
    }
  }
});

test('keepalive comments before a slow first token are invisible', async () => {
  const stream = await client().chat.completions.create(
    { model: 'llama', messages, stream: true },
    { headers: { 'X-Stub-TTFT': '1s' } },
  );
  let text = '';
  for await (const chunk of stream) {
    assert.ok(chunk.id, `empty chunk ${JSON.stringify(chunk)}`);
    text += chunk.choices[0]?.delta?.content ?? '';
  }
  assert.equal(text, want);
});

test('responses.create, a follow-up, and responses.stream', async () => {
  const c = client();
  const first = await c.responses.create({ model: 'llama', input: 'hi' });
  assert.equal(first.output_text, want);
  const next = await c.responses.create({ model: 'llama', input: 'more', previous_response_id: first.id });
  assert.equal(next.previous_response_id, first.id);
  const stream = c.responses.stream({ model: 'llama', input: 'hi' });
  let text = '';
  for await (const ev of stream) if (ev.type === 'response.output_text.delta') text += ev.delta;
  const final = await stream.finalResponse();
  assert.equal(text, want);
  assert.equal(final.status, 'completed');
  assert.equal(final.usage.output_tokens, tokens);
});

// The AzureOpenAI class's Responses and models calls carry no
// deployment (POST /openai/responses, GET /openai/models?api-version=…).
test('AzureOpenAI: responses.create, retrieve, and models.list', async () => {
  const c = new AzureOpenAI({ endpoint, apiKey: token, apiVersion: '2025-04-01-preview', maxRetries: 0 });
  const first = await c.responses.create({ model: 'llama', input: 'hi' });
  assert.equal(first.output_text, want);
  const again = await c.responses.retrieve(first.id);
  assert.equal(again.id, first.id);
  const models = [];
  for await (const m of c.models.list()) models.push(m.id);
  assert.ok(models.includes('llama'), `models: ${models}`);
});

// An id the gateway never recorded for this tenant is a 404 the
// SDK raises as NotFoundError, and never reaches a backend.
test('responses: a follow-up of an unknown id is NotFoundError', async () => {
  await assert.rejects(client().responses.create({ model: 'llama', input: 'x', previous_response_id: 'resp_not_yours' }), (e) => {
    assert.ok(e instanceof OpenAI.NotFoundError, `got ${e?.constructor?.name}: ${e}`);
    assert.equal(e.code, 'previous_response_not_found');
    return true;
  });
});

// A Responses stream the backend drops mid-way ends with the
// Responses API's error event, which the Vercel AI SDK (default
// openai('…') = Responses) raises as an API error, not a schema error.
test('Vercel AI SDK: a dropped Responses stream is an API error', async () => {
  const { createOpenAI } = await import('@ai-sdk/openai');
  const { streamText, generateText } = await import('ai');
  const ok = await generateText({ model: createOpenAI({ baseURL, apiKey: token })('llama'), prompt: 'hi', maxRetries: 0 });
  assert.equal(ok.text, want);
  const provider = createOpenAI({ baseURL, apiKey: token, headers: { 'X-Stub-Fault': 'drop_after=3' } });
  const result = streamText({ model: provider('llama'), prompt: 'hi', maxRetries: 0, onError: () => {} });
  let err;
  for await (const part of result.fullStream) if (part.type === 'error') err = part.error;
  assert.ok(err, 'no error part');
  assert.notEqual(err?.name, 'AI_TypeValidationError', `schema error instead of the API error: ${err}`);
  assert.match(JSON.stringify(err) + String(err?.message ?? err), /upstream_stream_error/);
});
