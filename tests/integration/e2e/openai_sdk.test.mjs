// The official `openai` npm SDK against `latentgate serve` over TLS, the
// generated local CA trusted through NODE_EXTRA_CA_CERTS (run.sh starts the
// server and sets it). With random weights the text is noise; the protocol,
// usage accounting and cache hits are what is tested.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { server as connect } from './server.mjs';

let server, keyA, keyB, clientA, clientB;

before(async () => {
  server = connect();
  keyA = await server.createKey('team-a', 'sdk test a');
  keyB = await server.createKey('team-b', 'sdk test b');
  clientA = new OpenAI({ apiKey: keyA, baseURL: server.url + '/v1', maxRetries: 0 });
  clientB = new OpenAI({ apiKey: keyB, baseURL: server.url + '/v1', maxRetries: 0 });
});


function checkUsage(u) {
  assert.ok(u.prompt_tokens > 0);
  assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);
  assert.equal(u.prompt_cache_hit_tokens + u.prompt_cache_miss_tokens, u.prompt_tokens);
  assert.equal(u.prompt_tokens_details.cached_tokens, u.prompt_cache_hit_tokens);
}

// The demo model's replies end at EOS after a few dozen tokens (its EOS row
// is shaped for that), so a reply either ran to its cap or stopped before it.
function checkFinish(finish, completionTokens, maxTokens) {
  if (finish === 'length') assert.equal(completionTokens, maxTokens);
  else assert.ok(finish === 'stop' && completionTokens >= 1 && completionTokens <= maxTokens, `${finish} ${completionTokens}`);
}

test('models lists the served model and its aliases', async () => {
  const models = await clientA.models.list();
  const ids = models.data.map((m) => m.id);
  assert.ok(ids.includes(server.model));
  assert.ok(ids.includes('deepseek-chat'));
  // models.retrieve: each listed id, percent-encoded by the SDK; an unknown one is 404.
  for (const id of ids) assert.equal((await clientA.models.retrieve(id)).id, id);
  await assert.rejects(clientA.models.retrieve('gpt-4o'), (e) => e.status === 404 && e.code === 'model_not_found');
});

test('chat, not streamed, with usage', async () => {
  const r = await clientA.chat.completions.create({
    model: 'deepseek-chat', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 8, temperature: 0,
  });
  assert.equal(r.object, 'chat.completion');
  checkFinish(r.choices[0].finish_reason, r.usage.completion_tokens, 8);
  checkUsage(r.usage);
});

test('chat, streamed, with include_usage', async () => {
  const stream = await clientA.chat.completions.create({
    model: server.model, messages: [{ role: 'developer', content: 'Be brief.' }, { role: 'user', content: 'Hi' }],
    max_tokens: 6, stream: true, stream_options: { include_usage: true },
  });
  let text = '', usage = null, finish = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.delta?.content ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  checkFinish(finish, usage.completion_tokens, 6);
  checkUsage(usage);
});

test('a long system prompt is a cache hit the second time, for its team only', async () => {
  const system = 'You are a careful coding agent. '.repeat(120);
  const ask = (client) => client.chat.completions.create({
    model: server.model, temperature: 0, max_tokens: 5,
    messages: [{ role: 'system', content: system }, { role: 'user', content: 'List the files.' }],
  });
  const first = await ask(clientA);
  const second = await ask(clientA);
  const p = second.usage.prompt_tokens;
  assert.equal(first.usage.prompt_cache_hit_tokens, 0);
  assert.equal(second.usage.prompt_cache_hit_tokens, Math.floor((p - 1) / 64) * 64);  // every whole cached block
  assert.equal(second.choices[0].message.content, first.choices[0].message.content);  // greedy: the same reply
  const other = await ask(clientB);
  assert.equal(other.usage.prompt_cache_hit_tokens, 0);  // another team's namespace
});

