// The agent frameworks users run, unchanged, through the gateway's
// Responses API: @openai/agents (its default: Responses) with one tool,
// the Vercel AI SDK's default openai('…') (Responses) with generateText,
// streamText, a tool call and Output.object, and LangChain's ChatOpenAI
// with useResponsesApi. Run by functions/gateway TestSDKNodeAgents
// (GATEWAY_URL ends in /v1; the stub answers EXPECT_TOKENS words, calls
// the tool a request offers with arguments generated from its schema,
// strings being "stub", and answers a schema with JSON that satisfies it).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { z } from 'zod';

const baseURL = process.env.GATEWAY_URL;
const token = process.env.TOKEN;
const tokens = Number(process.env.EXPECT_TOKENS || '8');
if (!baseURL || !token) {
  throw new Error('set GATEWAY_URL and TOKEN (see functions/gateway TestSDKNodeAgents)');
}
const want = ' tok'.repeat(tokens);
const model = 'llama';
const weatherSchema = z.object({ city: z.string(), days: z.number().int().min(2) });

test('@openai/agents: a run that calls one tool, then answers', async () => {
  const { Agent, Runner, OpenAIProvider, tool, setTracingDisabled } = await import('@openai/agents');
  setTracingDisabled(true); // no trace export to OpenAI
  const calls = [];
  const getWeather = tool({
    name: 'get_weather',
    description: 'The weather in a city',
    parameters: z.object({ city: z.string() }),
    execute: async ({ city }) => {
      calls.push(city);
      return `sunny in ${city}`;
    },
  });
  const agent = new Agent({ name: 'forecaster', instructions: 'Use get_weather.', model, tools: [getWeather] });
  const runner = new Runner({ modelProvider: new OpenAIProvider({ apiKey: token, baseURL }) });

  const result = await runner.run(agent, 'What is the weather in Paris?');
  assert.deepEqual(calls, ['stub']);
  assert.equal(result.finalOutput, want);
  const kinds = result.newItems.map((i) => i.type);
  assert.deepEqual(kinds, ['tool_call_item', 'tool_call_output_item', 'message_output_item']);
  assert.equal(result.newItems[1].output, 'sunny in stub');
  assert.equal(result.rawResponses.length, 2);
  for (const r of result.rawResponses) assert.ok(r.usage.inputTokens > 0 && r.usage.outputTokens > 0, JSON.stringify(r.usage));

  // Streamed: the same run, event by event.
  const streamed = await runner.run(agent, 'And in Oslo?', { stream: true });
  const events = new Set();
  for await (const ev of streamed) events.add(ev.type === 'run_item_stream_event' ? ev.name : ev.type);
  await streamed.completed;
  assert.equal(streamed.finalOutput, want);
  assert.deepEqual(calls, ['stub', 'stub']);
  for (const e of ['raw_model_stream_event', 'tool_called', 'tool_output', 'message_output_created']) assert.ok(events.has(e), `no ${e} in ${[...events]}`);
});

test('@openai/agents: outputType is structured output (text.format json_schema)', async () => {
  const { Agent, Runner, OpenAIProvider, setTracingDisabled } = await import('@openai/agents');
  setTracingDisabled(true);
  const agent = new Agent({ name: 'extractor', instructions: 'Extract.', model, outputType: weatherSchema });
  const runner = new Runner({ modelProvider: new OpenAIProvider({ apiKey: token, baseURL }) });
  const result = await runner.run(agent, 'Paris, three days');
  assert.deepEqual(result.finalOutput, { city: 'stub', days: 2 });
});

test('Vercel AI SDK (openai(…) = Responses): generateText and streamText', async () => {
  const { createOpenAI } = await import('@ai-sdk/openai');
  const { generateText, streamText } = await import('ai');
  const openai = createOpenAI({ baseURL, apiKey: token });
  const res = await generateText({ model: openai(model), prompt: 'hi', maxRetries: 0 });
  assert.equal(res.text, want);
  assert.equal(res.finishReason, 'stop');
  assert.equal(res.usage.outputTokens, tokens);
  assert.ok(res.usage.inputTokens > 0);

  const stream = streamText({ model: openai(model), prompt: 'hi', maxRetries: 0 });
  let text = '';
  for await (const delta of stream.textStream) text += delta;
  assert.equal(text, want);
  assert.equal((await stream.usage).outputTokens, tokens);
});

test('Vercel AI SDK: a tool call, executed, then the answer (generateText and streamText)', async () => {
  const { createOpenAI } = await import('@ai-sdk/openai');
  const { generateText, streamText, tool, stepCountIs } = await import('ai');
  const openai = createOpenAI({ baseURL, apiKey: token });
  const calls = [];
  const tools = {
    get_weather: tool({
      description: 'The weather in a city',
      inputSchema: z.object({ city: z.string() }),
      execute: async ({ city }) => {
        calls.push(city);
        return { forecast: `sunny in ${city}` };
      },
    }),
  };
  const res = await generateText({ model: openai(model), prompt: 'Weather in Paris?', tools, stopWhen: stepCountIs(3), maxRetries: 0 });
  assert.deepEqual(calls, ['stub']);
  assert.equal(res.steps.length, 2);
  assert.equal(res.steps[0].finishReason, 'tool-calls');
  assert.deepEqual(res.steps[0].toolCalls.map((c) => [c.toolName, c.input]), [['get_weather', { city: 'stub' }]]);
  assert.deepEqual(res.steps[0].toolResults[0].output, { forecast: 'sunny in stub' });
  assert.equal(res.text, want);

  const stream = streamText({ model: openai(model), prompt: 'Weather in Oslo?', tools, stopWhen: stepCountIs(3), maxRetries: 0 });
  const parts = new Set();
  let text = '';
  for await (const p of stream.fullStream) {
    parts.add(p.type);
    if (p.type === 'text-delta') text += p.text;
    if (p.type === 'error') throw p.error;
  }
  assert.equal(text, want);
  assert.deepEqual(calls, ['stub', 'stub']);
  for (const t of ['tool-input-start', 'tool-input-delta', 'tool-call', 'tool-result']) assert.ok(parts.has(t), `no ${t} in ${[...parts]}`);
});

