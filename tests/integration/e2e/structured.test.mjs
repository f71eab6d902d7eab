// Structured output and enforced tool calls with the agent frameworks people
// build agent apps on, against `latentgate serve` over TLS: the Vercel AI SDK
// (`ai` + `@ai-sdk/openai`, on .chat() and .responses()) and LangChain
// (`@langchain/openai`). The served model has random weights, so every valid
// object and tool call here is the grammar's doing: the frameworks validate
// what they get (zod), and ajv checks the raw replies against their schemas.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import { generateObject, generateText, Output, tool, jsonSchema } from 'ai';
import { createOpenAI } from '@ai-sdk/openai';
import { ChatOpenAI } from '@langchain/openai';
import { z } from 'zod';
import Ajv from 'ajv';
import addFormats from 'ajv-formats';
import { server as connect } from './server.mjs';

let server, key, provider, langchain;
const ajv = new Ajv({ strict: false });
addFormats(ajv);  // uuid, date, email, ...: checked, not ignored

before(async () => {
  server = connect();
  key = await server.createKey('team-structured', 'structured output test');
  provider = createOpenAI({ apiKey: key, baseURL: server.url + '/v1' });
  langchain = (options = {}) =>
    new ChatOpenAI({ model: 'deepseek-chat', apiKey: key, configuration: { baseURL: server.url + '/v1' }, maxRetries: 0,
                     maxTokens: 400, ...options });
});

// Bounded strings and arrays keep the random model's replies short.
const person = z.object({
  name: z.string().max(12),
  age: z.number().int().min(0).max(150),
  role: z.enum(['admin', 'user', 'guest']),
  tags: z.array(z.string().max(8)).max(3),
});

// strict: the arguments must match the schema (Chat Completions' default is
// not strict: any JSON object, which the random model makes long).
const weather = tool({
  strict: true,
  description: 'Get the weather in a city',
  inputSchema: z.object({ city: z.string().max(16), unit: z.enum(['c', 'f']) }),
});
const clock = tool({
  strict: true,
  description: 'Get the time in a timezone',
  inputSchema: z.object({ zone: z.string().max(16) }),
});

for (const api of ['chat', 'responses']) {
  test(`AI SDK generateObject on .${api}() returns a schema-valid object`, async () => {
    for (let seed = 1; seed <= 3; ++seed) {
      const { object, finishReason } = await generateObject({
        model: provider[api]('deepseek-chat'), schema: person, prompt: 'Invent a person.', seed, maxOutputTokens: 400,
      });
      assert.equal(finishReason, 'stop');
      assert.deepEqual(person.parse(object), object);
    }
  });

  test(`AI SDK Output.object on .${api}() through generateText`, async () => {
    const { output } = await generateText({
      model: provider[api]('deepseek-chat'), output: Output.object({ schema: person }), prompt: 'Invent a person.',
      maxOutputTokens: 400,
    });
    assert.deepEqual(person.parse(output), output);
  });

  // One call per reply: with parallel calls on, the random model calls again
  // and again until maxOutputTokens cuts the last call, whose arguments the
  // SDK then cannot parse (a CI run saw five calls in 300 tokens).
  const oneCall = { openai: { parallelToolCalls: false } };
  test(`AI SDK toolChoice "required" and a named tool on .${api}()`, async () => {
    const required = await generateText({
      model: provider[api]('deepseek-chat'), tools: { weather, clock }, toolChoice: 'required',
      prompt: 'What is the weather in Paris?', maxOutputTokens: 300, providerOptions: oneCall,
    });
    assert.equal(required.finishReason, 'tool-calls');
    assert.equal(required.toolCalls.length, 1, JSON.stringify(required.content));
    for (const call of required.toolCalls) {
      const schema = call.toolName === 'weather' ? weather.inputSchema : clock.inputSchema;
      assert.doesNotThrow(() => schema.parse(call.input));
    }
    const named = await generateText({
      model: provider[api]('deepseek-chat'), tools: { weather, clock }, toolChoice: { type: 'tool', toolName: 'clock' },
      prompt: 'What time is it in Tokyo?', maxOutputTokens: 300, providerOptions: oneCall,
    });
    assert.equal(named.finishReason, 'tool-calls');
    assert.equal(named.toolCalls.length, 1);
    for (const call of named.toolCalls) {
      assert.equal(call.toolName, 'clock');
      assert.doesNotThrow(() => clock.inputSchema.parse(call.input));
    }
  });
}

