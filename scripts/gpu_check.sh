#!/usr/bin/env bash
# strata on a GPU machine in one command (docs/gpu.md, "The GPU check").
#
#   scripts/gpu_check.sh bundle             here: build the release preset (CUDA compiled in) and
#                                           pack bundle/gpu-bundle.tar.xz (under 64 MiB)
#   scripts/gpu_check.sh --dry-run          here: bundle, then list what `run` would run
#   scripts/gpu_check.sh run --out DIR [--only A,B]
#                                           on the GPU machine, in a copy of this repository with
#                                           bundle/ carried: unpack the bundle and run every check
#                                           below (or those whose names start with A or B: one
#                                           device call runs 10 minutes at most), each one's log
#                                           and JSON into DIR
#
# The GPU machine has the CUDA driver, cuBLAS and NCCL (in its Python packages) but none of this
# project's Debian packages and no network, so the bundle carries the binaries (strata and the
# test binaries of build/release) with every shared library they need that is not the C/C++
# runtime or CUDA's, and Open MPI's runtime (mpirun, its plugins and help files), relocated with
# OPAL_PREFIX. cuBLAS and NCCL come from the machine itself.
#
# What `run` runs, in order, each with its own time limit, never stopping at a failure:
#   1. the machine: nvidia-smi, `strata report` (GPU, driver, CUDA, NCCL, PCIe, NUMA)
#   2. the device, stream and event tests on the CUDA device (strata_gpu_tests, '*cuda*')
#   3. every CUDA op against the host op (strata_gpu_cuda_tests), at toy and at the models' shapes
#   4. the host-backend suite: every other test binary, the ZeRO tests on 1 rank
#   5. multi-rank: the comm tests on NCCL and the ZeRO tests under mpirun -np 2 (NCCL refuses two
#      ranks on one GPU; the log says so when it does)
#   6. the demo on the CUDA device and on the host device, 20 steps each (loss curves compared,
#      and the timeline of step 2 of each)
#   7. the optimizer kept on the device: configs/demo_no_offload.json at stages 0-3 on the CUDA
#      device and on the host device, 20 steps each
#   8. benchmarks: strata bench device-optimizer (the 1.3B GPT's partition, beside the
#      device-to-device copy), strata bench h2d, strata bench gemm on the zero3_nvme_offload config
#   9. Hugging Face: folders exported by strata load in transformers with the same loss
#      (scripts/hf_transformers_check.py)
# DIR then holds summary.txt, summary.json (one row per check: name, exit status, seconds) and
# logs.tar.gz (every log, gtest JSON and metrics file); at most 8 files, as the device tool
# brings back.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

bundle_dir=$root/bundle
archive=$bundle_dir/gpu-bundle.tar.xz
build=$root/build/release

usage() {
  sed -n '2,12p' "$0" >&2
  exit 2
}

only=""  # run --only: comma-separated name prefixes

selected() {
  [[ -z $only ]] && return 0
  local prefix
  for prefix in ${only//,/ }; do
    [[ $1 == "$prefix"* ]] && return 0
  done
  return 1
}

# --- bundle (here) -----------------------------------------------------------------------------

# The shared libraries of `binary` that the GPU machine may lack: everything but the C and C++
# runtime (the machine's are newer) and CUDA's own (the machine's driver and Python packages).
wanted_libraries() {
  ldd "$1" | awk '/=> \// {print $3}' | while read -r library; do
    case $(basename "$library") in
      libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | ld-linux*) ;;
      libstdc++.so.* | libgcc_s.so.*) ;;
      libcuda.so.* | libcudart.so.* | libcublas*.so.* | libnccl.so.* | libnvidia*) ;;
      *) echo "$library" ;;
    esac
  done
}