test('tool definitions and a tool-call round trip are accepted', async () => {
  const tools = [{ type: 'function', function: { name: 'read_file', description: 'Read a file',
    parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] } } }];
  const r = await clientA.chat.completions.create({
    model: server.model, max_tokens: 4, tools, tool_choice: 'auto',
    messages: [
      { role: 'user', content: 'Read README.md' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'read_file', arguments: '{"path":"README.md"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '# LatentGate' },
    ],
  });
  assert.ok(['length', 'stop', 'tool_calls'].includes(r.choices[0].finish_reason));
  checkUsage(r.usage);
});

test('responses, not streamed and streamed', async () => {
  const r = await clientA.responses.create({ model: server.model, instructions: 'Be brief.', input: 'Hello', max_output_tokens: 5, temperature: 0 });
  assert.equal(r.object, 'response');
  assert.ok(r.usage.input_tokens > 0);
  checkFinish(r.status === 'incomplete' ? 'length' : 'stop', r.usage.output_tokens, 5);
  if (r.status === 'incomplete') assert.equal(r.incomplete_details.reason, 'max_output_tokens');
  assert.ok('cached_tokens' in r.usage.input_tokens_details);
  const stream = await clientA.responses.create({ model: server.model, input: [{ role: 'user', content: 'Count to ten.' }], max_output_tokens: 4, temperature: 0, stream: true, store: false });
  const types = [];
  let completed = null;
  for await (const event of stream) {
    types.push(event.type);
    if (event.type === 'response.completed' || event.type === 'response.incomplete') completed = event.response;
  }
  assert.equal(types[0], 'response.created');
  assert.ok(types.includes('response.output_text.delta'));
  assert.ok(completed !== null);
  checkFinish(completed.status === 'incomplete' ? 'length' : 'stop', completed.usage.output_tokens, 4);
});

// include: ["message.output_text.logprobs"] with top_logprobs, in the
// shapes the SDK types: an output_text part's logprobs with bytes, the
// stream's delta and done events' without. A reply that ends at EOS counts
// the EOS token in output_tokens, and it is no text.
function checkOutputTextLogprobs(part, top) {
  assert.equal(part.type, 'output_text');
  for (const lp of part.logprobs) {
    assert.equal(typeof lp.token, 'string');
    assert.ok(lp.logprob <= 0, `${lp.logprob}`);
    assert.ok(Array.isArray(lp.bytes));
    assert.equal(lp.top_logprobs.length, top);
    for (const alt of lp.top_logprobs) assert.ok(alt.logprob <= 0 && Array.isArray(alt.bytes));
  }
  assert.equal(Buffer.from(part.logprobs.flatMap((lp) => lp.bytes)).toString('utf8'), part.text);
  return part.logprobs.length;
}

test('responses with output_text logprobs, not streamed and streamed', async () => {
  const body = { model: server.model, input: 'Hello', max_output_tokens: 5, include: ['message.output_text.logprobs'], top_logprobs: 2 };
  const r = await clientA.responses.create(body);
  assert.equal(r.top_logprobs, 2);
  let tokens = 0;
  for (const item of r.output) {
    if (item.type === 'message') for (const part of item.content) tokens += checkOutputTextLogprobs(part, 2);
  }
  const reasoning = r.usage.output_tokens_details.reasoning_tokens;
  assert.ok(tokens >= r.usage.output_tokens - reasoning - 1 && tokens <= r.usage.output_tokens - reasoning, `${tokens} of ${r.usage.output_tokens}`);

  const stream = await clientA.responses.create({ ...body, stream: true });
  let deltas = 0, done = 0, completed = null;
  for await (const event of stream) {
    if (event.type === 'response.output_text.delta') {
      for (const lp of event.logprobs) assert.ok(lp.logprob <= 0 && lp.top_logprobs.length === 2);
      deltas += event.logprobs.length;
    }
    if (event.type === 'response.output_text.done') done += event.logprobs.length;
    if (event.type === 'response.completed' || event.type === 'response.incomplete') completed = event.response;
  }
  assert.ok(completed !== null);
  let parts = 0;
  for (const item of completed.output) {
    if (item.type === 'message') for (const part of item.content) parts += checkOutputTextLogprobs(part, 2);
  }
  assert.equal(deltas, parts);
  assert.equal(done, parts);
});