test('AI SDK multi-turn on .responses(): the next turn refers to stored items', async () => {
  const model = provider.responses('deepseek-chat');
  const first = await generateText({ model, prompt: 'Say something short.', maxOutputTokens: 16 });
  const messages = [{ role: 'user', content: 'Say something short.' }, ...first.response.messages,
                    { role: 'user', content: 'And again.' }];
  // With store on (the default), the SDK sends the assistant's output as
  // item_reference items naming the stored ids.
  const second = await generateText({ model, messages, maxOutputTokens: 16 });
  assert.ok(['stop', 'length'].includes(second.finishReason));
  const body = second.request.body;
  const sent = typeof body === 'string' ? JSON.parse(body) : body;
  assert.ok(sent.input.some((item) => item.type === 'item_reference'), JSON.stringify(sent.input));
});

test('LangChain withStructuredOutput and bindTools with tool_choice', async () => {
  const structured = langchain().withStructuredOutput(person, { name: 'person' });
  const object = await structured.invoke('Invent a person.');
  assert.deepEqual(person.parse(object), object);

  const weatherTool = { name: 'weather', description: 'Get the weather in a city',
                        schema: z.object({ city: z.string().max(16), unit: z.enum(['c', 'f']) }) };
  const oneCall = { strict: true, parallel_tool_calls: false };  // as above: no call cut by maxTokens
  const named = await langchain().bindTools([weatherTool], { tool_choice: 'weather', ...oneCall }).invoke('Weather in Oslo?');
  assert.ok(named.tool_calls.length >= 1, JSON.stringify(named));
  for (const call of named.tool_calls) {
    assert.equal(call.name, 'weather');
    assert.doesNotThrow(() => weatherTool.schema.parse(call.args));
  }
  const required = await langchain().bindTools([weatherTool], { tool_choice: 'required', ...oneCall }).invoke('Weather?');
  assert.ok(required.tool_calls.length >= 1);
});

test('tool_choice auto with a response format: each reply is the format or tool calls', async () => {
  const answer = { type: 'object', properties: { city: { type: 'string', maxLength: 12 }, degrees: { type: 'integer' } },
                   required: ['city', 'degrees'], additionalProperties: false };
  const args = { type: 'object', properties: { city: { type: 'string', maxLength: 12 } }, required: ['city'],
                 additionalProperties: false };
  const validAnswer = ajv.compile(answer);
  const validArgs = ajv.compile(args);
  const post = (path, body) => server.request('POST', path, {
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body });
  const seen = { answer: 0, call: 0 };
  for (let seed = 1; seed <= 8; ++seed) {
    const chat = await post('/v1/chat/completions', {
      model: 'deepseek-chat', messages: [{ role: 'user', content: 'Weather in Oslo?' }], seed, temperature: 1,
      max_tokens: 300, tool_choice: 'auto',
      tools: [{ type: 'function', function: { name: 'weather', parameters: args, strict: true } }],
      response_format: { type: 'json_schema', json_schema: { name: 'answer', schema: answer, strict: true } },
    });
    assert.equal(chat.status, 200, chat.body);
    const choice = JSON.parse(chat.body).choices[0];
    if (choice.message.tool_calls?.length) {
      // The random model may call again and again until max_tokens cuts the
      // last call: every whole call is checked.
      assert.ok(['tool_calls', 'length'].includes(choice.finish_reason), choice.finish_reason);
      const whole = choice.finish_reason === 'length' ? choice.message.tool_calls.slice(0, -1)
                                                      : choice.message.tool_calls;
      for (const call of whole) {
        assert.equal(call.function.name, 'weather');
        assert.ok(validArgs(JSON.parse(call.function.arguments)), call.function.arguments);
      }
      ++seen.call;
    } else {
      assert.equal(choice.finish_reason, 'stop');
      assert.ok(validAnswer(JSON.parse(choice.message.content)), choice.message.content);
      ++seen.answer;
    }
    const responses = await post('/v1/responses', {
      model: 'deepseek-chat', input: 'Weather in Oslo?', temperature: 1, max_output_tokens: 300, store: false,
      tools: [{ type: 'function', name: 'weather', parameters: args }],
      text: { format: { type: 'json_schema', name: 'answer', schema: answer, strict: true } },
    });
    assert.equal(responses.status, 200, responses.body);
    const parseOr = (text) => { try { return JSON.parse(text); } catch { assert.fail(responses.body); } };
    const made = JSON.parse(responses.body);
    // max_output_tokens may cut the last item (of many calls, or a long
    // answer): the response says so (status incomplete); the rest is whole.
    const whole = made.status === 'incomplete' ? made.output.slice(0, -1) : made.output;
    for (const item of whole) {
      if (item.type === 'function_call') assert.ok(validArgs(parseOr(item.arguments)), item.arguments);
      if (item.type === 'message') assert.ok(validAnswer(parseOr(item.content[0].text)), responses.body);
    }
  }
  console.log('tool_choice auto with a format:', JSON.stringify(seen));
  // The seeds and the model's weights are fixed: both ways out are taken.
  assert.ok(seen.answer > 0 && seen.call > 0, JSON.stringify(seen));
});

