// The gateway's Messages API through the official @anthropic-ai/sdk npm
// package. Run by the Go test TestSDKNodeAnthropic in functions/gateway,
// which starts a gateway with an anthropic pool (model claude-test) on
// the stub and sets:
//
//   ANTHROPIC_GATEWAY  the gateway's base URL (no /v1: the SDK adds it)
//   TOKEN              a valid JWT for tenant anthro (claude-test, llama)
//   EXPECT_TOKENS      completion tokens per answer (the stub repeats " tok")
//   QUOTA_TOKEN        a JWT for tenant daily (a token quota of 100 a day);
//                      optional
//
// By hand: ANTHROPIC_GATEWAY=... TOKEN=... node --test anthropic.test.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import AnthropicNewest from 'anthropic-sdk-newest'; // the newest release, installed under another name

const baseURL = process.env.ANTHROPIC_GATEWAY;
const token = process.env.TOKEN;
const tokens = Number(process.env.EXPECT_TOKENS || '8');
if (!baseURL || !token) {
  throw new Error('set ANTHROPIC_GATEWAY and TOKEN (see the header of this file)');
}
const want = ' tok'.repeat(tokens);
const model = 'claude-test';
const messages = [{ role: 'user', content: 'hi' }];
const weather = {
  name: 'get_weather',
  description: 'The weather in a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};

// apiKey goes in x-api-key (ANTHROPIC_API_KEY); authToken as a bearer
// token (ANTHROPIC_AUTH_TOKEN, what Claude Code sends).
function client(opts = { apiKey: token }) {
  return new Anthropic({ baseURL, maxRetries: 0, timeout: 30_000, ...opts });
}

test('messages.create with apiKey (x-api-key)', async () => {
  const msg = await client().messages.create({ model, max_tokens: 100, messages });
  assert.equal(msg.type, 'message');
  assert.equal(msg.content[0].type, 'text');
  assert.equal(msg.content[0].text, want);
  assert.equal(msg.stop_reason, 'end_turn');
  assert.equal(msg.usage.output_tokens, tokens);
  assert.ok(msg.usage.input_tokens > 0);
});

test('messages.create with authToken (bearer), max_tokens cuts the answer', async () => {
  const msg = await client({ authToken: token, apiKey: null }).messages.create({ model, max_tokens: 3, messages });
  assert.equal(msg.content[0].text, ' tok'.repeat(3));
  assert.equal(msg.stop_reason, 'max_tokens');
});

test('messages.stream: every text delta, the final message and its usage', async () => {
  const stream = client().messages.stream({
    model, max_tokens: 100, messages,
    system: [{ type: 'text', text: 'Be brief.', cache_control: { type: 'ephemeral' } }],
  });
  let text = '';
  stream.on('text', (t) => { text += t; });
  const msg = await stream.finalMessage();
  assert.equal(text, want);
  assert.equal(msg.content[0].text, want);
  assert.equal(msg.usage.output_tokens, tokens);
  assert.ok(msg.usage.cache_read_input_tokens > 0, 'cache_control passed through: the stub reports cache reads');
});

test('raw stream (stream: true) ends with message_stop', async () => {
  const stream = await client().messages.create({ model, max_tokens: 100, messages, stream: true });
  const types = [];
  for await (const ev of stream) types.push(ev.type);
  assert.equal(types[0], 'message_start');
  assert.equal(types.at(-1), 'message_stop');
  assert.equal(types.filter((t) => t === 'content_block_delta').length, tokens);
});

test('tools: a tool_use block, then the tool_result answered in text', async () => {
  const c = client();
  const first = await c.messages.create({ model, max_tokens: 200, tools: [weather],
    messages: [{ role: 'user', content: 'What is the weather in Paris? Use get_weather.' }] });
  assert.equal(first.stop_reason, 'tool_use');
  const use = first.content.find((b) => b.type === 'tool_use');
  assert.equal(use.name, 'get_weather');
  assert.equal(typeof use.input.city, 'string');
  const second = await c.messages.create({ model, max_tokens: 200, tools: [weather], messages: [
    { role: 'user', content: 'What is the weather in Paris? Use get_weather.' },
    { role: 'assistant', content: first.content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'Sunny, 21 C' }] },
  ] });
  assert.equal(second.stop_reason, 'end_turn');
  assert.equal(second.content[0].type, 'text');
});