test('Vercel AI SDK: Output.object (structured output), whole and streamed', async () => {
  const { createOpenAI } = await import('@ai-sdk/openai');
  const { generateText, streamText, Output } = await import('ai');
  const openai = createOpenAI({ baseURL, apiKey: token });
  const res = await generateText({ model: openai(model), prompt: 'Paris, three days', output: Output.object({ schema: weatherSchema }), maxRetries: 0 });
  assert.deepEqual(res.output, { city: 'stub', days: 2 });

  const stream = streamText({ model: openai(model), prompt: 'Paris, three days', output: Output.object({ schema: weatherSchema }), maxRetries: 0 });
  let partials = 0;
  for await (const _ of stream.partialOutputStream) partials++;
  assert.ok(partials > 0);
  assert.deepEqual(await stream.output, { city: 'stub', days: 2 });
});

test('Vercel AI SDK openai.chat(…) (Chat Completions): a streamed tool call, then Output.object', async () => {
  const { createOpenAI } = await import('@ai-sdk/openai');
  const { generateText, streamText, tool, stepCountIs, Output } = await import('ai');
  const openai = createOpenAI({ baseURL, apiKey: token });
  const calls = [];
  const tools = {
    get_weather: tool({
      description: 'The weather in a city',
      inputSchema: z.object({ city: z.string() }),
      execute: async ({ city }) => {
        calls.push(city);
        return `sunny in ${city}`;
      },
    }),
  };
  const stream = streamText({ model: openai.chat(model), prompt: 'Weather in Paris?', tools, stopWhen: stepCountIs(3), maxRetries: 0 });
  let text = '';
  for await (const p of stream.fullStream) {
    if (p.type === 'text-delta') text += p.text;
    if (p.type === 'error') throw p.error;
  }
  assert.deepEqual(calls, ['stub']);
  assert.equal(text, want);
  const steps = await stream.steps;
  assert.equal(steps[0].finishReason, 'tool-calls');
  const res = await generateText({ model: openai.chat(model), prompt: 'Paris, three days', output: Output.object({ schema: weatherSchema }), maxRetries: 0 });
  assert.deepEqual(res.output, { city: 'stub', days: 2 });
});

test('LangChain ChatOpenAI (useResponsesApi): invoke, stream, a tool call and its result, withStructuredOutput', async () => {
  const { ChatOpenAI } = await import('@langchain/openai');
  const { ToolMessage, HumanMessage } = await import('@langchain/core/messages');
  const { tool } = await import('@langchain/core/tools');
  const llm = new ChatOpenAI({ model, apiKey: token, configuration: { baseURL }, useResponsesApi: true, maxRetries: 0 });

  const msg = await llm.invoke('hi');
  assert.equal(msg.text, want);
  assert.equal(msg.usage_metadata.output_tokens, tokens);
  assert.ok(msg.usage_metadata.input_tokens > 0);
  assert.match(msg.response_metadata.id ?? msg.id ?? '', /^resp_|^msg_/);

  let streamed = '';
  for await (const chunk of await llm.stream('hi')) streamed += chunk.text;
  assert.equal(streamed, want);

  const getWeather = tool(async ({ city }) => `sunny in ${city}`, {
    name: 'get_weather',
    description: 'The weather in a city',
    schema: z.object({ city: z.string() }),
  });
  const withTools = llm.bindTools([getWeather]);
  const ask = new HumanMessage('Weather in Paris?');
  const call = await withTools.invoke([ask]);
  assert.equal(call.tool_calls.length, 1);
  assert.equal(call.tool_calls[0].name, 'get_weather');
  assert.deepEqual(call.tool_calls[0].args, { city: 'stub' });
  const output = await getWeather.invoke(call.tool_calls[0]);
  assert.ok(output instanceof ToolMessage);
  const answer = await withTools.invoke([ask, call, output]);
  assert.equal(answer.tool_calls.length, 0);
  assert.equal(answer.text, want);

  const structured = await llm.withStructuredOutput(weatherSchema).invoke('Paris, three days');
  assert.deepEqual(structured, { city: 'stub', days: 2 });
});

test('openai: a background response resumed as a stream (responses.retrieve with stream: true, starting_after)', async () => {
  const { default: OpenAI } = await import('openai');
  const c = new OpenAI({ baseURL, apiKey: token, maxRetries: 0 });
  const bg = await c.responses.create({ model, input: 'hi', background: true });
  assert.equal(bg.status, 'queued');
  const read = async (query) => {
    const events = [];
    for await (const ev of await c.responses.retrieve(bg.id, query)) events.push(ev);
    return events;
  };
  const all = await read({ stream: true });
  assert.deepEqual(all.map((e) => e.sequence_number), [...all.keys()]);
  assert.equal(all.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join(''), want);
  assert.equal(all.at(-1).type, 'response.completed');
  assert.equal(all.at(-1).response.id, bg.id);
  const rest = await read({ stream: true, starting_after: 3 });
  assert.equal(rest[0].sequence_number, 4);
  assert.equal(rest.length, all.length - 4);
});
