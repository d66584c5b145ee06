#!/usr/bin/env bash
# strata on a GPU machine in one command (docs/gpu.md, "The GPU check").
#
#   scripts/gpu_check.sh bundle             here: build the release preset (CUDA compiled in) and
#                                           pack bundle/gpu-bundle.tar.xz (under 48 MiB)
#   scripts/gpu_check.sh list               here: what `run` runs, each check's time limit
#   scripts/gpu_check.sh --dry-run          here: bundle, then list
#   scripts/gpu_check.sh run --out DIR [--only A,B] [--budget SECONDS]
#                                           on the GPU machine, in a copy of this repository with
#                                           bundle/ carried: unpack the bundle and run the checks
#                                           below in order (or those whose names start with A or
#                                           B), each one's log, tables and JSON into DIR, all
#                                           within SECONDS (default 540: one device call runs 600
#                                           at most)
#   scripts/gpu_check.sh plot FETCHED DIR   here: unpack FETCHED/logs.tar.gz (what `run` left in
#                                           its DIR) into DIR and draw every loss curve and
#                                           timeline it holds, and the demo's CUDA and host curves
#                                           in one PNG (the GPU machine has no gnuplot)
#
# The GPU machine has the CUDA driver, cuBLAS and NCCL (in its Python packages), torch and
# transformers, but none of this project's Debian packages and no network, so the bundle carries
# the binaries (strata and the test binaries of build/release) with every shared library they
# need that is not the C/C++ runtime or CUDA's, and Open MPI's runtime (mpirun, its plugins and
# help files), relocated with OPAL_PREFIX. cuBLAS and NCCL come from the machine itself.
#
# GPU machines are often lent for a short time, a start included, so every check has a time
# limit, the checks run most valuable first, and `run` starts none past its budget: a check gets
# at most what is left of it, and those that did not fit are listed as not run, to be named with
# --only in a second call. The host-backend suites are not run there: they run here, on every
# build. In order, never stopping at a failure:
#   machine           nvidia-smi, `strata report` (GPU, driver, CUDA, NCCL, PCIe, NUMA)
#   placements_cpu    configs/gpt_1p3b_in_gpu.json as a step its gradients cannot change
#                     (exact_step_config) in GPU memory, with the optimizer on the CPU, and with
#                     parameters and optimizer there: s/step, tokens/s and the compute stream's
#                     busy fraction (scripts/offload_placements.py)
#   torch_peer        PyTorch in GPU memory on the same config (scripts/torch_peer.py torch)
#   fsdp2_peer        PyTorch FSDP2 with CPUOffloadPolicy on the same config (torch_peer.py fsdp2)
#   bench_adam        CPU Adam over 1.31B parameters beside its memory bound (the CPU's bound)
#   bench_offload_nvme the optimizer's step on this disk beside Adam alone and I/O alone (the
#                     NVMe placements' bound)
#   placements_nvme   the optimizer on NVMe, and parameters and optimizer there
#   bench_gemm_bf16   the 1.3B GPT's products in bf16 through strata's ops (`strata bench gemm
#                     --device cuda`) beside plain torch.matmul on the same shapes
#                     (scripts/torch_matmul_peer.py): gemm_bf16.tsv
#   bench_attention   causal attention in bf16, forward and forward+backward, at B8 H16 T1024 D128
#                     and B4 H16 T2048 D128 through strata's ops (`strata bench attention --device
#                     cuda`) beside torch's scaled_dot_product_attention with each of its backends
#                     (scripts/torch_sdpa_peer.py): attention.tsv
#   generate_reference strata generate's greedy continuations of the Hugging Face fixtures (the
#                     KV cache, batched) against a float64 torch forward
#                     (scripts/generate_reference.py)
#   generate_1p3b     generation with the KV cache on the 1.3B GPT in bf16 at batch 1 and 8, the
#                     weights in GPU memory and in CPU memory: prefill and decode tokens/s beside
#                     HBM's and PCIe's bounds (`strata bench decode`)
#   bench_decode      the same on GPT-2 small at batch 1, 8 and 32 over 1,024-token prompts
#   gpu_device_tests  the device, stream, event and timeline tests on CUDA (strata_gpu_tests)
#   cuda_tests        every CUDA op against the host op, the optimizer kernels, the timeline rows
#                     (strata_gpu_cuda_tests)
#   sass              accumulate_kernel without FFMA, HMMA in the attention kernels (cuobjdump)
#   gpt_1p3b          configs/gpt_1p3b_in_gpu.json as it is, 6 steps with the timeline of step 2;
#                     tokens/s and MFU of steps 3-6 (scripts/torch_peer.py strata)
#   zero_stages       configs/demo_no_offload.json at stages 0-3, and at stages 1-3 with the
#                     optimizer on the CPU (and stage 3 with the parameters there too), 20 steps
#                     each on the CUDA device and on the host device; losses compared
#   demo              configs/demo.json for 300 steps on the CUDA device and on the host device
#                     side by side, the timeline of step 2 of each; losses compared
#   hf_transformers   folders exported by strata against transformers on CUDA
#                     (scripts/hf_transformers_check.py)
#   cuda_real_shapes  every CUDA op at the models' shapes (the longest suite)
#   bench_device_optimizer, nccl_comm_np2, bench_h2d, bench_gemm
# DIR then holds summary.txt, summary.json (one row per check: name, exit status, seconds, limit)
# and logs.tar.gz (every log, gtest JSON, metrics file, loss and timeline table with its gnuplot
# script); at most 8 files, as the device tool brings back.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