test('tools streamed: input_json_delta pieces assemble the input', async () => {
  const stream = client().messages.stream({ model, max_tokens: 200, tools: [weather],
    messages: [{ role: 'user', content: 'Weather in Paris?' }] });
  const msg = await stream.finalMessage();
  const use = msg.content.find((b) => b.type === 'tool_use');
  assert.equal(use.name, 'get_weather');
  assert.deepEqual(Object.keys(use.input), ['city']);
});

test('messages.countTokens', async () => {
  const res = await client().messages.countTokens({ model, messages });
  assert.ok(res.input_tokens > 0);
});

test('error classes: 401, 404, 400 in Anthropic shape', async () => {
  await assert.rejects(client({ apiKey: 'not-a-jwt' }).messages.create({ model, max_tokens: 10, messages }), (e) => {
    assert.ok(e instanceof Anthropic.AuthenticationError, `${e.constructor.name}: ${e.message}`);
    assert.equal(e.status, 401);
    assert.equal(e.error.error.type, 'authentication_error');
    return true;
  });
  await assert.rejects(client().messages.create({ model: 'gpt-4o-mini', max_tokens: 10, messages }), (e) => {
    assert.ok(e instanceof Anthropic.NotFoundError, `${e.constructor.name}: ${e.message}`);
    assert.equal(e.error.error.type, 'not_found_error');
    return true;
  });
  await assert.rejects(client().messages.create({ model, max_tokens: 10, max_completion_tokens: 5, messages }), (e) => {
    assert.ok(e instanceof Anthropic.BadRequestError, `${e.constructor.name}: ${e.message}`);
    assert.match(e.message, /max_completion_tokens/);
    return true;
  });
  await assert.rejects(client().messages.create({ model: 'gpt-4o', max_tokens: 10, messages }), (e) => {
    assert.ok(e instanceof Anthropic.BadRequestError, `${e.constructor.name}: ${e.message}`);
    assert.match(e.message, /Messages API/);
    return true;
  });
});

test('a stream the backend breaks mid-way raises an APIError', async () => {
  const c = client({ apiKey: token, defaultHeaders: { 'X-Stub-Fault': 'drop_after=5' } });
  const stream = c.messages.stream({ model, max_tokens: 100, messages });
  await assert.rejects(stream.finalMessage(), (e) => {
    assert.ok(e instanceof Anthropic.APIError, `${e.constructor.name}: ${e.message}`);
    assert.match(e.message, /api_error|stream/);
    return true;
  });
});

// A daily token quota, spent: with the SDK's default retries (2) the
// refusal is raised after one attempt, at once: x-should-retry: false,
// no retry-after (the day ends in hours).
const quotaToken = process.env.QUOTA_TOKEN;
for (const [name, SDK] of [['pinned', Anthropic], ['newest', AnthropicNewest]]) {
  test(`a spent daily quota raises at once with default retries (${name})`, { skip: !quotaToken && 'QUOTA_TOKEN not set' }, async () => {
    let attempts = 0;
    const counting = (url, init) => { attempts++; return fetch(url, init); };
    const c = new SDK({ baseURL, apiKey: quotaToken, timeout: 30_000, fetch: counting });
    let refused;
    for (let i = 0; i < 30 && !refused; i++) {
      attempts = 0;
      const start = Date.now();
      try {
        await c.messages.create({ model, max_tokens: 8, messages });
      } catch (e) {
        refused = e;
        const took = Date.now() - start;
        assert.equal(attempts, 1, `${attempts} attempts`);
        assert.ok(took < 10_000, `took ${took} ms`);
      }
    }
    assert.ok(refused instanceof SDK.RateLimitError, `${refused?.constructor?.name}: ${refused?.message}`);
    assert.equal(refused.headers.get('x-should-retry'), 'false');
    assert.equal(refused.headers.get('retry-after'), null);
    assert.match(refused.message, /token quota/);
  });
}

// Last: the 429 benches the pool's one endpoint for its Retry-After.
test('a backend 429 is a RateLimitError with retry-after', async () => {
  const c = client({ apiKey: token, defaultHeaders: { 'X-Stub-Fault': 'status=429,retry_after=1' } });
  await assert.rejects(c.messages.create({ model, max_tokens: 10, messages }), (e) => {
    assert.ok(e instanceof Anthropic.RateLimitError, `${e.constructor.name}: ${e.message}`);
    assert.equal(e.headers.get('retry-after'), '1');
    assert.equal(e.error.error.type, 'rate_limit_error');
    return true;
  });
});
