// @openai/agents as a newcomer runs it on `make run`: an Agent with no
// model (the SDK then asks for its default, gpt-5.6-luna in 0.20.0,
// which the demo serves by alias) and only the gateway's base URL and a
// token. Run by functions/gateway TestDemoAgents (GATEWAY_URL ends in /v1).
import { test } from 'node:test';
import assert from 'node:assert/strict';

const baseURL = process.env.GATEWAY_URL;
const token = process.env.TOKEN;
if (!baseURL || !token) {
  throw new Error('set GATEWAY_URL and TOKEN (see functions/gateway TestDemoAgents)');
}

test('@openai/agents with no model set answers through the gateway', async () => {
  const { Agent, Runner, OpenAIProvider, setTracingDisabled } = await import('@openai/agents');
  setTracingDisabled(true);
  const agent = new Agent({ name: 'newcomer', instructions: 'Answer briefly.' });
  const runner = new Runner({ modelProvider: new OpenAIProvider({ apiKey: token, baseURL }) });
  const res = await runner.run(agent, 'Hello!');
  assert.ok(typeof res.finalOutput === 'string' && res.finalOutput.trim().length > 0, `final output ${res.finalOutput}`);
});