bundle_dir=$root/bundle
archive=$bundle_dir/gpu-bundle.tar.xz
build=$root/build/release

usage() {
  sed -n '2,20p' "$0" >&2
  exit 2
}

only=""      # run --only: comma-separated name prefixes
budget=540   # run --budget: seconds for all the checks of one call

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

# Compares the train loss of two `strata train --metrics` files step by step: prints the largest
# difference relative to the second (the host device's) and fails beyond `tolerance`. Both
# backends compute in fp32 from the same bf16 parameter copies, so they part only by rounding.
compare_losses() {
  python3 - "$@" <<'EOF'
import json, sys
cuda_file, host_file, tolerance = sys.argv[1], sys.argv[2], float(sys.argv[3])
read = lambda path: {r["step"]: r["loss"] for r in map(json.loads, open(path)) if "loss" in r}
cuda, host = read(cuda_file), read(host_file)
steps = sorted(set(cuda) & set(host))
if not steps or len(steps) != len(host):
    sys.exit(f"losses: {cuda_file} has {len(cuda)} steps, {host_file} {len(host)}")
# Two devices sum in different orders, and in 16-bit compute a last-bit difference flips a
# rounding now and then, so the runs drift apart step by step: each step is held to `tolerance`
# over the first 20 steps, and the whole run by its 20-step means (within 10%, the tolerance
# scripts/bench_compute_precision.sh states for bf16 against fp32).
early = [s for s in steps if s <= 20]
worst = max(early, key=lambda s: abs(cuda[s] - host[s]) / abs(host[s]))
relative = abs(cuda[worst] - host[worst]) / abs(host[worst])
mean = lambda losses, chunk: sum(losses[s] for s in chunk) / len(chunk)
chunks = [steps[i:i + 20] for i in range(0, len(steps), 20)]
gap = max(abs(mean(cuda, c) - mean(host, c)) / abs(mean(host, c)) for c in chunks)
last = steps[-1]
ok = relative <= tolerance and gap <= 0.1
print(f"losses over {len(steps)} steps: last {cuda[last]:.4f} (cuda) {host[last]:.4f} (host); "
      f"largest difference in the first 20 steps {relative:.2e} of the host's at step {worst} "
      f"(limit {tolerance:g}), largest gap of 20-step means {gap:.2%} (limit 10%): "
      f"{'within' if ok else 'BEYOND'}")
sys.exit(0 if ok else 1)
EOF
}
export -f compare_losses