test('raw json_schema, json_object and vLLM structured outputs validate with ajv', async () => {
  const schema = {
    type: 'object',
    properties: {
      id: { type: 'string', format: 'uuid' },
      when: { type: 'string', format: 'date' },
      items: { type: 'array', items: { $ref: '#/$defs/item' }, maxItems: 2 },
      note: { anyOf: [{ type: 'null' }, { type: 'string', maxLength: 10 }] },
    },
    required: ['id', 'when', 'items', 'note'],
    additionalProperties: false,
    $defs: { item: { type: 'object', properties: { n: { type: 'integer', minimum: 1, maximum: 9 } }, required: ['n'],
                     additionalProperties: false } },
  };
  const validate = ajv.compile(schema);
  const post = (path, body) => server.request('POST', path, {
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body });
  for (let seed = 1; seed <= 4; ++seed) {
    const r = await post('/v1/chat/completions', {
      model: 'deepseek-chat', messages: [{ role: 'user', content: 'Make one.' }], seed, temperature: 1, max_tokens: 400,
      response_format: { type: 'json_schema', json_schema: { name: 'thing', schema, strict: true } },
    });
    assert.equal(r.status, 200, r.body);
    const choice = JSON.parse(r.body).choices[0];
    assert.equal(choice.finish_reason, 'stop');
    const value = JSON.parse(choice.message.content);
    assert.ok(validate(value), JSON.stringify(validate.errors) + ' ' + choice.message.content);
  }
  const obj = await post('/v1/chat/completions', {
    model: 'deepseek-chat', messages: [{ role: 'user', content: 'JSON please.' }], max_tokens: 300,
    response_format: { type: 'json_object' },
  });
  const content = JSON.parse(obj.body).choices[0];
  if (content.finish_reason === 'stop') {
    assert.equal(typeof JSON.parse(content.message.content), 'object');
  } else {
    assert.equal(content.finish_reason, 'length');  // cut mid-object, as OpenAI reports it
  }
  const choice = await post('/v1/completions', {
    model: 'deepseek-chat', prompt: 'Pick:', max_tokens: 20, structured_outputs: { choice: ['red', 'green', 'blue'] },
  });
  assert.ok(['red', 'green', 'blue'].includes(JSON.parse(choice.body).choices[0].text), choice.body);
  const regex = await post('/v1/completions', {
    model: 'deepseek-chat', prompt: 'Code:', max_tokens: 20, guided_regex: '[A-Z]{3}-[0-9]{2}',
  });
  assert.match(JSON.parse(regex.body).choices[0].text, /^[A-Z]{3}-[0-9]{2}$/);
  // What the engine cannot enforce is refused, naming the keyword and its place.
  const bad = await post('/v1/chat/completions', {
    model: 'deepseek-chat', messages: [{ role: 'user', content: 'x' }],
    response_format: { type: 'json_schema', json_schema: { name: 'x', schema: {
      type: 'object', properties: { a: { type: 'object', patternProperties: { '^x': { type: 'string' } } } } } } },
  });
  assert.equal(bad.status, 400, bad.body);
  const error = JSON.parse(bad.body).error;
  assert.match(error.message, /patternProperties/);
  assert.match(error.message, /\/properties\/a/);
});