test('stored responses: previous_response_id continues from the cache; store:false, other keys, GET, DELETE', async () => {
  const instructions = 'You are a careful coding agent. Read before you write, and say what you changed. '.repeat(40);
  const first = await clientA.responses.create({
    model: server.model, instructions, input: 'Describe the layout of this repository. '.repeat(20),
    max_output_tokens: 6, temperature: 0,
  });
  assert.equal(first.store, true);
  assert.ok(['completed', 'incomplete'].includes(first.status));
  // The conversation continues by id: only the new message is sent, and the
  // prompt is the earlier turn's tokens first, so the cache finds them.
  const second = await clientA.responses.create({
    model: server.model, instructions, previous_response_id: first.id,
    input: [{ role: 'user', content: 'And where are the tests?' }], max_output_tokens: 4, temperature: 0,
  });
  assert.equal(second.previous_response_id, first.id);
  const p1 = first.usage.input_tokens;
  assert.ok(second.usage.input_tokens > p1, `${second.usage.input_tokens} > ${p1}`);
  const cached = second.usage.input_tokens_details.cached_tokens;
  assert.ok(cached > 0 && cached >= Math.floor(p1 / 64) * 64, `cached ${cached} covers the first prompt's ${p1} tokens`);
  // A chain: the third request, streamed, carries both earlier turns.
  const stream = await clientA.responses.create({
    model: server.model, instructions, previous_response_id: second.id, input: 'Thanks.', max_output_tokens: 3,
    stream: true,
  });
  let third = null;
  for await (const event of stream) {
    if (event.type === 'response.completed' || event.type === 'response.incomplete') third = event.response;
  }
  assert.ok(third.usage.input_tokens > second.usage.input_tokens);
  assert.ok(third.usage.input_tokens_details.cached_tokens >= Math.floor(second.usage.input_tokens / 64) * 64);

  // store: false keeps nothing: its id is not found.
  const notFound = (e) => e instanceof OpenAI.BadRequestError && e.code === 'previous_response_not_found' &&
    e.param === 'previous_response_id';
  const unstored = await clientA.responses.create({ model: server.model, input: 'Hi', max_output_tokens: 2, store: false });
  assert.equal(unstored.store, false);
  await assert.rejects(clientA.responses.create({ model: server.model, previous_response_id: unstored.id, input: 'Go on', max_output_tokens: 2 }), notFound);
  await assert.rejects(clientA.responses.retrieve(unstored.id), (e) => e instanceof OpenAI.NotFoundError);
  // Another key, even of the same team, sees nothing, exactly as for an unknown id.
  const keyA2 = await server.createKey('team-a', 'sdk test a2');
  const clientA2 = new OpenAI({ apiKey: keyA2, baseURL: server.url + '/v1', maxRetries: 0 });
  await assert.rejects(clientA2.responses.create({ model: server.model, previous_response_id: first.id, input: 'x', max_output_tokens: 2 }), notFound);
  await assert.rejects(clientB.responses.retrieve(first.id), (e) => e instanceof OpenAI.NotFoundError);
  const raw = (method, key, id) => server.request(method, `/v1/responses/${id}`, { headers: { authorization: `Bearer ${key}` } });
  const theirs = await raw('GET', keyA2, first.id);
  const unknown = await raw('GET', keyA2, 'resp_' + 'x'.repeat(first.id.length - 5));
  assert.equal(theirs.status, 404);
  assert.equal(theirs.status, unknown.status);
  assert.equal(theirs.body.replace(first.id, 'ID'), unknown.body.replace(/resp_x+/, 'ID'));
  assert.equal((await raw('DELETE', keyA2, first.id)).status, 404);

  // GET returns the stored object; DELETE removes it, for its owner only.
  const got = await clientA.responses.retrieve(first.id);
  assert.equal(got.id, first.id);
  assert.equal(got.status, first.status);
  assert.deepEqual(got.output, first.output);
  assert.deepEqual(got.usage, first.usage);
  const deleted = await raw('DELETE', keyA, first.id);
  assert.equal(deleted.status, 200);
  assert.deepEqual(JSON.parse(deleted.body), { id: first.id, object: 'response', deleted: true });
  await assert.rejects(clientA.responses.retrieve(first.id), (e) => e instanceof OpenAI.NotFoundError);
  await assert.rejects(clientA.responses.create({ model: server.model, previous_response_id: first.id, input: 'x', max_output_tokens: 2 }), notFound);
  await clientA.responses.delete(second.id);  // the SDK's own call
  await assert.rejects(clientA.responses.retrieve(second.id), (e) => e instanceof OpenAI.NotFoundError);
  // The chain was expanded when the third response was stored: it still
  // continues. Instructions are not carried over (as at OpenAI): without them
  // the prompt is shorter than the third's, which had them.
  const fourth = await clientA.responses.create({ model: server.model, instructions, previous_response_id: third.id, input: 'Bye.', max_output_tokens: 2 });
  assert.ok(fourth.usage.input_tokens > third.usage.input_tokens);
  const bare = await clientA.responses.create({ model: server.model, previous_response_id: third.id, input: 'Bye.', max_output_tokens: 2, store: false });
  assert.ok(bare.usage.input_tokens < third.usage.input_tokens);
});