# `strata train` on the CUDA device and, at the same time, on the host device (CUDA_VISIBLE_DEVICES
# empty), each in its own folder under the current one (their swap files too, for configs whose
# nvme_path is "."), then their losses compared: train_pair NAME CONFIG STEPS [train options].
train_pair() {
  local name=$1 config=$2 steps=$3 device pid failed=0 pids=()
  shift 3
  for device in cuda host; do
    mkdir -p "$name/$device"
    (
      cd "$name/$device" || exit 1
      [[ $device == host ]] && export CUDA_VISIBLE_DEVICES=
      "$STRATA" train --config "$config" --steps "$steps" --metrics metrics.jsonl --out . "$@" \
        >train.log 2>&1
    ) &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do
    wait "$pid" || failed=1
  done
  tail -n 4 "$name/cuda/train.log" "$name/host/train.log"
  # open_device falls back to the host device without a usable GPU: that is no CUDA run.
  if grep -q "using the host device" "$name/cuda/train.log"; then
    echo "$name: the CUDA run found no usable GPU and ran on the host device"
    failed=1
  fi
  ((failed == 0)) && compare_losses "$name/cuda/metrics.jsonl" "$name/host/metrics.jsonl" 2e-2
}
export -f train_pair

# configs/demo_no_offload.json with ZeRO `stage` and the given offload devices, to `target`.
zero_config() {
  python3 - "$@" <<'EOF'
import json, sys
source, stage, param, optimizer, target = sys.argv[1:]
config = json.load(open(source))
zero = config["zero_optimization"]
zero["stage"] = int(stage)
zero["offload_param"] = {"device": param, "pin_memory": True}
zero["offload_optimizer"] = {"device": optimizer, "pin_memory": True}
config["strata"]["job_name"] = f"zero-stage{stage}-{param}-{optimizer}"
json.dump(config, open(target, "w"), indent=2)
EOF
}
export -f zero_config

# `source` as a step its gradients cannot change, to `target`: gradient_clipping 0 and bf16 without
# the overflow check (as PyTorch's bf16 autocast, which checks nothing). Then the offloaded
# optimizer's step beside backward is exact and on by default; with a clip or the check it may
# step only the window of sub-groups it keeps copies of. exact_step_config SOURCE TARGET.
exact_step_config() {
  python3 - "$@" <<'EOF'
import json, sys
source, target = sys.argv[1:]
config = json.load(open(source))
config["gradient_clipping"] = 0.0
config.setdefault("bf16", {})["check_grad_overflow"] = False
json.dump(config, open(target, "w"), indent=2)
EOF
}
export -f exact_step_config

# The bf16 products of `config`'s GPT through strata's ops on the GPU and through plain
# torch.matmul on the same shapes, each on its own (the peer computes the shapes from the config,
# so it runs even where strata fails), then side by side: strata.json, torch.json and
# gemm_bf16.tsv (shape, m, n, k, direction, TFLOP/s of each, ratio) into the current folder.
# gemm_bf16 STRATA PEER_SCRIPT CONFIG.
gemm_bf16() {
  local strata=$1 peer=$2 config=$3 failed=0
  "$strata" bench gemm --device cuda --dtype bfloat16 --config "$config" --json >strata.json ||
    failed=1
  python3 "$peer" torch --config "$config" --dtype bfloat16 --out torch.json >/dev/null || failed=1
  ((failed == 0)) || return 1
  python3 "$peer" compare strata.json torch.json --tsv gemm_bf16.tsv
}
export -f gemm_bf16

# Causal attention in bf16 through strata's ops on the GPU (as training runs it: cuDNN's fused
# attention where it builds a plan, each row naming the kernels that ran) and through torch's
# scaled_dot_product_attention with each of its backends, on `strata bench attention`'s default
# shapes, each on its own (so the peer runs even where strata fails), then side by side:
# strata.json, torch.json and attention.tsv (shape, direction, TFLOP/s of strata and of each
# backend, the best, the ratio to it) into the current folder; strata's own kernels alone into
# strata_kernels.json. attention_bf16 STRATA PEER_SCRIPT.
attention_bf16() {
  local strata=$1 peer=$2 failed=0
  "$strata" bench attention --device cuda --dtype bfloat16 --repeats 10 --json >strata.json ||
    failed=1
  "$strata" bench attention --device cuda --dtype bfloat16 --repeats 10 --kernels strata \
    --json >strata_kernels.json || failed=1
  python3 "$peer" torch --dtype bfloat16 --repeats 10 --out torch.json >/dev/null || failed=1
  ((failed == 0)) || return 1
  python3 "$peer" compare strata.json torch.json --tsv attention.tsv
}
export -f attention_bf16

