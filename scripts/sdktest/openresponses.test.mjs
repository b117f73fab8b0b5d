// The AI SDK's Open Responses provider (@ai-sdk/open-responses: a client
// written to the Open Responses specification, not to OpenAI's API)
// through the gateway: generateText and streamText, and a tool call
// executed, then answered. Run by functions/gateway TestSDKNodeOpenResponses
// (RESPONSES_URL is the gateway's …/v1/responses; the stub answers
// EXPECT_TOKENS words and calls the tool a request offers with arguments
// generated from its schema, strings being "stub").
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { z } from 'zod';
import { createOpenResponses } from '@ai-sdk/open-responses';
import { generateText, streamText, tool, stepCountIs } from 'ai';

const url = process.env.RESPONSES_URL;
const token = process.env.TOKEN;
const model = process.env.MODEL;
const tokens = Number(process.env.EXPECT_TOKENS || '8');
if (!url || !token || !model) {
  throw new Error('set RESPONSES_URL, TOKEN and MODEL (see functions/gateway TestSDKNodeOpenResponses)');
}
const want = ' tok'.repeat(tokens);
const provider = createOpenResponses({ name: 'llmgw', url, apiKey: token });

test('Open Responses provider: generateText and streamText', async () => {
  const res = await generateText({ model: provider(model), prompt: 'hi', maxRetries: 0 });
  assert.equal(res.text, want);
  assert.equal(res.finishReason, 'stop');
  assert.equal(res.usage.outputTokens, tokens);
  assert.ok(res.usage.inputTokens > 0);

  const stream = streamText({ model: provider(model), prompt: 'hi', maxRetries: 0 });
  let text = '';
  for await (const p of stream.fullStream) {
    if (p.type === 'error') throw p.error;
    if (p.type === 'text-delta') text += p.text;
  }
  assert.equal(text, want);
  assert.equal((await stream.usage).outputTokens, tokens);
});

test('Open Responses provider: a tool call, executed, then the answer (whole and streamed)', async () => {
  const calls = [];
  const tools = {
    weather: tool({
      description: 'The weather at a place',
      inputSchema: z.object({ place: z.string() }),
      execute: async ({ place }) => {
        calls.push(place);
        return { forecast: `sunny in ${place}` };
      },
    }),
  };
  const res = await generateText({ model: provider(model), prompt: 'Weather in Lisbon?', tools, stopWhen: stepCountIs(3), maxRetries: 0 });
  assert.deepEqual(calls, ['stub']);
  assert.equal(res.steps.length, 2);
  assert.equal(res.steps[0].finishReason, 'tool-calls');
  assert.deepEqual(res.steps[0].toolCalls.map((c) => [c.toolName, c.input]), [['weather', { place: 'stub' }]]);
  assert.equal(res.text, want);

  const stream = streamText({ model: provider(model), prompt: 'Weather in Porto?', tools, stopWhen: stepCountIs(3), maxRetries: 0 });
  const parts = new Set();
  let text = '';
  for await (const p of stream.fullStream) {
    parts.add(p.type);
    if (p.type === 'error') throw p.error;
    if (p.type === 'text-delta') text += p.text;
  }
  assert.equal(text, want);
  assert.deepEqual(calls, ['stub', 'stub']);
  for (const t of ['tool-call', 'tool-result']) assert.ok(parts.has(t), `no ${t} in ${[...parts]}`);
});
