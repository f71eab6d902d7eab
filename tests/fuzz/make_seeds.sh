#!/usr/bin/env bash
# Seeds a fuzz target's corpus from the golden fixtures (texts, chats, templates).
set -euo pipefail
target=$1 out=$2
fixtures=$(cd "$(dirname "${BASH_SOURCE[0]}")/../fixtures" && pwd)
assets=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../assets" && pwd)
python3 - "$target" "$out" "$fixtures" "$assets" <<'PY'
import json, os, sys, glob
target, out, fixtures, assets = sys.argv[1:5]
golden = json.load(open(os.path.join(fixtures, "tokenizer-golden.json")))
seeds = []
if target == "http_request_fuzz":
    # Two control bytes (piece sizes, limits), then what a client sends.
    reqs = [
        b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer sk-test\r\nContent-Length: 46\r\n\r\n"
        b'{"model":"m","messages":[],"stream":true,"n":1}',
        b"POST /v1/responses HTTP/1.1\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n"
        b"5\r\nhello\r\n3;ext=1\r\nabc\r\n0\r\nTrailer: x\r\n\r\n",
        b"GET /a HTTP/1.1\r\n\r\nGET /b?x=1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\nHEAD / HTTP/1.1\r\n\r\n",
        b"GET http://example.com:8443/v1/models?q HTTP/1.1\r\nHost: example.com\r\n\r\n",
        b"DELETE /admin/keys/key_1 HTTP/1.1\r\nX-Multi: a\r\nx-multi: b\r\nFolded: a\r\n b\r\n\r\n",
        b"GET / HTTP/2.0\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    ]
    seeds = [bytes([c, l]) + r for r in reqs for c, l in ((0, 0), (0x9b, 0), (0x27, 0x41))]
elif target == "tokenizer_fuzz":
    seeds = [t["text"].encode() for t in golden["texts"]] + [c["text"].encode() for c in golden["chats"]]
elif target.startswith("openai_"):
    # Request bodies for the endpoint, and model output with reasoning and
    # tool calls (the targets also read each input as generated text).
    B, E = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
    CB, CE, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
    call = [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]
    outputs = ["<think>plan</think>\n\nok" + B + CB + "function" + SEP + "get_weather\n```json\n{\"city\": \"Oslo\"}\n```" + CE + E,
               "text" + B + CB + "get_weather" + SEP + "{}" + CE + E]
    if target == "openai_chat_fuzz":
        bodies = [{"model": "m", "messages": c["messages"]} for c in golden["chats"]]
        bodies.append({"model": "m", "stream": True, "stream_options": {"include_usage": True}, "tools": tools,
                       "tool_choice": "required", "max_tokens": 100, "temperature": 0.2, "stop": ["\n\n"],
                       "logprobs": True, "top_logprobs": 3, "response_format": {"type": "json_object"},
                       "messages": [{"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
                                    {"role": "user", "content": "Weather?"},
                                    {"role": "assistant", "content": None, "tool_calls": call},
                                    {"role": "tool", "tool_call_id": "call_1", "content": "22C"}]})
    elif target == "openai_completions_fuzz":
        bodies = [{"model": "m", "prompt": "Once upon a time", "max_tokens": 8},
                  {"model": "m", "prompt": ["a", "b <｜User｜>"], "echo": True, "logprobs": 2, "stream": True},
                  {"model": "m", "prompt": [[1, 2, 3], [128803, 999999]], "echo": True, "logprobs": 5, "max_tokens": 0}]
    else:
        bodies = [{"model": "m", "input": "Hello"},
                  {"model": "m", "instructions": "You are Codex.", "stream": True, "store": False,
                   "reasoning": {"effort": "medium"}, "include": ["reasoning.encrypted_content"],
                   "prompt_cache_key": "k", "parallel_tool_calls": False,
                   "tools": [{"type": "function", "name": "shell", "parameters": {"type": "object"}},
                             {"type": "web_search"}, {"type": "local_shell"}],
                   "input": [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "perm"}]},
                             {"role": "user", "content": [{"type": "input_text", "text": "ls"}]},
                             {"type": "reasoning", "summary": []},
                             {"type": "function_call", "call_id": "c", "name": "shell", "arguments": "{}"},
                             {"type": "function_call_output", "call_id": "c", "output": "a.txt"}]}]
    seeds = [json.dumps(b, ensure_ascii=False).encode() for b in bodies] + [o.encode() for o in outputs]
else:
    cfg = json.load(open(os.path.join(assets, "deepseek-v3-tokenizer", "tokenizer_config.json")))
    seeds = [json.dumps(c["messages"]).encode() for c in golden["chats"]]
    seeds.append(cfg["chat_template"].encode())
    for path in sorted(glob.glob(os.path.join(fixtures, "chat-templates", "*.jinja"))):
        seeds.append(open(path, "rb").read())
for i, s in enumerate(seeds):
    open(os.path.join(out, "seed-%03d" % i), "wb").write(s)
PY
