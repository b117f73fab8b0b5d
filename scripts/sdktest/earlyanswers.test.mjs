// Early answers through the official openai npm package: a
// prompt over the gateway's max_body_bytes, or a bad token with a large
// body, is answered while the SDK is still uploading; the SDK must read
// that answer, not a reset ("Connection error", retried twice). Run by
// the Go test TestSDKNodeEarlyAnswers, which sets GATEWAY_URL and TOKEN
// (a gateway with the default 1 MiB body cap).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const baseURL = process.env.GATEWAY_URL;
const token = process.env.TOKEN;
if (!baseURL || !token) {
  throw new Error('set GATEWAY_URL and TOKEN');
}
// 3 MB of prompt: three times the gateway's 1 MiB body cap.
const messages = [{ role: 'user', content: 'x'.repeat(3_000_000) }];

for (const [name, apiKey, status, code] of [
  ['a 3 MB prompt is a 413 APIError, not a connection error', token, 413, 'request_too_large'],
  ['a bad token with a 3 MB prompt is a 401 APIError', 'not-a-jwt', 401, 'invalid_token'],
]) {
  test(name, async () => {
    // The SDK's default retries: a connection error would be retried
    // twice; the answer is final.
    const client = new OpenAI({ baseURL, apiKey, timeout: 30_000 });
    for (let i = 0; i < 3; i++) {
      await assert.rejects(client.chat.completions.create({ model: 'llama', messages }), (e) => {
        assert.ok(e instanceof OpenAI.APIError && !(e instanceof OpenAI.APIConnectionError),
          `try ${i}: got ${e?.constructor?.name}: ${e}`);
        assert.equal(e.status, status);
        assert.equal(e.code, code);
        assert.ok(e.requestID, 'no x-request-id');
        return true;
      });
    }
  });
}