# The SASS of strata's own kernels in BINARY (cuobjdump, from the CUDA toolkit where the machine
# has one): accumulate_kernel adds a product it has rounded (FMUL then FADD, no FFMA, as the host
# does), and the count of tensor-core instructions (HMMA/HGMMA) in strata's kernels, which leave
# the products to cuBLASLt but for the attention's. Fails when accumulate_kernel has an FFMA, one
# of the tensor-core attention kernels (the forward, the backward's key and query kernels) has no
# HMMA, or cuobjdump is missing.
sass_check() {
  local binary=$1 tool sass accumulate ffma kernel hmma missing=0
  tool=$(command -v cuobjdump || true)
  for candidate in /usr/local/cuda*/bin/cuobjdump; do
    [[ -z $tool && -x $candidate ]] && tool=$candidate
  done
  if [[ -z $tool ]]; then
    echo "sass: no cuobjdump on this machine (it comes with the CUDA toolkit)"
    return 1
  fi
  sass=$("$tool" -sass "$binary")
  accumulate=$(awk '/Function : / {on = /accumulate_kernel/} on' <<<"$sass")
  ffma=$(grep -c FFMA <<<"$accumulate" || true)
  echo "accumulate_kernel: $(grep -c FMUL <<<"$accumulate" || true) FMUL, $(grep -c FADD <<<"$accumulate" || true) FADD, $ffma FFMA"
  echo "tensor-core instructions in strata's kernels: $(grep -cE 'HMMA|HGMMA' <<<"$sass" || true)"
  for kernel in attention_forward_mma_kernel attention_backward_key_mma_kernel \
    attention_backward_query_mma_kernel; do
    hmma=$(awk -v kernel="$kernel" '/Function : / {on = index($0, kernel) > 0} on' <<<"$sass" |
      grep -c HMMA || true)
    echo "of them in $kernel: $hmma"
    [[ $hmma -gt 0 ]] || missing=1
  done
  [[ $ffma == 0 && $missing == 0 ]]
}
export -f sass_check

