#!/usr/bin/env bash
# The CUDA backend's device check (issue 13, docs/cuda.md): one prepared run
# on a GPU machine that proves parity with the CPU backend and measures the
# kernels and the engine end to end, writing a JSON report.
#
#   scripts/device-check.sh prepare   on a development machine (nvcc, no GPU
#       needed): builds the parity tests and cuda_bench for the GPU machine
#       into build-device/ (Release, sm_90a + compute_90 PTX, x86-64-v4 host
#       code rather than this CPU's -march=native) and bundles them with the
#       shared libraries the GPU machine lacks (it has glibc 2.39 and the
#       CUDA 13 toolkit, but not Debian's spdlog, fmt, ...) in
#       build-device/bundle: what the device tool carries (under 64 MiB).
#   scripts/device-check.sh run       on the GPU machine, in the repository
#       root: the parity suite (gtest JSON), the merge test, cuda_bench (copy
#       bandwidth, MLA decode, V2-Lite end to end), nvidia-smi; everything
#       into $OUT (default: device-check-out/) and a summary in
#       $OUT/report.json. Each step has its own timeout; the whole run stays
#       within 8 minutes on an H200.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=$root/build-device
bundle=$build/bundle

prepare() {
  set -e
  "$root/scripts/install-deps.sh"
  if [[ ! -f $build/build.ninja ]]; then
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLG_NATIVE=OFF -DLG_CUDA=ON \
      -DCMAKE_CXX_FLAGS="-march=x86-64-v4" -DLG_BUILD_FUZZ=OFF
  fi
  ninja -C "$build" cuda_backend_test mla_merge_test cuda_bench
  rm -rf "$bundle"
  mkdir -p "$bundle/bin" "$bundle/lib"
  for b in tests/cuda/cuda_backend_test tests/cuda/mla_merge_test bench/cuda/cuda_bench; do
    strip -o "$bundle/bin/$(basename "$b")" "$build/$b"
  done
  # Every shared library but glibc's, the loader's, the C++ runtime's (the
  # GPU machine's GCC 13 runtime is newer and serves GCC 12 binaries) and
  # CUDA's own (it has CUDA 13); the rest may differ there or be missing.
  for bin in "$bundle"/bin/*; do
    ldd "$bin" | awk '/=> \// {print $3}'
  done | sort -u | while read -r lib; do
    case $(basename "$lib") in
      libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libstdc++*|libgcc_s*|libcuda.so*|libcublas*|libcudart*) ;;
      *) cp -L "$lib" "$bundle/lib/" ;;
    esac
  done
  du -sh "$bundle"
  echo "prepared $bundle: run 'scripts/device-check.sh run' on the GPU machine with it carried"
}

run() {
  out=${OUT:-$root/device-check-out}
  mkdir -p "$out"
  export LD_LIBRARY_PATH="$bundle/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
  export LG_FIXTURES_DIR=$root/tests/fixtures
  bin=$bundle/bin
  start=$(date +%s)
  { nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version --format=csv; nproc; uname -a; } \
    >"$out/machine.txt" 2>&1
  status=0
  timeout 60 "$bin/mla_merge_test" --gtest_output="json:$out/merge.json" >"$out/merge.log" 2>&1 || status=1
  timeout 240 "$bin/cuda_backend_test" --gtest_output="json:$out/parity.json" >"$out/parity.log" 2>&1 || status=1
  timeout 240 "$bin/cuda_bench" --mode copy,mla,e2e --disk-dir "$out/../device-check-kv" >"$out/bench.jsonl" \
    2>"$out/bench.log" || status=1
  rm -rf "$out/../device-check-kv"
  python3 - "$out" "$status" "$(( $(date +%s) - start ))" <<'EOF'
import json, sys, os
out, status, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
report = {"ok": status == 0, "seconds": seconds}
for name in ("merge", "parity"):
    path = os.path.join(out, name + ".json")
    if os.path.exists(path):
        j = json.load(open(path))
        cases = [t for s in j.get("testsuites", []) for t in s.get("testsuite", [])]
        report[name] = {"tests": j.get("tests"), "failures": j.get("failures"),
                        "skipped": sum(1 for t in cases if t.get("result") == "SKIPPED"),
                        "failed": [t["name"] for t in cases if t.get("failures")]}
bench = []
for line in open(os.path.join(out, "bench.jsonl")) if os.path.exists(os.path.join(out, "bench.jsonl")) else []:
    line = line.strip()
    if line.startswith("{"):
        bench.append(json.loads(line))
report["bench"] = bench
report["parity_lines"] = [l.strip() for l in open(os.path.join(out, "parity.log")) if "[ parity ]" in l] \
    if os.path.exists(os.path.join(out, "parity.log")) else []
json.dump(report, open(os.path.join(out, "report.json"), "w"), indent=1)
print(json.dumps(report, indent=1)[:6000])
EOF
  return $status
}

case ${1:-} in
  prepare) prepare ;;
  run) run ;;
  *) echo "usage: $0 prepare | run" >&2; exit 2 ;;
esac
