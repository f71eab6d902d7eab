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
if target == "tokenizer_fuzz":
    seeds = [t["text"].encode() for t in golden["texts"]] + [c["text"].encode() for c in golden["chats"]]
else:
    cfg = json.load(open(os.path.join(assets, "deepseek-v3-tokenizer", "tokenizer_config.json")))
    seeds = [json.dumps(c["messages"]).encode() for c in golden["chats"]]
    seeds.append(cfg["chat_template"].encode())
    for path in sorted(glob.glob(os.path.join(fixtures, "chat-templates", "*.jinja"))):
        seeds.append(open(path, "rb").read())
for i, s in enumerate(seeds):
    open(os.path.join(out, "seed-%03d" % i), "wb").write(s)
PY