plan_checks() {
  local out=$1
  local b=$2  # the unpacked bundle
  local logs=$out/logs
  local peer="python3 $root/scripts/torch_peer.py"
  local big=$root/configs/gpt_1p3b_in_gpu.json
  add_check machine 30 "nvidia-smi; $b/bin/strata report; $b/bin/strata report --json > $logs/report.json"
  # The offloaded step's figures: the placements and both peers on the GPT as a step its gradients
  # cannot change (exact_step_config), where the CPU optimizer steps beside backward by default.
  local open=$logs/gpt_1p3b_exact_step.json
  add_check placements_cpu 240 "exact_step_config $big $open && mkdir -p $logs/placements && python3 $root/scripts/offload_placements.py --config $open --strata $b/bin/strata --swap $logs/placements/swap --out $logs/placements --only gpu,optimizer_cpu,params_optimizer_cpu"
  add_check torch_peer 90 "$peer torch --config $open --steps 10 --warmup 3"
  add_check fsdp2_peer 90 "$peer fsdp2 --config $open --steps 3 --warmup 2"
  add_check bench_adam 40 "$b/bin/strata bench adam --params 1310M --json > $logs/bench_adam.json; cat $logs/bench_adam.json"
  # The NVMe placements' bound: the disk and CPU Adam alone, on 512M of the 1,310M parameters.
  add_check bench_offload_nvme 60 "mkdir -p $logs/offload_swap && $b/bin/strata bench offload --params 512M --device nvme --path $logs/offload_swap --sub-group-size 100M --steps 1 --json > $logs/bench_offload_nvme.json; rm -rf $logs/offload_swap; cat $logs/bench_offload_nvme.json"
  add_check placements_nvme 200 "mkdir -p $logs/placements_nvme && python3 $root/scripts/offload_placements.py --config $open --strata $b/bin/strata --swap $logs/placements_nvme/swap --out $logs/placements_nvme --only optimizer_nvme,params_optimizer_nvme --steps 3 --skip 1 --timeline-step 2; rm -rf $logs/placements_nvme/swap"
  # Then the products the GPU work is judged by, in well under a minute, before any suite that
  # may run to its limit.
  add_check bench_gemm_bf16 75 "mkdir -p $logs/gemm_bf16 && cd $logs/gemm_bf16 && gemm_bf16 $b/bin/strata $root/scripts/torch_matmul_peer.py $big"
  add_check bench_attention 60 "mkdir -p $logs/attention && cd $logs/attention && attention_bf16 $b/bin/strata $root/scripts/torch_sdpa_peer.py"
  # Generation with the KV cache: the fixtures' greedy continuations against torch in float64,
  # then decode tokens/s beside HBM's bound (and with the weights in CPU memory, PCIe's).
  add_check generate_reference 60 "python3 $root/scripts/generate_reference.py --strata $b/bin/strata | tee $logs/generate_reference.txt"
  add_check generate_1p3b 150 "for offload in none cpu; do $b/bin/strata bench decode --device cuda --dtype bfloat16 --model 1p3b --batch 1,8 --prompt 512 --new-tokens 64 --offload \$offload --json > $logs/generate_1p3b_\$offload.json && cat $logs/generate_1p3b_\$offload.json; done"
  add_check bench_decode 60 "$b/bin/strata bench decode --device cuda --dtype bfloat16 --model 125m --batch 1,8,32 --prompt 1024 --new-tokens 128 --json > $logs/bench_decode.json; cat $logs/bench_decode.json"
  add_check gpu_device_tests 120 "$b/bin/strata_gpu_tests --gtest_filter='*cuda*' --gtest_output=json:$logs/gpu_device_tests.json"
  add_check cuda_tests 180 "$b/bin/strata_gpu_cuda_tests --gtest_filter='-Types/CudaRealShapesTest.*:Types/CudnnAttentionTest.ModelShapes*:CudaOptimizerTest.TenStepsAreTheTwinBitForBitAndWithinTheBoundOfCpuAdam' --gtest_output=json:$logs/cuda_tests.json"
  add_check sass 150 "sass_check $b/bin/strata_gpu_cuda_tests | tee $logs/sass.txt"
  add_check gpt_1p3b 180 "mkdir -p $logs/gpt_1p3b && cd $logs/gpt_1p3b && $b/bin/strata train --config $big --steps 6 --eval-every 1000 --metrics metrics.jsonl --out . --timeline timeline.png --timeline-step 2 && $peer strata --config $big --metrics metrics.jsonl --skip 2"
  add_check zero_stages 150 "mkdir -p $logs/zero && cd $logs/zero && failed=0 && for variant in 0:none:none 1:none:none 2:none:none 3:none:none 1:none:cpu 2:none:cpu 3:none:cpu 3:cpu:cpu; do IFS=: read -r stage param optimizer <<<\$variant; name=stage\${stage}_\${param}_\${optimizer}; zero_config $root/configs/demo_no_offload.json \$stage \$param \$optimizer \$PWD/\$name.json && train_pair \$name \$PWD/\$name.json 20 || failed=1; done; exit \$failed"
  add_check demo 240 "mkdir -p $logs/demo && cd $logs && train_pair demo $root/configs/demo.json 300 --timeline timeline.png --timeline-step 2"
  add_check hf_transformers 180 "python3 $root/scripts/hf_transformers_check.py --strata $b/bin/strata --work $logs/hf --device cuda"
  add_check cuda_real_shapes 300 "$b/bin/strata_gpu_cuda_tests --gtest_filter='Types/CudaRealShapesTest.*:Types/CudnnAttentionTest.ModelShapes*' --gtest_output=json:$logs/cuda_real_shapes.json"
  add_check bench_device_optimizer 60 "for copy in none bf16; do $b/bin/strata bench device-optimizer --params 1310M --copy \$copy --json > $logs/bench_device_optimizer_\$copy.json && cat $logs/bench_device_optimizer_\$copy.json; done"
  add_check nccl_comm_np2 60 "mpirun -np 2 --oversubscribe $b/bin/strata_gpu_comm_tests --gtest_output=json:$logs/nccl_comm_np2.json"
  add_check bench_h2d 40 "$b/bin/strata bench h2d --size 1GiB --steps 5 --json > $logs/bench_h2d.json; cat $logs/bench_h2d.json"
  add_check bench_gemm 60 "$b/bin/strata bench gemm --config $root/configs/zero3_nvme_offload.json --json > $logs/bench_gemm.json; cat $logs/bench_gemm.json"
}