make_bundle() {
  set -e
  command -v nvcc >/dev/null || {
    echo "gpu_check: nvcc is not on PATH: the bundle needs the CUDA build" >&2
    exit 1
  }
  bash scripts/setup.sh
  cmake --preset release >/dev/null
  cmake --build --preset release
  grep -q '^STRATA_CUDA:BOOL=ON' "$build/CMakeCache.txt" || {
    echo "gpu_check: $build was configured with STRATA_CUDA=OFF; run cmake --preset release -DSTRATA_CUDA=ON" >&2
    exit 1
  }
  local stage
  stage=$(mktemp -d)
  mkdir -p "$stage/bin" "$stage/lib" "$stage/mpi"
  cp "$build/tools/strata" "$stage/bin/"
  find "$build/tests" -type f -perm -u+x -name 'strata_*_tests' -exec cp {} "$stage/bin/" \;
  for binary in "$stage"/bin/*; do
    wanted_libraries "$binary"
  done | sort -u | while read -r library; do
    cp -L "$library" "$stage/lib/"
  done
  # Open MPI's runtime, laid out as under /usr so that OPAL_PREFIX relocates it.
  local mpi_lib=/usr/lib/x86_64-linux-gnu/openmpi
  mkdir -p "$stage/mpi/usr/bin" "$stage/mpi/usr/share" "$stage/mpi/usr/lib/x86_64-linux-gnu"
  cp -a "$mpi_lib" "$stage/mpi/usr/lib/x86_64-linux-gnu/"
  cp -a /usr/share/openmpi "$stage/mpi/usr/share/"
  cp -L "$(command -v orterun)" "$stage/mpi/usr/bin/orterun"
  ln -s orterun "$stage/mpi/usr/bin/mpirun"
  for plugin in "$mpi_lib"/lib/openmpi3/*.so; do
    wanted_libraries "$plugin"
  done | sort -u | while read -r library; do
    [[ -e $stage/lib/$(basename "$library") ]] || cp -L "$library" "$stage/lib/"
  done
  git rev-parse HEAD >"$stage/commit"
  echo "$root" >"$stage/source_dir"  # the path the test binaries were built with
  mkdir -p "$bundle_dir"
  tar -C "$stage" -cJf "$archive" .
  rm -rf "$stage"
  local bytes
  bytes=$(stat -c %s "$archive")
  echo "gpu_check: $archive, $((bytes / 1048576)) MiB (the device tool carries at most 64 MiB with the tree)"
  if ((bytes > 48 * 1048576)); then
    echo "gpu_check: the bundle is over 48 MiB: with the working tree it may not travel" >&2
    exit 1
  fi
  set +e
}

# --- run (on the GPU machine) ------------------------------------------------------------------

checks=()     # name|seconds limit|command, in order
add_check() { checks+=("$1|$2|$3"); }

plan_checks() {
  local out=$1
  local b=$2  # the unpacked bundle
  local logs=$out/logs
  add_check machine 60 "nvidia-smi; $b/bin/strata report; $b/bin/strata report --json > $logs/report.json"
  add_check gpu_device_tests 300 "$b/bin/strata_gpu_tests --gtest_filter='*cuda*' --gtest_output=json:$logs/gpu_device_tests.json"
  add_check cuda_ops_vs_host 600 "$b/bin/strata_gpu_cuda_tests --gtest_output=json:$logs/cuda_ops.json"
  local binary
  for binary in base aio cpu_adam gpu_kernels engine engine_memory engine_checkpoint models tools gpu; do
    add_check "host_$binary" 600 "$b/bin/strata_${binary}_tests --gtest_output=json:$logs/host_$binary.json"
  done
  add_check host_engine_zero 600 "$b/bin/strata_engine_zero_tests --gtest_output=json:$logs/host_engine_zero.json"
  add_check nccl_comm_np2 300 "mpirun -np 2 --oversubscribe $b/bin/strata_gpu_comm_tests --gtest_output=json:$logs/nccl_comm_np2.json"
  add_check engine_zero_np2 600 "mpirun -np 2 --oversubscribe $b/bin/strata_engine_zero_tests"
  add_check demo_cuda 600 "cd $logs && $b/bin/strata train --config $root/configs/demo.json --steps 20 --metrics demo_cuda.jsonl --out demo_cuda --timeline demo_cuda/timeline.png"
  add_check demo_host 600 "cd $logs && CUDA_VISIBLE_DEVICES= $b/bin/strata train --config $root/configs/demo.json --steps 20 --metrics demo_host.jsonl --out demo_host --timeline demo_host/timeline.png"
  # The optimizer kept on the device, at every ZeRO stage, on CUDA beside the host device.
  add_check demo_no_offload_stages 600 "cd $logs && for stage in 0 1 2 3; do python3 -c \"import json, sys; c = json.load(open(sys.argv[1])); c['zero_optimization']['stage'] = int(sys.argv[2]); json.dump(c, open(sys.argv[3], 'w'))\" $root/configs/demo_no_offload.json \$stage no_offload_s\$stage.json && $b/bin/strata train --config no_offload_s\$stage.json --steps 20 --metrics no_offload_cuda_s\$stage.jsonl --out no_offload_cuda_s\$stage && CUDA_VISIBLE_DEVICES= $b/bin/strata train --config no_offload_s\$stage.json --steps 20 --metrics no_offload_host_s\$stage.jsonl --out no_offload_host_s\$stage || exit 1; done"
  add_check bench_device_optimizer 300 "for copy in none bf16; do $b/bin/strata bench device-optimizer --params 1310M --copy \$copy --json > $logs/bench_device_optimizer_\$copy.json && $b/bin/strata bench device-optimizer --params 1310M --copy \$copy; done"
  add_check bench_h2d 300 "$b/bin/strata bench h2d --size 1GiB --steps 10 --json > $logs/bench_h2d.json; $b/bin/strata bench h2d --size 1GiB --steps 10"
  add_check bench_gemm 300 "$b/bin/strata bench gemm --config $root/configs/zero3_nvme_offload.json --json > $logs/bench_gemm.json"
  add_check hf_transformers 300 "python3 $root/scripts/hf_transformers_check.py --strata $b/bin/strata --work $logs/hf"
}

# Where the machine keeps cuBLAS and NCCL (PyTorch's wheels), for LD_LIBRARY_PATH.
machine_cuda_libraries() {
  find / -xdev \( -name 'libcublas.so.1[0-9]*' -o -name 'libnccl.so.2*' -o -name 'libcublasLt.so.1[0-9]*' \) \
    -not -path '*/proc/*' 2>/dev/null | xargs -r -n1 dirname | sort -u | paste -sd:
}

run_checks() {
  local out=$1
  local dry_run=$2
  local unpacked=/tmp/strata-gpu-bundle
  mkdir -p "$out/logs"
  if [[ $dry_run == 1 ]]; then
    unpacked="<bundle>"
  else
    [[ -f $archive ]] || {
      echo "gpu_check: $archive is missing: run scripts/gpu_check.sh bundle here and carry bundle/" >&2
      exit 2
    }
    rm -rf "$unpacked" && mkdir -p "$unpacked" && tar -C "$unpacked" -xJf "$archive"
    export LD_LIBRARY_PATH="$unpacked/lib:$(machine_cuda_libraries)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export OPAL_PREFIX=$unpacked/mpi/usr PATH=$unpacked/mpi/usr/bin:$PATH
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    # The test binaries name the source tree and the strata binary by the paths they were built
    # with; point those at this copy and the bundle.
    local built_root
    built_root=$(cat "$unpacked/source_dir")
    if [[ -n $built_root && $built_root != "$root" && ! -e $built_root ]]; then
      mkdir -p "$(dirname "$built_root")" && ln -s "$root" "$built_root"
    fi
    mkdir -p "$root/build/release/tools"
    [[ -e $root/build/release/tools/strata ]] || ln -s "$unpacked/bin/strata" "$root/build/release/tools/strata"
  fi
  plan_checks "$out" "$unpacked"
  local summary_json="[" summary_text="" first=1 check name limit command
  for check in "${checks[@]}"; do
    IFS='|' read -r name limit command <<<"$check"
    selected "$name" || continue
    if [[ $dry_run == 1 ]]; then
      printf '%-20s %4ss  %s\n' "$name" "$limit" "$command"
      continue
    fi
    local start status seconds
    start=$(date +%s%N)
    timeout "$limit" bash -c "$command" >"$out/logs/$name.log" 2>&1
    status=$?
    seconds=$(awk -v a="$start" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')
    printf '%-20s exit %3d  %7.1f s\n' "$name" "$status" "$seconds" | tee -a "$out/summary.txt"
    [[ $first == 1 ]] || summary_json+=","
    first=0
    summary_json+="{\"name\":\"$name\",\"exit\":$status,\"seconds\":$seconds}"
  done
  [[ $dry_run == 1 ]] && return 0
  echo "$summary_json]" >"$out/summary.json"
  tar -C "$out" -czf "$out/logs.tar.gz" logs && rm -rf "$out/logs"
}

case ${1:-} in
  bundle) make_bundle ;;
  --dry-run)
    make_bundle
    echo "gpu_check run --out DIR would run, on the GPU machine:"
    run_checks "$(mktemp -d)" 1
    ;;
  run)
    [[ ${2:-} == --out && -n ${3:-} ]] || usage
    [[ ${4:-} == --only && -n ${5:-} ]] && only=$5
    run_checks "$3" 0
    ;;
  *) usage ;;
esac
