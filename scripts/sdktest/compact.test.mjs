// The Responses API's compaction and input counting as the openai SDK
// calls them (client.responses.compact, client.responses.inputTokens.count):
// POST /v1/responses/compact and /v1/responses/input_tokens through the
// gateway, and the compacted window sent back as the next request's input,
// as a client that compacts through /responses/compact does. Run by
// functions/gateway TestCodexCompacts (GATEWAY_URL ends in /v1; MODEL is a
// model on a pool that serves compaction).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const baseURL = process.env.GATEWAY_URL;
const token = process.env.TOKEN;
const model = process.env.MODEL;
if (!baseURL || !token || !model) {
  throw new Error('set GATEWAY_URL, TOKEN and MODEL (see functions/gateway TestCodexCompacts)');
}
const client = new OpenAI({ baseURL, apiKey: token, maxRetries: 0 });

test('responses.compact, then the compacted window continued', async () => {
  const input = [
    { role: 'user', content: 'Run the shell command `echo stub`.' },
    { type: 'function_call', call_id: 'call_1', name: 'shell', arguments: '{"cmd":"echo stub"}' },
    { type: 'function_call_output', call_id: 'call_1', output: 'stub' },
  ];
  const compacted = await client.responses.compact({ model, input });
  assert.equal(compacted.object, 'response.compaction');
  const items = compacted.output.filter((o) => o.type === 'compaction');
  assert.equal(items.length, 1, JSON.stringify(compacted.output));
  assert.ok(items[0].encrypted_content, JSON.stringify(items[0]));
  assert.ok(compacted.usage.input_tokens > 0 && compacted.usage.output_tokens > 0, JSON.stringify(compacted.usage));

  const next = await client.responses.create({
    model,
    input: [...compacted.output, { role: 'user', content: 'What did it print?' }],
  });
  assert.equal(next.status, 'completed');
  assert.ok(next.output_text.length > 0);
});

test('responses.inputTokens.count', async () => {
  const n = await client.responses.inputTokens.count({ model, input: 'count me' });
  assert.equal(n.object, 'response.input_tokens');
  assert.ok(n.input_tokens > 0, JSON.stringify(n));
});
