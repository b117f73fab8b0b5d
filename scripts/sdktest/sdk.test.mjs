// The gateway through the official openai npm package, as a judge's Node
// client would use it. Run by the Go test TestSDKNode in functions/gateway,
// which starts a gateway with stub backends and sets:
//
//   GATEWAY_URL    the gateway's base URL, ending in /v1
//   TOKEN          a valid JWT for tenant contoso (models llama, gpt-4o, ...)
//   EXPECT_TOKENS  completion tokens per answer (the stub repeats " tok")
//   BUDGET_TOKEN   a JWT for tenant budgeted (token quota 100 a month,
//                  output capped at 8); optional
//   TPM_TOKEN      a JWT for tenant tpm (30 tokens per minute, below any
//                  prompt); optional
//
// By hand: GATEWAY_URL=... TOKEN=... EXPECT_TOKENS=12 node --test sdk.test.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import OpenAI7 from 'openai7'; // openai 7.x, installed under another name

const baseURL = process.env.GATEWAY_URL;
const token = process.env.TOKEN;
const tokens = Number(process.env.EXPECT_TOKENS || '8');
if (!baseURL || !token) {
  throw new Error('set GATEWAY_URL and TOKEN (see the header of this file)');
}
const want = ' tok'.repeat(tokens);
const messages = [{ role: 'user', content: 'hi' }];

function client(apiKey = token) {
  return new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 30_000 });
}

test('chat completion', async () => {
  const res = await client().chat.completions.create({ model: 'llama', messages });
  assert.equal(res.choices[0].message.content, want);
  assert.equal(res.usage.completion_tokens, tokens);
  assert.equal(res.model, 'meta/Llama-3.1-8B');
});

test('streamed chat completion, every token and no usage unasked', async () => {
  const stream = await client().chat.completions.create({ model: 'llama', messages, stream: true });
  let text = '';
  let finish = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    assert.ok(!chunk.usage, `usage the client did not ask for: ${JSON.stringify(chunk)}`);
    for (const c of chunk.choices) {
      text += c.delta?.content ?? '';
      finish = c.finish_reason ?? finish;
    }
  }
  assert.equal(text, want);
  assert.equal(finish, 'stop');
});

test('streamed chat completion with include_usage', async () => {
  const stream = await client().chat.completions.create({
    model: 'llama', messages, stream: true, stream_options: { include_usage: true },
  });
  let last;
  for await (const chunk of stream) last = chunk;
  assert.deepEqual(last.choices, []);
  assert.equal(last.usage.completion_tokens, tokens);
});

test('bad token is a 401 APIError', async () => {
  await assert.rejects(
    client('not-a-jwt').chat.completions.create({ model: 'llama', messages }),
    (e) => {
      assert.ok(e instanceof OpenAI.AuthenticationError, `got ${e?.constructor?.name}: ${e}`);
      assert.equal(e.status, 401);
      assert.equal(e.code, 'invalid_token');
      assert.ok(e.requestID, 'no x-request-id');
      return true;
    },
  );
});

test('unknown model is a 404 APIError', async () => {
  await assert.rejects(
    client().chat.completions.create({ model: 'gpt-9', messages, stream: true }),
    (e) => {
      assert.ok(e instanceof OpenAI.NotFoundError, `got ${e?.constructor?.name}: ${e}`);
      assert.equal(e.status, 404);
      assert.equal(e.code, 'model_not_found');
      assert.equal(e.param, 'model');
      return true;
    },
  );
});

test('backend failure mid-stream throws, never ends cleanly', async () => {
  const stream = await client().chat.completions.create(
    { model: 'llama', messages, stream: true },
    { headers: { 'X-Stub-Fault': 'drop_after=3' } },
  );
  let chunks = 0;
  await assert.rejects(
    (async () => { for await (const _ of stream) chunks++; })(),
    (e) => {
      assert.ok(e instanceof OpenAI.APIError, `got ${e?.constructor?.name}: ${e}`);
      assert.equal(e.code, 'upstream_stream_error');
      return true;
    },
  );
  assert.equal(chunks, 3);
});

// Token budgets: the headers on answers, and the refusals as the SDK's
// RateLimitError with OpenAI's codes.
const budgetToken = process.env.BUDGET_TOKEN;
const tpmToken = process.env.TPM_TOKEN;

test('token quota: headers, then insufficient_quota', { skip: !budgetToken && 'BUDGET_TOKEN not set' }, async () => {
  let refused;
  for (let i = 0; i < 10 && !refused; i++) {
    try {
      const { data, response } = await client(budgetToken).chat.completions.create({ model: 'llama', messages }).withResponse();
      assert.equal(data.usage.completion_tokens, 8, 'the tenant\'s output cap was not applied');
      assert.equal(response.headers.get('x-ratelimit-limit-tokens'), '100');
      assert.ok(response.headers.get('x-ratelimit-remaining-tokens'));
      assert.ok(response.headers.get('x-ratelimit-reset-tokens'));
    } catch (e) {
      refused = e;
    }
  }
  assert.ok(refused instanceof OpenAI.RateLimitError, `got ${refused?.constructor?.name}: ${refused}`);
  assert.equal(refused.status, 429);
  assert.equal(refused.code, 'insufficient_quota');
  assert.equal(refused.type, 'insufficient_quota');
  // A monthly quota resets in days: no retry can succeed soon.
  assert.equal(refused.headers.get('retry-after'), null);
  assert.equal(refused.headers.get('x-should-retry'), 'false');
  assert.equal(refused.headers.get('x-ratelimit-limit-tokens'), '100');
});

// After the test above has spent the quota: with the SDK's default
// retries, openai 6.x and 7.x each raise the refusal after one attempt,
// at once (before, 6.x retried it and waited for minutes).
for (const [name, SDK] of [['openai 6', OpenAI], ['openai 7', OpenAI7]]) {
  test(`token quota: ${name} with default retries raises insufficient_quota at once`, { skip: !budgetToken && 'BUDGET_TOKEN not set' }, async () => {
    let attempts = 0;
    const counting = (url, init) => { attempts++; return fetch(url, init); };
    const c = new SDK({ baseURL, apiKey: budgetToken, timeout: 30_000, fetch: counting });
    const start = Date.now();
    await assert.rejects(c.chat.completions.create({ model: 'llama', messages }), (e) => {
      assert.ok(e instanceof SDK.RateLimitError, `got ${e?.constructor?.name}: ${e}`);
      assert.equal(e.code, 'insufficient_quota');
      return true;
    });
    const took = Date.now() - start;
    assert.equal(attempts, 1, `${attempts} attempts`);
    assert.ok(took < 10_000, `took ${took} ms`);
  });
}

test('tokens per minute: request_too_large_for_budget before any byte', { skip: !tpmToken && 'TPM_TOKEN not set' }, async () => {
  for (const stream of [false, true]) {
    await assert.rejects(
      client(tpmToken).chat.completions.create({ model: 'llama', messages, stream }),
      (e) => {
        assert.ok(e instanceof OpenAI.RateLimitError, `got ${e?.constructor?.name}: ${e}`);
        // Its least reservation is above the whole limit: it can never
        // run, so no retry-after.
        assert.equal(e.code, 'request_too_large_for_budget');
        assert.equal(e.type, 'tokens');
        assert.match(e.message, /tokens per min/);
        assert.equal(e.headers.get('retry-after'), null);
        assert.equal(e.headers.get('x-should-retry'), 'false');
        assert.equal(e.headers.get('x-ratelimit-limit-tokens'), '30');
        return true;
      },
    );
  }
});