# Where the machine keeps cuBLAS, NCCL and cuDNN 9 (PyTorch's wheels), for LD_LIBRARY_PATH.
machine_cuda_libraries() {
  find / -xdev \( -name 'libcublas.so.1[0-9]*' -o -name 'libnccl.so.2*' -o -name 'libcublasLt.so.1[0-9]*' \
    -o -name 'libcudnn.so.9*' \) -not -path '*/proc/*' -printf '%h\n' 2>/dev/null | sort -u | paste -sd:
}

# Unpacks the bundle and points the machine's paths at it; `unpacked` is where.
prepare_machine() {
  local unpacked=$1
  [[ -f $archive ]] || {
    echo "gpu_check: $archive is missing: run scripts/gpu_check.sh bundle here and carry bundle/" >&2
    exit 2
  }
  rm -rf "$unpacked" && mkdir -p "$unpacked" && tar -C "$unpacked" -xJf "$archive"
  local machine_libraries
  machine_libraries=$(machine_cuda_libraries)
  export LD_LIBRARY_PATH="$unpacked/lib:$machine_libraries${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # The cuDNN the attention will load (`strata report`'s attention line names the one it did).
  local cudnn_found=""
  if [[ -n $machine_libraries ]]; then
    cudnn_found=$(find ${machine_libraries//:/ } -maxdepth 1 -name 'libcudnn.so.9*' 2>/dev/null |
      head -1)
  fi
  echo "gpu_check: cuDNN for attention: ${cudnn_found:-none found, so attention runs on the strata kernels}"
  export OPAL_PREFIX=$unpacked/mpi/usr PATH=$unpacked/mpi/usr/bin:$PATH
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export STRATA=$unpacked/bin/strata
  # The test binaries name the source tree and the strata binary by the paths they were built
  # with; point those at this copy and the bundle.
  local built_root
  built_root=$(cat "$unpacked/source_dir")
  if [[ -n $built_root && $built_root != "$root" && ! -e $built_root ]]; then
    mkdir -p "$(dirname "$built_root")" && ln -s "$root" "$built_root"
  fi
  mkdir -p "$root/build/release/tools"
  [[ -e $root/build/release/tools/strata ]] || ln -s "$STRATA" "$root/build/release/tools/strata"
}

run_checks() {
  local out=$1
  local dry_run=$2
  local unpacked=/tmp/strata-gpu-bundle
  local started=$SECONDS
  if [[ $dry_run == 1 ]]; then
    unpacked="<bundle>"
  else
    mkdir -p "$out/logs"
    prepare_machine "$unpacked"
  fi
  plan_checks "$out" "$unpacked"
  local summary_json="[" first=1 check name limit command total=0 not_run=""
  for check in "${checks[@]}"; do
    IFS='|' read -r name limit command <<<"$check"
    selected "$name" || continue
    if [[ $dry_run == 1 ]]; then
      printf '%-24s %4ss  %s\n' "$name" "$limit" "$command"
      total=$((total + limit))
      continue
    fi
    # What is left of the budget, less 10 s for a check killed at its limit to end.
    local left=$((budget - (SECONDS - started) - 10))
    local status seconds start
    if ((left < 20)); then
      printf '%-24s not run: %s s of the budget of %s s left\n' "$name" "$((left + 10))" "$budget" | tee -a "$out/summary.txt"
      not_run+="${not_run:+,}$name"
      status=null seconds=0
    else
      ((limit > left)) && limit=$left
      start=$(date +%s%N)
      timeout -k 10 "$limit" bash -c "$command" >"$out/logs/$name.log" 2>&1
      status=$?
      seconds=$(awk -v a="$start" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')
      printf '%-24s exit %3d  %7.1f s of %4d\n' "$name" "$status" "$seconds" "$limit" | tee -a "$out/summary.txt"
    fi
    [[ $first == 1 ]] || summary_json+=","
    first=0
    summary_json+="{\"name\":\"$name\",\"exit\":$status,\"seconds\":$seconds,\"limit\":$limit}"
  done
  if [[ $dry_run == 1 ]]; then
    echo "time limits: $total s in all; one call runs what fits in --budget (default $budget s)"
    return 0
  fi
  [[ -z $not_run ]] || echo "not run for the budget: rerun with --only $not_run" | tee -a "$out/summary.txt"
  echo "$summary_json]" >"$out/summary.json"
  # Only logs and tables travel back: swap files and checkpoints stay (a run stopped at its limit
  # saves its checkpoint on SIGTERM, so it may still be writing one here). tar's status 1 says a
  # file changed while it was read, which such a run's logs may do; the archive is still whole.
  tar -C "$out" -czf "$out/logs.tar.gz" --warning=no-file-changed --exclude='*.bin' \
    --exclude='*.safetensors' --exclude='swap' logs
  local tar_status=$?
  ((tar_status <= 1)) && rm -rf "$out/logs"
}

# --- plot (here, on what `run` brought back) ---------------------------------------------------

plot_fetched() {
  local fetched=$1 target=$2
  [[ -f $fetched/logs.tar.gz ]] || {
    echo "gpu_check: $fetched/logs.tar.gz is missing: name the folder the device tool brought back" >&2
    exit 2
  }
  command -v gnuplot >/dev/null || {
    echo "gpu_check: gnuplot is missing: run scripts/setup.sh (it installs gnuplot-nox)" >&2
    exit 1
  }
  mkdir -p "$target" && tar -C "$target" -xzf "$fetched/logs.tar.gz"
  # strata writes each curve's and timeline's gnuplot script beside its table, naming both by
  # their names alone, so each redraws where it lies.
  local script failed=0
  while IFS= read -r script; do
    if (cd "$(dirname "$script")" && gnuplot "$(basename "$script")"); then
      echo "drew ${script%.gp}.png"
    else
      echo "gpu_check: gnuplot failed on $script" >&2
      failed=1
    fi
  done < <(find "$target" -name '*.gp' | sort)
  local demo=$target/logs/demo
  if [[ -f $demo/cuda/loss.tsv && -f $demo/host/loss.tsv ]]; then
    gnuplot -e "tables='$demo/cuda/loss.tsv $demo/host/loss.tsv'; titles='CUDA host'; pngfile='$demo/cuda_and_host_loss.png'; plottitle='strata train, configs/demo.json: the CUDA device beside the host device'" \
      "$root/scripts/plot_losses.gp" && echo "drew $demo/cuda_and_host_loss.png" || failed=1
  fi
  return $failed
}

case ${1:-} in
  bundle) make_bundle ;;
  list) run_checks "<DIR>" 1 ;;
  --dry-run)
    make_bundle
    echo "gpu_check run --out DIR would run, on the GPU machine:"
    run_checks "<DIR>" 1
    ;;
  run)
    [[ ${2:-} == --out && -n ${3:-} ]] || usage
    out=$3
    shift 3
    while (($# > 0)); do
      case $1 in
        --only) only=${2:?}; shift 2 ;;
        --budget) budget=${2:?}; shift 2 ;;
        *) usage ;;
      esac
    done
    run_checks "$out" 0
    ;;
  plot)
    [[ -n ${2:-} && -n ${3:-} ]] || usage
    plot_fetched "$2" "$3"
    ;;
  *) usage ;;
esac