test('completions with echo and logprobs score the prompt', async () => {
  const r = await clientA.completions.create({ model: server.model, prompt: 'The cat sat on the mat', max_tokens: 0, echo: true, logprobs: 2 });
  const lp = r.choices[0].logprobs;
  assert.ok(lp.tokens.length > 3);
  assert.equal(lp.token_logprobs[0], null);
  assert.ok(lp.token_logprobs.slice(1).every((x) => typeof x === 'number' && x <= 0));
  assert.equal(r.choices[0].text, 'The cat sat on the mat');
});

test('errors: a bad key, a bad parameter, an overlong prompt', async () => {
  const bad = new OpenAI({ apiKey: 'lg-wrong', baseURL: server.url + '/v1', maxRetries: 0 });
  await assert.rejects(bad.chat.completions.create({ model: server.model, messages: [{ role: 'user', content: 'x' }] }),
    (e) => e instanceof OpenAI.AuthenticationError);
  await assert.rejects(clientA.chat.completions.create({ model: server.model, messages: [{ role: 'user', content: 'x' }], temperature: 7 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'temperature');
  await assert.rejects(clientA.chat.completions.create({ model: server.model, messages: [{ role: 'user', content: 'x' }], max_tokens: 10_000_000 }),
    (e) => e instanceof OpenAI.BadRequestError && e.code === 'context_length_exceeded');
  await assert.rejects(clientA.chat.completions.create({ model: 'gpt-nonexistent', messages: [{ role: 'user', content: 'x' }] }),
    (e) => e instanceof OpenAI.NotFoundError);
});

test('32 concurrent streams all complete with correct usage', async () => {
  const runs = Array.from({ length: 32 }, (_, i) => (async () => {
    const stream = await clientA.chat.completions.create({
      model: server.model, max_tokens: 8, stream: true, stream_options: { include_usage: true },
      messages: [{ role: 'user', content: `Request number ${i}` }],
    });
    let usage = null, pieces = 0, finish = null;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      if (chunk.choices[0]?.delta?.content !== undefined) pieces++;
      if (chunk.choices[0]?.finish_reason) finish = chunk.choices[0].finish_reason;
    }
    checkFinish(finish, usage.completion_tokens, 8);
    checkUsage(usage);
    return pieces;
  })());
  const pieces = await Promise.all(runs);
  assert.equal(pieces.length, 32);
});
